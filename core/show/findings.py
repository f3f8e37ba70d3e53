"""What a run concludes, decided once: one ordered tuple of Finding (parity.results) that the
terminal, the JSON report (`findings`), the HTML report ("What we found"), the Overview and
the API (`ValidationRun.findings`) all render as-is.

The evidence is ranked, not juxtaposed. For each failing output, the strongest evidence
speaks: a first divergence that --layers confirmed as born (its node, run alone on the
reference's exact inputs, still disagrees) makes every failing output of that candidate a
bug, whatever its noise ratio, and the ratio is said beside it (a softmax's float32 floor
can be larger than a small bug's effect, so the ratio alone cannot clear it); otherwise the
--noise-floor ratio decides bug or rounding. No output is both. Rounding is named at the
precision it was measured at (Noise.precision: float16, bfloat16, int8), never "float32"
for a 16-bit file. The layers record no output reachability, so "every failing output it
feeds" is every failing output of the candidate whose layers found the birth.

A file exported in training mode (Dropout or BatchNormalization nodes that train) is a bug
said first, on every run, passing or not: it is read from the file, not the numbers.

Kinds (parity.results.FindingKind): bug, rounding, frozen (a size or branch the export froze;
confirmed ones), frozen_search (no longer made: a search that confirms nothing says so in its
analyses[] note only, never as a finding), near_tie (an LLM's greedy token flipped by an
acceptable error), error (ONNX Runtime raised on an input set), diverges (where the outputs
start to differ, not confirmed as made there), unmeasured (what this run did not measure, or an
analysis asked for that could not run, and why), quantization (what a file's intended quantized
weights cost: "int4 weights ..."; the file judged against torch with its own dequantized
weights, parity.analyses.quantization, speaks for that candidate instead of the layers, whose
reference is torch's float weights; a weight that is not a rounding stays a bug).
"""

from __future__ import annotations

from collections.abc import Iterable

from parity.judge.noise_floor import is_rounding, noise_rank
from parity.labels import OUTSIDE_MODULES, set_label
from parity.results import (
    Finding,
    FindingKind,
    Noise,
    OutputComparison,
    QuantizedTokens,
    Status,
    ValidationRun,
)
from parity.show.births import birth_place, born_before
from parity.text import number_text
from parity.verdict import Verdict

__all__ = ["bug_outputs", "file_precision_word", "findings_json", "run_findings"]

MAX_OUTPUT_FINDINGS = 12  # per candidate: a run with hundreds of failing outputs stays readable


def run_findings(run: ValidationRun) -> tuple[Finding, ...]:
    """The run's findings, in reading order: several files as pipeline stages (the first
    where the numbers break), per candidate (several: each failing one's, its
    index on each finding), errors, where it diverges, each failing output's bug or rounding,
    then frozen sizes, static axes, near ties and what was not measured (not said where a
    confirmed frozen size explains the failure)."""
    found = _per_candidate(run)
    frozen = _frozen(run)
    # a size frozen at export, confirmed, is the cause: no "not measured" hint beside it
    unmeasured = _unmeasured(run, found) if run.verdict is Verdict.FAIL and not frozen else []
    not_run = _not_run(run)
    stages = [
        Finding(FindingKind.STAGE, n.text)
        for n in run.analyses
        if n.analysis == "stages" and n.done
    ]
    return tuple(
        stages
        + _training_mode(run)
        + found
        + frozen
        + _static_axes(run)
        + _near_ties(run)
        + not_run
        + unmeasured
    )


def findings_json(run: ValidationRun) -> list[dict[str, object]]:
    """The JSON report's `findings`: [{kind, output, candidate, text}]."""
    return [
        {"kind": f.kind, "output": f.output, "candidate": f.candidate, "text": f.text}
        for f in run_findings(run)
    ]


def bug_outputs(run: ValidationRun) -> frozenset[tuple[int | None, str]]:
    """(candidate, output) of every bug finding: no tolerance is suggested for these."""
    return frozenset(
        (f.candidate, f.output) for f in run_findings(run) if f.kind is FindingKind.BUG
    )


def file_precision_word(run: ValidationRun) -> str:
    """The precision the ONNX file computes at, as far as the run knows without reading the
    file again: the measured noise's, else the provider's 16-bit note, else int8 for a
    quantized file's layers, else float32."""
    for c in run.outputs:
        if c.noise is not None:
            return c.noise.precision
    from parity.load.provider_precision import precision_notes

    for info in run.infos:
        for note in precision_notes(info.notes):
            for word in ("bfloat16", "float16"):
                if f" {word} nodes" in note:
                    return word
    layers = run.layers
    if layers is not None and layers.findings.get("quantized"):
        return "int8"
    return "float32"


# ----------------------------------------------------------------------------- one candidate


