"""A run in plain words, for a reader who will not read the numbers first (a stakeholder, a
newcomer): the verdict as a sentence, then the findings (parity.show.findings: where the export
starts to diverge, a bug or rounding at the file's precision, ...), then the technical notes
(how the inputs were fed, the tolerances). The HTML report and the dashboard's Overview say a run in
this order, in these words; the numbers (per-output sentences, tables, figures) come between
the findings and the notes. Plain text: names are the user's, never markup.
"""

from __future__ import annotations

from dataclasses import dataclass

from parity.judge.pass_rule import RULE_TEXT
from parity.labels import set_noun
from parity.results import Finding, FindingKind, RunKind, Status, ValidationRun
from parity.run.input_binding import BY_POSITION, binding_text
from parity.show.cause import judge_by_cause
from parity.show.cause_labels import hidden_bugs
from parity.show.findings import run_findings
from parity.show.forgiven import forgiven, forgiven_text
from parity.text import all_text, count_text, sentence_start, tolerance_text
from parity.verdict import Judge, Verdict


@dataclass(frozen=True)
class PlainSummary:
    """`headline`: the verdict in one sentence; `findings`: what is known about why;
    `notes`: the technical conditions the verdict holds under."""

    headline: str
    findings: tuple[Finding, ...]
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
        info = run.infos[0]
        why = f": {info.error}" if info.error else ""
        return f"Parity could not run the ONNX file{why}."
    outputs = run.output_names
    sets = count_text(len(run.input_sets), set_noun(run))
    if run.judge is Judge.CAUSE:
        return _cause_headline(run, ref)
    if run.verdict is Verdict.PASS:
        hidden = _hidden_bugs(run)
        if hidden:  # one story: never "matches" above "a bug the tolerance hides"
            names = ", ".join(hidden)
            verb = "passes" if len(hidden) == 1 else "pass"
            return (
                f"Every output is within the tolerances set, but {names} {verb} only because "
                f"of {'its' if len(hidden) == 1 else 'their'} tolerance: Parity found a bug."
            )
        every = all_text(len(outputs), "output") + (" agrees" if len(outputs) == 1 else " agree")
        return f"The export matches {ref}: {every} within the allowed error on {sets}."
    failing = run.failing
    statuses = {c.status for c in run.outputs if c.name in failing}
    padded = run.generation.padded_batch if run.generation is not None else None
    if padded is not None and padded.fails and all(c.status.passed for c in run.verdict_rows):
        return (  # every step passes: only the prompts as one batch fail (parity.hf.padded_batch)
            f"The export does not match {ref}: its {padded.output} differ when the prompts run "
            f"as one {padded.side}-padded batch."
        )
    one = len(outputs) == 1  # "its output differs", never "1 of 1 output differ"
    if statuses & {Status.SHAPE_MISMATCH, Status.DTYPE_MISMATCH, Status.MISSING}:
        how = f"{'does' if one else 'do'} not match (a shape, a type or a missing output)"
    elif Status.ERROR in statuses:  # ONNX Runtime raised on some input set
        raised = sorted({c.input_set for c in run.outputs if c.status is Status.ERROR})
        how = f"{'fails' if one else 'fail'}: ONNX Runtime raised on {len(raised)} of {sets}"
        if Status.FAIL in statuses:
            how += " and values differ beyond the allowed error on others"
    else:
        how = f"{'differs' if one else 'differ'} beyond the allowed error"
    said = "its output" if one else f"{len(failing)} of {count_text(len(outputs), 'output')}"
    return f"The export does not match {ref}: {said} {how}."


def _hidden_bugs(run: ValidationRun) -> list[str]:
    """The outputs a bug finding says pass only at a tolerance looser than the default."""
    return sorted({name for _, name in hidden_bugs(run)})


_CAUSE_WORDS = {
    FindingKind.ROUNDING: "the rounding of the file's precision",
    FindingKind.QUANTIZATION: "what its quantized weights cost",
    FindingKind.APPROXIMATION: "a deploy tool's intended approximation",
}


def _cause_headline(run: ValidationRun, ref: str) -> str:
    """The verdict by cause as a sentence (parity.show.cause): what differs, and why that
    passes (intended) or fails (a bug, or a difference nothing explains)."""
    judged = judge_by_cause(run)
    beyond = sorted({name for _, name, _ in judged.intended})
    if judged.verdict is Verdict.PASS:
        if not beyond:
            return f"The export matches {ref}: no bug found, every output within the allowed error."
        said = (
            "its output differs"
            if len(run.output_names) == 1
            else (f"{len(beyond)} of {count_text(len(run.output_names), 'output')} differ")
        )
        causes = " or ".join(sorted({_CAUSE_WORDS[k] for _, _, k in judged.intended}))
        return (
            f"The export does what the file was meant to do: {said} beyond the allowed error, "
            f"each by {causes}; no bug found."
        )
    if any(f.kind is FindingKind.BUG for f in judged.failing):
        return f"The export does not match {ref}: Parity found a bug."
    if any(f.kind is FindingKind.LIMITATION for f in judged.failing):
        return f"The export does not match {ref}: the file cannot do all the model does."
    if judged.unexplained:
        n = len({name for _, name in judged.unexplained})
        return (
            f"The export does not match {ref}: {count_text(n, 'output')} beyond the allowed "
            "error with no intended cause found."
        )
    return f"The export does not match {ref}."


def _candidates_headline(run: ValidationRun, ref: str) -> str:
    verdicts = [run.candidate_verdict(v.index) for v in run.candidates]
    n = len(verdicts)
    bad = sum(v is not Verdict.PASS for v in verdicts)
    errors = sum(v is Verdict.ERROR for v in verdicts)
    if not bad:
        labels = {c.index: c.label for c in run.candidates}
        hiding = sorted({labels[k] for k, _ in hidden_bugs(run) if k in labels})
        if hiding:  # one story: never "matches" above "a bug the tolerance hides"
            verb = "passes" if len(hiding) == 1 else "pass"
            return (
                f"Every one of the {n} ONNX candidates is within the tolerances set, but "
                f"{', '.join(hiding)} {verb} only because of the tolerance: Parity found a bug."
            )
        return f"Every one of the {n} ONNX candidates matches {ref} within the allowed error."
    could_not = f" ({errors} could not be run)" if errors else ""
    return f"{bad} of {n} ONNX candidates do not match {ref}{could_not}."


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
        f"Each element passes when {RULE_TEXT}, at {tolerance_text(tolerances.default)}"
        f"{per_output}."
    )
    out += [forgiven_text(f) for f in forgiven(run)]  # what a set tolerance forgives
    if run.provenance.inputs_by == BY_POSITION:
        said = binding_text(run.provenance.inputs_by, run.provenance.inputs_note)
        out.append(f"The inputs were fed to the model {said}.")
    out += candidate_notes(run)
    return tuple(out)


def candidate_notes(run: ValidationRun) -> list[str]:
    """Every candidate's notes (what was adapted, what ONNX Runtime really computed in), as
    the terminal, the HTML report and the dashboard all show them; prefixed by the
    candidate's label in a run with several."""
    many = run.is_multi_candidate
    return [
        f"{info.label}: {note}" if many else sentence_start(note)
        for info in run.infos
        for note in info.notes
        if note
    ]


def plain_summary(run: ValidationRun) -> PlainSummary:
    """The run's headline, findings (parity.show.findings, decided there once) and notes."""
    return PlainSummary(headline=headline(run), findings=run_findings(run), notes=notes(run))
