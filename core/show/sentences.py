"""Per failing output, a few short lines: what fails, how badly, and where.

What a reader who will not open a table sees first: the HTML report leads with these, the
Overview lists them under the verdict. Numbers read as parity.text writes them; the "where"
part is parity.judge.where's summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from parity.judge.ratio import comparison_ratio
from parity.judge.where import WhereProfile
from parity.labels import set_noun, worst_first
from parity.results import OutputComparison, Status, ValidationRun
from parity.show.cause_labels import intended_outputs
from parity.text import (
    number_pair_text,
    number_text,
    percent_text,
    plural_text,
    shape_text,
    times_text,
    tolerance_text,
)

__all__ = [
    "candidate_words",
    "failing_outputs",
    "other_failing_sets",
    "OutputFacts",
    "output_facts",
]


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def failing_outputs(run: ValidationRun) -> list[OutputComparison]:
    """One comparison per failing output name (its worst input set), worst output first; in
    a run with several candidates, one per failing (candidate, output)."""
    best: dict[tuple[int, str], OutputComparison] = {}
    for c in worst_first(c for c in run.outputs if not c.status.passed):
        best.setdefault((c.candidate, c.name), c)
    return list(best.values())


def candidate_words(run: ValidationRun, c: OutputComparison) -> str:
    """`` on #2 wrong.onnx (CPU, all)``: which candidate a comparison judges, in a run with
    several ("" in a run with one, where the file is the run's)."""
    if not run.is_multi_candidate:
        return ""
    try:
        return f" on {run.candidate(c.candidate).label}"
    except KeyError:
        return ""


def other_failing_sets(run: ValidationRun, c: OutputComparison) -> list[OutputComparison]:
    """The output's other failing input sets (same candidate), in set order: what a headline
    sentence weighs besides its worst set."""
    return [
        x
        for x in run.candidate(c.candidate).outputs
        if x.name == c.name and x.input_set != c.input_set and not x.status.passed
    ]


def _other_sets_words(
    where: WhereProfile, others: Sequence[tuple[int, WhereProfile | None]]
) -> str:
    """What the other failing sets say about where: the same place in all of them, or each
    one's own summary (at most three)."""
    known = [(k, w) for k, w in others if w is not None]
    if not known:
        return ""
    sets = [str(k) for k, _ in known]
    named = f"set {sets[0]}" if len(sets) == 1 else f"sets {', '.join(sets[:-1])} and {sets[-1]}"
    if all(w.pattern == where.pattern for _, w in known):
        return f"the same holds in {named}"
    return "; ".join(f"in set {k}, {w.summary}" for k, w in known[:3])


@dataclass(frozen=True)
class OutputFacts:
    """One failing output in numbers, one fact per line, for a reader at a glance: `head`
    (``logits fails in 2 of 2 input sets``) and `lines` (``Out of tolerance: ...``,
    ``Worst: ...``, ``Where: ...``). The Overview and the HTML report render these as-is."""

    head: str
    lines: tuple[str, ...]

    def text(self) -> str:
        """The facts as one paragraph (plain text: a log, a test's message)."""
        return ". ".join((self.head, *self.lines)) + "."


def output_facts(
    run: ValidationRun,
    c: OutputComparison,
    where: WhereProfile | None,
    others: Sequence[tuple[int, WhereProfile | None]] = (),
) -> OutputFacts:
    """``mask fails in 2 of 2 input sets`` / ``Out of tolerance in set 0: 248 of 2,048
    elements (12.1%) at atol 1e-05, rtol 0`` / ``Worst: off by 0.481 (reference 0.5, ONNX
    0.019), 48,100 times the allowed error`` / ``Where: all 248 mismatches lie along ...`` /
    ``Other failing sets: the same holds in set 1``."""
    unit = plural_text(set_noun(run))
    mine = [x for x in run.candidate(c.candidate).outputs if x.name == c.name]
    n_sets = len({x.input_set for x in mine})
    n_failing = len({x.input_set for x in mine if not x.status.passed})
    on = candidate_words(run, c)
    head = (
        f"{c.name} fails in {n_failing} of {n_sets} {unit}{on}"
        if n_sets > 1
        else (f"{c.name} fails{on}")
    )
    if cause := intended_outputs(run).get((c.candidate, c.name)):  # amber on every page
        head += f" ({cause}, what the file was meant to do)" if c.status is Status.FAIL else ""
    at = f" in set {c.input_set}" if n_sets > 1 else ""
    if c.status is Status.SHAPE_MISMATCH:
        return OutputFacts(head, (
            f"Shape{at}: {shape_text(c.ref_shape)} in the reference, "
            f"{shape_text(c.onnx_shape)} in ONNX (no element can be compared)",
        ))  # fmt: skip
    if c.status in (Status.MISSING, Status.ERROR):
        why = c.message or ("missing on one side" if c.status is Status.MISSING else "")
        return OutputFacts(head, (f"Why{at}: {why or 'ONNX Runtime raised'}",))
    lines = []
    if c.status is Status.DTYPE_MISMATCH:
        lines.append(f"Dtype{at}: {c.ref_dtype} in the reference, {c.onnx_dtype} in ONNX")
    s = c.stats
    if c.n_mismatch:
        count = (
            f"Out of tolerance{at}: {c.n_mismatch:,} of {c.n_judged:,} elements "
            f"({percent_text(c.mismatch_fraction)}) at {tolerance_text(c.tolerance)}"
        )
        if s is not None and (s.n_nan_mismatch or s.n_inf_mismatch):
            count += f", {s.n_nan_mismatch + s.n_inf_mismatch:,} of them NaN or Inf on one side"
        lines.append(count)
        if s is not None and s.max_abs is not None:
            worst = f"Worst: off by {number_text(s.max_abs)}"
            if _finite(s.ref_at_worst) and _finite(s.onnx_at_worst):  # in the output's units
                ref, onnx = number_pair_text(s.ref_at_worst, s.onnx_at_worst)
                worst += f" (reference {ref}, ONNX {onnx})"
            ratio = comparison_ratio(c)
            if ratio is not None:
                worst += f", {times_text(ratio)} the allowed error"
            lines.append(worst)
    if not lines:
        lines.append(c.message.splitlines()[0] if c.message else "it fails")
    if where is not None:  # the worst set's place, then what the other failing sets say
        lines.append(f"Where: {where.summary}")
        other = _other_sets_words(where, others)
        if other:
            lines.append(f"Other failing sets: {other}")
    return OutputFacts(head, tuple(lines))