def _per_candidate(run: ValidationRun) -> list[Finding]:
    """Each failing candidate's findings (several candidates: each judged as its own run)."""
    out: list[Finding] = []
    for view in run.candidates:
        if view.info.error is None and not view.passed:
            one = run.for_candidate(view.index)
            out += _candidate_findings(one, view.index)
        elif view.quantization is not None:  # passing, yet a weight may be wrong
            out += _quantization(run.for_candidate(view.index), view.index)
    return out


def _candidate_findings(run: ValidationRun, candidate: int) -> list[Finding]:
    out: list[Finding] = list(_errors(run, candidate))
    if run.quantization is not None and run.quantization.outputs:
        return out + _quantization(run, candidate)
    layers = run.layers
    first = layers.first_divergence if layers is not None else None
    confirmation = layers.confirmation_of(first) if layers is not None else None
    born = getattr(confirmation, "outcome", None) == "born"
    precision = file_precision_word(run)
    if first is not None:
        where = (
            f"The export starts to diverge in {first.torch_module}, {birth_place(first, 'its')}."
            if first.torch_module
            else f"The export starts to diverge {birth_place(first)}, {OUTSIDE_MODULES[1:-1]}."
        )
        out.append(Finding(FindingKind.BUG if born else "diverges", where, candidate=candidate))
        if born:
            alone = (
                "those nodes with it still give"
                if born_before(first)
                else f"that {first.onnx_op} node still gives"
            )
            out.append(
                Finding(
                    FindingKind.BUG,
                    f"Not rounding: run alone on PyTorch's exact inputs, {alone} a different "
                    "answer, so the error is made there (a bug in the export, not "
                    f"{precision} noise carried along).",
                    candidate=candidate,
                )
            )
    numeric = _numeric_failures(run)
    for name, rows in list(numeric.items())[:MAX_OUTPUT_FINDINGS]:
        noise = _worst_noise(rows)
        if born:
            out.append(Finding(FindingKind.BUG, _born_text(name, first, noise), name, candidate))
        elif noise is None:
            continue
        elif is_rounding(noise):
            out.append(Finding(FindingKind.ROUNDING, _rounding_text(name, noise), name, candidate))
        else:
            out.append(Finding(FindingKind.BUG, _noise_bug_text(name, noise), name, candidate))
    return out


def _quantization(run: ValidationRun, candidate: int) -> list[Finding]:
    """A file with weight-only quantized ops (parity.analyses.quantization): its weights
    (each a rounding of the model's, or a bug at its node), then each failing output split
    in two: the file against torch with its own weights, and what those weights cost."""
    quant = run.quantization
    assert quant is not None
    width = quant.width
    out: list[Finding] = []
    rounded = [w for w in quant.weights if w.status == "rounding"]
    if rounded:
        ops = sorted({w.op for w in rounded})
        sizes = sorted({w.block_size for w in rounded if w.op == "MatMulNBits"})
        blocks = f", blocks of {', '.join(map(str, sizes))}" if sizes else ""
        worst = max((w.max_steps or 0.0) for w in rounded)
        out.append(
            Finding(
                FindingKind.QUANTIZATION,
                f"{width} weights: {len(rounded)} {'/'.join(ops)} node(s){blocks}, each a "
                f"rounding of the model's weight (at most {worst:.2g} step off): "
                f"{width} rounding, intended, not a bug in the export.",
                candidate=candidate,
            )
        )
    for w in quant.bugs:
        what = f" ({w.defect})" if w.defect else ""
        out.append(
            Finding(
                FindingKind.BUG,
                f"The {w.op} node {w.node}: its int{w.bits} weights are not a rounding of "
                f"{w.parameter}: {w.bad_blocks} of {w.n_blocks} block(s) are off by up to "
                f"{_steps(w.max_steps)} steps{what}; a bug in the quantized weights, made at "
                "this node.",
                candidate=candidate,
            )
        )
    bad = ", ".join(w.node for w in quant.bugs[:3])
    ref = quant.reference
    themselves = (
        f"and the {quant.activations} rounding of its activations at run time"
        if quant.activations and quant.activations_simulated
        else "themselves"
    )
    by_name = {o.name: o for o in quant.outputs}
    for name in list(_numeric_failures(run))[:MAX_OUTPUT_FINDINGS]:
        o = by_name.get(name)
        if o is None or o.export_passed is None:
            continue
        cost = (
            f"the {width} weights {themselves} move it to an SQNR of {o.sqnr_db:.1f} dB "
            f"(max abs {number_text(o.quant_max_abs)}) from {ref}'s float weights"
            if o.sqnr_db is not None
            else f"the {width} weights {themselves} move it by max abs "
            f"{number_text(o.quant_max_abs)} from {ref}'s float weights"
        )
        agrees = (
            f"against {ref} with the file's own dequantized weights it agrees (max abs "
            f"{number_text(o.export_max_abs)}, within the run's tolerance)"
        )
        if not o.export_passed and not quant.activations_simulated:
            text = (
                f"{name}: against {ref} with the file's own dequantized weights it differs by "
                f"max abs {number_text(o.export_max_abs)}, which includes the file's "
                f"{quant.activations} rounding of its activations at run time ({ref} does not "
                "round them): not judged a bug; "
                f"{cost}."
            )
            out.append(Finding(FindingKind.QUANTIZATION, text, name, candidate))
        elif not o.export_passed:
            text = (
                f"{name}: not {width} rounding: against {ref} with the file's own dequantized "
                f"weights it still differs (max abs {number_text(o.export_max_abs)}, beyond "
                "the run's tolerance), so the export or its kernels compute something else."
            )
            out.append(Finding(FindingKind.BUG, text, name, candidate))
        elif quant.bugs:
            text = f"{name}: {agrees}, but its weights are wrong at {bad}: {cost}."
            out.append(Finding(FindingKind.BUG, text, name, candidate))
        else:
            text = f"{name}: {width} weights, not a bug in the export: {agrees}; {cost}."
            out.append(Finding(FindingKind.QUANTIZATION, text, name, candidate))
    tokens = quant.tokens
    if tokens is not None:
        said = _token_words(tokens)
        if said:
            text = f"{width} weights and the tokens: {'; '.join(said)}."
            out.append(Finding(FindingKind.QUANTIZATION, text, candidate=candidate))
    return out


