"""A run in plain words, for a reader who will not read the numbers first (a stakeholder, a
newcomer): the verdict as a sentence, then the findings (where the export starts to diverge,
float32 rounding or a bug), when the run knows them, then the technical notes (how the
inputs were fed, the tolerances). The HTML report and the dashboard's Overview say a run in
this order, in these words; the numbers (per-output sentences, tables, figures) come between
the findings and the notes. Plain text: names are the user's, never markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from parity.judge.noise_floor import ROUNDING_RATIO
from parity.labels import OUTSIDE_MODULES
from parity.results import RunKind, Status, ValidationRun
from parity.run.input_binding import BY_POSITION, binding_text
from parity.text import all_text, count_text, tolerance_text
from parity.verdict import Verdict

MAX_NOISE_FINDINGS = 4


@dataclass(frozen=True)
class PlainSummary:
    """`headline`: the verdict in one sentence; `findings`: what is known about why;
    `notes`: the technical conditions the verdict holds under."""

    headline: str
    findings: tuple[str, ...]
    notes: tuple[str, ...]


def reference_words(run: ValidationRun) -> str:
    """What the export is held against: PyTorch, stored outputs, or a reference ONNX file."""
    kind = run.provenance.kind
    if kind is RunKind.REFERENCE:
        return "the stored reference outputs"
    if kind is RunKind.ONNX:
        return "the reference ONNX file"
    return "PyTorch"


DEMO_EXPORT = "the demo's own export"


def onnx_words(run: ValidationRun) -> str:
    """The run's ONNX file as a reader should see it: a demo's export by what it is (its path
    is Parity's cache, of no use to a reader), any other file by its path."""
    from parity.load.specs import demo_name
    from parity.run.config_json import is_demo_export

    if demo_name(run.model) is not None and is_demo_export(run.onnx):
        return DEMO_EXPORT
    return run.onnx


def headline(run: ValidationRun) -> str:
    """The verdict as a sentence: "The export does not match PyTorch: 1 of 2 outputs differ
    beyond the allowed error." """
    ref = reference_words(run)
    if run.is_multi_candidate:
        return _candidates_headline(run, ref)
    if run.verdict is Verdict.ERROR:
        info = run.candidate_list[0]
        why = f": {info.error}" if info.error else ""
        return f"Parity could not run the ONNX file{why}."
    outputs = run.output_names
    sets = count_text(len(run.input_sets), "input set")
    if run.verdict is Verdict.PASS:
        every = all_text(len(outputs), "output") + (" agrees" if len(outputs) == 1 else " agree")
        return f"The export matches {ref}: {every} within the allowed error on {sets}."
    failing = run.failing
    statuses = {c.status for c in run.outputs if c.name in failing}
    if statuses & {Status.SHAPE_MISMATCH, Status.DTYPE_MISMATCH, Status.MISSING}:
        how = "do not match (a shape, a type or a missing output)"
    elif Status.ERROR in statuses:  # ONNX Runtime raised on some input set
        raised = sorted({c.input_set for c in run.outputs if c.status is Status.ERROR})
        how = f"fail: ONNX Runtime raised on {len(raised)} of {sets}"
        if Status.FAIL in statuses:
            how += " and values differ beyond the allowed error on others"
    else:
        how = "differ beyond the allowed error"
    said = f"{len(failing)} of {count_text(len(outputs), 'output')}"
    return f"The export does not match {ref}: {said} {how}."


def _candidates_headline(run: ValidationRun, ref: str) -> str:
    verdicts = [v.verdict for v in run.candidate_runs]
    n = len(verdicts)
    bad = sum(v is not Verdict.PASS for v in verdicts)
    errors = sum(v is Verdict.ERROR for v in verdicts)
    if not bad:
        return f"Every one of the {n} ONNX candidates matches {ref} within the allowed error."
    could_not = f" ({errors} could not be run)" if errors else ""
    return f"{bad} of {n} ONNX candidates do not match {ref}{could_not}."


def findings(run: ValidationRun, where: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """What the run knows about why it fails: where inside the model the outputs start to
    differ (--layers), whether the error is float32 rounding or a bug (--noise-floor, or the
    first divergence's node re-run alone), and where in each failing output the mismatches
    lie (`where`: output name -> parity.judge.where's summary, when the caller has it);
    () for a passing run."""
    if run.verdict is not Verdict.FAIL:
        return ()
    found: list[str] = []
    layers = run.layers
    first = layers.first_divergence if layers is not None else None
    born = False
    if first is not None:
        node = f"{first.onnx_op} node {first.onnx_node}"
        found.append(
            f"The export starts to diverge in {first.torch_module}, at its {node}."
            if first.torch_module
            else f"The export starts to diverge at the {node}, {OUTSIDE_MODULES[1:-1]}."
        )
        confirmation = layers.confirmation_of(first)
        born = getattr(confirmation, "outcome", None) == "born"
        if born:
            found.append(
                f"Not rounding: run alone on PyTorch's exact inputs, that {first.onnx_op} node "
                "still gives a different answer, so the error is made there (a bug in the "
                "export, not float32 noise carried along)."
            )
    noise = _noise_findings(run)
    found += noise
    for name, said in list((where or {}).items())[:MAX_NOISE_FINDINGS]:
        if said:
            found.append(f"In {name}, {said}.")
    missing = []
    if layers is None:
        missing.append("where inside the model the outputs start to differ (--layers)")
    if not noise and not born:
        missing.append("whether the difference is float32 rounding (--noise-floor)")
    if missing:
        found.append(f"Not measured in this run: {' and '.join(missing)}.")
    return tuple(found)


def _noise_findings(run: ValidationRun) -> list[str]:
    """Per failing output whose rounding noise was measured: rounding, or not."""
    worst: dict[str, object] = {}
    for c in run.outputs:
        if c.noise is None or c.status.passed:
            continue
        held = worst.get(c.name)
        if held is None or (c.noise.ratio or 0.0) > (held.ratio or 0.0):  # type: ignore[attr-defined]
            worst[c.name] = c.noise
    lines = []
    for name, noise in list(worst.items())[:MAX_NOISE_FINDINGS]:
        ratio = noise.ratio  # type: ignore[attr-defined]
        if ratio is not None and ratio <= ROUNDING_RATIO:
            lines.append(
                f"{name}: float32 rounding, not a bug: ONNX is about as far from an exact "
                "(float64) run as PyTorch itself is; a looser tolerance is the answer."
            )
        else:
            times = "far" if ratio is None else f"{float(f'{ratio:.2g}'):,.0f} times"
            lines.append(
                f"{name}: not rounding: ONNX is {times} further from an exact (float64) run "
                "than PyTorch's own float32 error, which points to a bug in the export."
            )
    return lines


def notes(run: ValidationRun) -> tuple[str, ...]:
    """The conditions the verdict holds under, in the reader's terms."""
    out = []
    tolerances = run.tolerances
    per_output = (
        f"; {count_text(len(tolerances.outputs), 'output')} with its own"
        if (tolerances.outputs)
        else ""
    )
    out.append(
        "Each element passes when |ONNX \u2212 reference| \u2264 atol + rtol \u00b7 |reference|, "
        f"at {tolerance_text(tolerances.default)}{per_output}."
    )
    if run.provenance.inputs_by == BY_POSITION:
        said = binding_text(run.provenance.inputs_by, run.provenance.inputs_note)
        out.append(f"The inputs were fed to the model {said}.")
    return tuple(out)


def plain_summary(run: ValidationRun, where: Mapping[str, str] | None = None) -> PlainSummary:
    """The run's headline, findings and notes (`where`: as `findings` takes it)."""
    return PlainSummary(headline=headline(run), findings=findings(run, where), notes=notes(run))
