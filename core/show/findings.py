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
for a 16-bit file. Each is said by its analysis's own module (parity.show.layers_findings,
parity.show.noise_findings), registered as evidence and asked here in rank order.

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
reference is torch's float weights; a weight that is not a rounding stays a bug),
limitation (what the file cannot do that the model does: a decoder file with no position_ids
that gets a left-padded batch wrong while each prompt alone matches).

Every analysis owns its findings and its words, registered by name (parity.show.finder, every
one imported by parity.show.analysis_finders), so adding one edits nothing here: one that judges
outputs against torch doing what the file means (quantization, approximation) speaks for its
candidate; evidence against torch's float model (--layers, --noise-floor) where none does; an
analysis of the whole run (--data, pipeline stages, the frozen search) is placed by its rank
among the run's own parts here (training mode, candidates, padded batch, near ties, what was
not done, what was not measured).
"""

from __future__ import annotations

from dataclasses import replace

from parity.labels import set_label
from parity.results import (
    Finding,
    FindingKind,
    Status,
    ValidationRun,
)
from parity.show.analysis_finders import finders, run_level
from parity.show.finder import (
    RUN_PARTS,
    Finder,
    asked_as,
    asked_words,
    evidences,
    numeric_failures,
)
from parity.show.noise_findings import (
    HIDDEN_BY_TOLERANCE,
    file_precision_word,
)
from parity.verdict import Verdict

__all__ = [
    "HIDDEN_BY_TOLERANCE",
    "all_findings",
    "bug_outputs",
    "file_precision_word",
    "findings_json",
    "run_findings",
]

MAX_OUTPUT_FINDINGS = 12  # per candidate: a run with hundreds of failing outputs stays readable
MAX_FINDINGS = 200  # in all: what every front renders (a forged run's notes are many)


def run_findings(run: ValidationRun) -> tuple[Finding, ...]:
    """The run's findings, in reading order: several files as pipeline stages (the first
    where the numbers break), per candidate (several: each failing one's, its
    index on each finding), errors, where it diverges, each failing output's bug or rounding
    (at most MAX_OUTPUT_FINDINGS per candidate), a bug a loose tolerance passes, then frozen
    sizes, static axes, near ties and what was not measured (not said where a confirmed
    frozen size explains the failure)."""
    return _findings(run, MAX_OUTPUT_FINDINGS)


def all_findings(run: ValidationRun) -> tuple[Finding, ...]:
    """Every finding, one per failing output however many fail: what the verdict by cause
    (parity.show.cause) reads, so an output past the shown cap is never unexplained."""
    return _findings(run, None)


def _findings(run: ValidationRun, limit: int | None) -> tuple[Finding, ...]:
    found = _per_candidate(run, limit)
    by_analysis = [(f, f.find(run)) for f in run_level()]
    # what an analysis found that accounts for the failure (a size frozen at export,
    # confirmed) is the cause: no "not measured" hint beside it (nor on a data run, where
    # those analyses do not apply: its answers lead)
    explained = any(said for f, said in by_analysis if f.explains) or any(
        f.alone and f.name in run.results for f in run_level()
    )
    padded = _padded_batch(run)
    # a left-padded batch that fails where every step passes: --layers and --noise-floor
    # would measure the steps, not the batch
    failed = run.tolerance_verdict is Verdict.FAIL and not (
        padded and all(c.status.passed for c in run.verdict_rows)
    )
    unmeasured = _unmeasured(run, found) if failed and not explained else []
    own = {  # the run's own parts, placed by RUN_PARTS among the analyses' run findings
        "training_mode": _training_mode(run),
        "candidates": found,
        "padded_batch": padded,
        "near_ties": _near_ties(run),
        "not_run": _not_run(run),
        "unmeasured": unmeasured,
    }
    parts = [(RUN_PARTS[k], said) for k, said in own.items()]
    parts += [(f.rank, said) for f, said in by_analysis]
    every = [f for _, said in sorted(parts, key=lambda p: p[0]) for f in said]
    if limit is None or len(every) <= MAX_FINDINGS:  # uncapped: the verdict by cause
        return tuple(every)
    more = f"… and {len(every) - MAX_FINDINGS:,} more findings, not shown."
    return (*every[:MAX_FINDINGS], Finding(FindingKind.UNMEASURED, more))


def findings_json(run: ValidationRun) -> list[dict[str, object]]:
    """The JSON report's `findings`: [{kind, output, candidate, text}]."""
    return [
        {"kind": f.kind, "output": f.output, "candidate": f.candidate, "text": f.text}
        for f in run_findings(run)
    ]


def bug_outputs(run: ValidationRun) -> frozenset[tuple[int | None, str | None]]:
    """(candidate, output) of every bug finding: no tolerance is suggested for these."""
    return frozenset(
        (f.candidate, f.output) for f in run_findings(run) if f.kind is FindingKind.BUG
    )


