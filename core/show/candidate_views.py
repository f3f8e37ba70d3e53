"""Candidates x outputs: the one reduction the terminal, the HTML report, the figures and the
dashboard's Overview share. A cell is a candidate's worst comparison of one output over its
input sets (worst as parity.labels decides); a candidate that could not run has no cells.
"""

from __future__ import annotations

from dataclasses import dataclass

from parity.labels import worst_first
from parity.results import CandidateInfo, OutputComparison, ValidationRun
from parity.verdict import Verdict

__all__ = ["CandidateCell", "candidate_cells", "verdict_counts"]


@dataclass(frozen=True)
class CandidateCell:
    """One (candidate, output): its worst comparison and on how many input sets it failed."""

    candidate: CandidateInfo
    name: str
    worst: OutputComparison
    n_failing: int
    n_sets: int


def candidate_cells(run: ValidationRun) -> list[CandidateCell]:
    """Every (candidate, output) that was judged, candidates in order, outputs in run order."""
    cells = []
    for view in run.candidates:
        if view.info.error is not None:
            continue
        grouped: dict[str, list[OutputComparison]] = {}
        for c in view.outputs:
            grouped.setdefault(c.name, []).append(c)
        for name in run.output_names:
            if mine := grouped.get(name):
                failing = sum(not c.status.passed for c in mine)
                cells.append(
                    CandidateCell(view.info, name, worst_first(mine)[0], failing, len(mine))
                )
    return cells


def verdict_counts(run: ValidationRun) -> dict[str, int]:
    """How many candidates pass, fail, could not run (keys read as "pass", "fail", "error":
    each key a Verdict, which is a str)."""
    counts: dict[str, int] = {v: 0 for v in Verdict}
    for view in run.candidates:
        counts[run.candidate_verdict(view.index)] += 1
    return counts