def _token_words(tokens: QuantizedTokens) -> list[str]:
    """What a causal LM's tokens say with the file's weights: greedy new tokens against
    torch's (and ONNX Runtime's own against them), top-1 agreement and KL."""
    said = []
    if tokens.greedy_total:
        change = (
            f" (first change at new token {tokens.first_change + 1})"
            if tokens.first_change is not None
            else ""
        )
        said.append(
            f"torch with the file's weights picks torch's greedy token for "
            f"{tokens.greedy_agree} of {tokens.greedy_total} new tokens{change}"
        )
        if tokens.onnx_agree is not None:
            said.append(
                f"ONNX Runtime's own tokens agree with torch-with-its-weights' for "
                f"{tokens.onnx_agree} of {tokens.greedy_total}"
            )
    if tokens.top1_agreement is not None and tokens.kl_mean is not None:
        said.append(
            f"top-1 agreement {tokens.top1_agreement:.1%} and mean KL divergence "
            f"{tokens.kl_mean:.3g} over every step's positions"
        )
    return said


def _steps(value: float | None) -> str:
    return "?" if value is None else f"{value:.3g}"


def _numeric_failures(run: ValidationRun) -> dict[str, list[OutputComparison]]:
    """Failing rows judged element by element (FAIL), by output, in the run's output order."""
    rows: dict[str, list[OutputComparison]] = {}
    for c in run.outputs:
        if c.status is Status.FAIL:
            rows.setdefault(c.name, []).append(c)
    return rows


def _worst_noise(rows: Iterable[OutputComparison]) -> Noise | None:
    noises = [c.noise for c in rows if c.noise is not None]
    return max(noises, key=noise_rank) if noises else None


def _times(ratio: float) -> str:
    return f"{float(f'{ratio:.2g}'):,.0f}" if ratio >= 100 else f"{ratio:.2g}"


def _ratio_words(noise: Noise) -> str:
    """ONNX's error against float64 beside the floor, as the noise measured it."""
    floor = (
        "the int8 quantization noise"
        if noise.precision == "int8"
        else (f"torch's own {noise.precision} error")
    )
    how = f" ({noise.emulated})" if noise.emulated and noise.precision == "float32" else ""
    if noise.ratio is None:
        return f"ONNX is {number_text(noise.onnx_error)} off float64 where {floor} is 0{how}"
    return f"ONNX's error against float64 is {_times(noise.ratio)}\u00d7 {floor}{how}"


def _born_text(name: str, first, noise: Noise | None) -> str:
    said = (
        f"{name}: a bug, not rounding: the error is made {birth_place(first)} (confirmed "
        "alone) and carried to this output"
    )
    if noise is None:
        return said + "."
    if is_rounding(noise):
        return (
            f"{said}; {_ratio_words(noise)}, which alone could pass for "
            f"{_rounding_name(noise.precision)}, so no tolerance should be loosened for it."
        )
    return f"{said}; {_ratio_words(noise)}."


def _rounding_name(precision: str) -> str:
    return "int8 quantization noise" if precision == "int8" else f"{precision} rounding"


