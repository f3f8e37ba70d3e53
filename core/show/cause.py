"""The verdict by cause (`--judge cause`): a run fails on a bug and passes where every
difference is what the file was meant to do, decided from the run's findings, once.

The findings (parity.show.findings) already say, per failing output, what the difference
is: the precision's own rounding (measured against a float64 run), what the file's quantized
weights cost (torch with the file's own dequantized weights), an approximation a deploy tool
applied on purpose, or a bug. This module turns that account into a verdict:

- FAIL when a finding is a bug (an output, a weight or a node), ONNX Runtime raised, a
  size frozen at export was confirmed, or a limitation (the file cannot do what the model
  does: a left-padded batch); also when an output fails the tolerance and no
  finding explains it (a shape, a type, a missing output, or a difference nothing measured:
  an unexplained difference is never forgiven);
- PASS otherwise: every output within the tolerance or explained as intended.

The tolerance still matters under this judge: an output within it needs no explanation,
except where a bug finding names it (a bug that passes only because of a loose tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass

from parity.results import Finding, FindingKind, Status, ValidationRun
from parity.text import terminal_text
from parity.verdict import Verdict

__all__ = ["CauseJudgement", "INTENDED", "cause_line", "judge_by_cause"]

# what the file was meant to do: a difference one of these names is not a bug
INTENDED = (FindingKind.ROUNDING, FindingKind.QUANTIZATION, FindingKind.APPROXIMATION)
# what fails the run whatever the tolerance
FAILING = (FindingKind.BUG, FindingKind.ERROR, FindingKind.FROZEN, FindingKind.LIMITATION)


@dataclass(frozen=True)
class CauseJudgement:
    """The run judged by cause: `verdict`; the findings that fail it (`failing`); the
    (candidate, output) pairs that fail the tolerance with nothing to explain them
    (`unexplained`); those the file's own transformations explain (`intended`, with the
    kind that explains each)."""

    verdict: Verdict
    failing: tuple[Finding, ...]
    unexplained: tuple[tuple[int, str], ...]
    intended: tuple[tuple[int, str, FindingKind], ...]


def judge_by_cause(run: ValidationRun) -> CauseJudgement:
    """The run's verdict by cause (module doc), from every finding (uncapped)."""
    from parity.show.findings import all_findings

    if run.tolerance_verdict is Verdict.ERROR:  # a candidate could not be run at all
        return CauseJudgement(Verdict.ERROR, (), (), ())
    found = all_findings(run)
    failing = tuple(f for f in found if f.kind in FAILING)
    kinds: dict[tuple[int | None, str | None], FindingKind] = {}
    for f in found:
        if f.kind in INTENDED:
            kinds.setdefault((f.candidate, f.output), f.kind)
    unexplained: list[tuple[int, str]] = []
    intended: list[tuple[int, str, FindingKind]] = []
    # an output a failing finding names is accounted for: a bug, not "unexplained"
    seen: set[tuple[int, str]] = {
        (f.candidate if f.candidate is not None else 0, f.output)
        for f in failing
        if f.output is not None
    }
    for c in run.verdict_rows:  # an output judged on its answers (--min-agreement) is not
        key = (c.candidate, c.name)
        # a 16-bit output of a float16 file (only the width differs): its values decide
        if c.status.passed or (c.narrowed and not c.n_mismatch) or key in seen:
            continue
        seen.add(key)
        kind = kinds.get(key)
        if kind is None and len(run.candidates) == 1:
            kind = kinds.get((None, c.name))
        # only values can be explained: a shape, a type, a missing output is never intended
        if kind is not None and (c.status is Status.FAIL or c.narrowed):
            intended.append((*key, kind))
        else:
            unexplained.append(key)
    # --min-agreement: an output whose answers changed beyond it fails, whatever the cause
    unexplained += [(0, n) for n, ok in run.answer_criteria.items() if not ok]
    verdict = Verdict.FAIL if failing or unexplained else Verdict.PASS
    return CauseJudgement(verdict, failing, tuple(unexplained), tuple(intended))


_WORDS = {
    FindingKind.ROUNDING: "rounding at the file's precision",
    FindingKind.QUANTIZATION: "what its quantization costs",
    FindingKind.APPROXIMATION: "an approximation the tool applied on purpose",
}


def cause_line(run: ValidationRun) -> str:
    """The terminal's last line under --judge cause: the verdict and its cause."""
    judged = judge_by_cause(run)
    if judged.verdict is Verdict.PASS:
        if not judged.intended:
            return "PASS by cause: every output within tolerance, no bug found"
        kinds = sorted({_WORDS[k] for _, _, k in judged.intended})
        n = len({name for _, name, _ in judged.intended})
        return (
            f"PASS by cause: {n} output(s) beyond the tolerance, each explained as intended "
            f"({'; '.join(kinds)}); no bug found"
        )
    reasons = []
    bugs = [f for f in judged.failing if f.kind is FindingKind.BUG]
    if bugs:
        named = sorted({terminal_text(f.output) for f in bugs if f.output})
        reasons.append(f"a bug ({', '.join(named[:5])})" if named else "a bug")
    if any(f.kind is FindingKind.ERROR for f in judged.failing):
        reasons.append("ONNX Runtime raised")
    if any(f.kind is FindingKind.FROZEN for f in judged.failing):
        reasons.append("a size frozen at export")
    limits = [f for f in judged.failing if f.kind is FindingKind.LIMITATION]
    if limits:  # a left-padded batch the file gets wrong (parity.hf.padded_batch)
        named = sorted({terminal_text(f.output) for f in limits if f.output})
        reasons.append(f"a limitation ({', '.join(named)})" if named else "a limitation")
    if judged.unexplained:
        names = sorted({terminal_text(name) for _, name in judged.unexplained})
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        reasons.append(
            f"beyond the tolerance with no intended cause found: {', '.join(names[:5])}{more}"
        )
    return f"FAIL by cause: {'; '.join(reasons)}"