# ----------------------------------------------------------------------------- one candidate


def _per_candidate(run: ValidationRun, limit: int | None) -> list[Finding]:
    """Each failing candidate's findings (several candidates: each judged as its own run),
    and on every candidate a bug that passes only because of its tolerance."""
    out: list[Finding] = []
    for view in run.candidates:
        if view.info.error is not None:
            continue
        one = run.for_candidate(view.index)
        if not view.passed:
            out += _candidate_findings(one, view.index, limit)
        else:  # passing, yet an analysis may see a bug (a quantized weight that is wrong)
            for finder in finders():
                if finder.passing and view.results.get(finder.name) is not None:
                    out += finder.find(one, view.index, limit)
        for e in evidences():  # passing or not: a bug a loose tolerance hides
            out += e.every(one, view.index) if e.every is not None else []
    if len(run.candidates) < 2:
        return out
    labels = {v.index: v.label for v in run.candidates}
    return [_named(f, labels) for f in out]


def _named(f: Finding, labels: dict[int, str]) -> Finding:
    """A finding of one of several files, its text led by that file's label ("#1 b.onnx (CPU,
    all): out: not rounding ..."): "out: not rounding" alone reads as said of every file."""
    label = labels.get(f.candidate) if f.candidate is not None else None
    if label is None or f.text.startswith(f"#{f.candidate} "):
        return f
    return replace(f, text=f"{label}: {f.text}")


def _candidate_findings(run: ValidationRun, candidate: int, limit: int | None) -> list[Finding]:
    out: list[Finding] = list(_errors(run, candidate))
    speaker = _speaker(run)
    if speaker is not None and not speaker.after_birth:
        return out + speaker.find(run, candidate, limit)
    located = [f for e in evidences() if e.locate is not None for f in e.locate(run, candidate)]
    if speaker is not None:
        # --layers compared with the same intended torch: where it confirms a birth (a bug
        # located), it locates what the account calls a bug
        born = any(f.kind is FindingKind.BUG for f in located)
        return out + (located if born else []) + speaker.find(run, candidate, limit)
    out += located
    numeric = numeric_failures(run)
    for name, rows in list(numeric.items())[:limit]:
        for e in evidences():  # the first that judges the output speaks for it
            said = e.judge(run, candidate, name, rows) if e.judge is not None else None
            if said is not None:
                out.append(said)
                break
    return out


def _speaker(run: ValidationRun) -> Finder | None:
    """The analysis that speaks for a failing candidate instead of --layers and --noise-floor:
    the first finder, in rank order, whose result judged some of its outputs against torch
    doing what the file means (parity.show.finder)."""
    results = run.candidates[0].results if run.candidates else {}
    for finder in finders():
        if getattr(results.get(finder.name), "outputs", ()):
            return finder
    return None


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


def _padded_batch(run: ValidationRun) -> list[Finding]:
    """A decoder file that gets a left-padded batch wrong (parity.hf.padded_batch): its
    sentence, for the logits of the lead candidate."""
    padded = run.generation.padded_batch if run.generation is not None else None
    if padded is None or padded.kind is None:
        return []
    candidate = 0 if run.is_multi_candidate else None
    return [Finding(padded.kind, padded.text, padded.output, candidate)]


def _near_ties(run: ValidationRun) -> list[Finding]:
    if run.generation is None:
        return []
    from parity.show.generation_text import tie_words

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
            flag = asked_words(note.analysis)
            text = f"Asked for but not done ({flag}): {note.text.rstrip('.')}."
            found.append(Finding(FindingKind.UNMEASURED, text))
    return found


# analyses whose result is no finding of their own (tolerances, a repro folder): their words
asked_as("suggest", "--suggest")
asked_as("repro", "--repro")


def _unmeasured(run: ValidationRun, found: list[Finding]) -> list[Finding]:
    """What would have told more, had it been measured: each evidence's hint (--layers,
    --noise-floor), unless it was asked for and could not run (said by _not_run) or torch
    doing what the file means accounts for every failing output."""
    could_not = {n.analysis for n in run.analyses if not n.done}
    numeric = set(numeric_failures(run))
    intended = (FindingKind.QUANTIZATION, FindingKind.APPROXIMATION)
    accounted = {f.output for f in found if f.kind in intended}
    if numeric and numeric <= accounted:  # torch doing what the file means said it all
        return []
    missing = [
        said
        for e in evidences()
        if e.hint is not None and e.name not in could_not
        if (said := e.hint(run, found)) is not None
    ]
    if not missing:
        return []
    return [Finding(FindingKind.UNMEASURED, f"Not measured in this run: {' and '.join(missing)}.")]