def _rounding_text(name: str, noise: Noise) -> str:
    kind = _rounding_name(noise.precision)
    return (
        f"{name}: {kind}, not a bug; --suggest gives tolerances that hold: "
        f"{_ratio_words(noise)}, about what the precision itself makes."
    )


def _noise_bug_text(name: str, noise: Noise) -> str:
    return (
        f"{name}: not rounding: {_ratio_words(noise)}, far beyond "
        f"{_rounding_name(noise.precision)}, which points to a bug in the export."
    )


def _errors(run: ValidationRun, candidate: int) -> list[Finding]:
    """One per (input set, message) where ONNX Runtime raised: on every output of that set
    (output None) or on some (one finding each)."""
    by_set: dict[tuple[int, str], list[str]] = {}
    names = run.output_names
    for c in run.outputs:
        if c.status is Status.ERROR:
            message = (c.message.splitlines() or ["(no message)"])[0]
            by_set.setdefault((c.input_set, message), []).append(c.name)
    out = []
    for (index, message), raised in by_set.items():
        said = f"ONNX Runtime raised on {set_label(run, index)}: {message}"
        if set(raised) >= set(names):
            out.append(Finding(FindingKind.ERROR, said + ".", None, candidate))
        else:
            out += [
                Finding(FindingKind.ERROR, f"{name}: {said}.", name, candidate) for name in raised
            ]
    return out


# ----------------------------------------------------------------------------- whole run


def _training_mode(run: ValidationRun) -> list[Finding]:
    """A file exported in training mode (parity.analyses.training_mode): a bug on any run."""
    return [
        Finding(FindingKind.BUG, n.text)
        for n in run.analyses
        if n.analysis == "training_mode" and n.done
    ]


def _frozen(run: ValidationRun) -> list[Finding]:
    return [
        Finding(
            FindingKind.FROZEN, f.text or f"The {f.op} node {f.node} holds a size frozen at export."
        )
        for f in run.frozen
        if f.confirmed
    ]


def _static_axes(run: ValidationRun) -> list[Finding]:
    """An input axis the file fixes where torch takes other sizes: its one line."""
    return [Finding(FindingKind.STATIC_AXIS, a.text) for a in run.static_axes if a.text]


def _near_ties(run: ValidationRun) -> list[Finding]:
    if run.generation is None:
        return []
    from parity.hf.generation_report import tie_words

    out = []
    for i, p in enumerate(run.generation.prompts, 1):
        d = p.first_divergence
        if d is not None and d.near_tie:
            out.append(
                Finding(
                    FindingKind.NEAR_TIE,
                    f"Prompt {i}: ONNX Runtime's tokens part from torch's at new token "
                    f"{d.position + 1}, {tie_words(d)}.",
                )
            )
    return out


def _not_run(run: ValidationRun) -> list[Finding]:
    """Analyses that were asked for and could not run, each with its reason (never silent)."""
    found = []
    for note in run.analyses:
        if not note.done:
            flag = _ANALYSIS_WORDS.get(note.analysis, note.analysis)
            text = f"Asked for but not done ({flag}): {note.text.rstrip('.')}."
            found.append(Finding(FindingKind.UNMEASURED, text))
    return found


_ANALYSIS_WORDS = {
    "noise_floor": "--noise-floor",
    "quantization": "the quantization-aware reference",
    "layers": "--layers",
    "suggest": "--suggest",
    "repro": "--repro",
    "frozen": "the frozen-size search",
    "stages": "pipeline stages (several --onnx files)",
}


def _unmeasured(run: ValidationRun, found: list[Finding]) -> list[Finding]:
    """What would have told more, had it been measured: --layers, --noise-floor (only where
    some failing output is neither a bug nor rounding yet)."""
    missing = []
    could_not = {n.analysis for n in run.analyses if not n.done}  # said by _not_run
    explained = {
        f.output
        for f in found
        if f.kind in (FindingKind.BUG, FindingKind.ROUNDING, FindingKind.QUANTIZATION)
    }
    numeric = set(_numeric_failures(run))
    quantized = {f.output for f in found if f.kind is FindingKind.QUANTIZATION}
    if numeric and numeric <= quantized:  # torch with the file's own weights said it all
        return []
    if all(c.layers is None for c in run.candidates) and "layers" not in could_not:
        missing.append("where inside the model the outputs start to differ (--layers)")
    bug_or_rounding = explained
    born = any(f.kind is FindingKind.BUG and f.output is None for f in found)
    asked = "noise_floor" in could_not
    if numeric and not born and not numeric <= bug_or_rounding and not asked:
        word = file_precision_word(run)
        missing.append(f"whether the difference is {_rounding_name(word)} (--noise-floor)")
    if not missing:
        return []
    return [Finding(FindingKind.UNMEASURED, f"Not measured in this run: {' and '.join(missing)}.")]
