"""An analysis's findings, found by its result's name: an analysis that judges a candidate's
outputs against torch doing what the file means (its quantized weights, its approximations)
registers, beside its result type (parity.results.by_name), a finder that says what that
result concludes, so adding one edits no shared module (parity.show.findings asks every
registered finder, parity.show.analysis_finders imports them all).

A finder is asked for a failing candidate whose result under its name judged some output
(its `outputs` are not empty); the first, in `rank` order, speaks for that candidate instead
of --layers and --noise-floor, whose reference is torch's float model. With `passing` it is
asked on a passing candidate too (a quantized weight can be wrong where every output passes);
with `after_birth` a birth --layers confirmed is said before its findings (its torch side
computed the same intended model, so the node it names is a bug the analysis does not explain).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from parity.results import Finding, OutputComparison, Status, ValidationRun

__all__ = ["Find", "Finder", "finds", "numeric_failures", "registered"]

# (the candidate's run as if it were the only one, its index, at most this many outputs)
Find = Callable[[ValidationRun, int, "int | None"], list[Finding]]
F = TypeVar("F", bound=Find)


@dataclass(frozen=True)
class Finder:
    name: str  # the analysis's result name (parity.results.by_name.analysis_result)
    rank: int  # the order finders are asked in, lowest first: the findings' order is a contract
    find: Find
    passing: bool = False  # asked on a passing candidate too
    after_birth: bool = False  # a birth --layers confirmed is said before its findings


_FINDERS: dict[str, Finder] = {}


def finds(
    name: str, *, rank: int, passing: bool = False, after_birth: bool = False
) -> Callable[[F], F]:
    """Register `find` as what analysis `name`'s result concludes for a candidate. One
    finder per name and per rank, so the order never rests on which module loaded first."""

    def register(find: F) -> F:
        finder = Finder(name, rank, find, passing, after_birth)
        if any(f != finder and (f.name == name or f.rank == rank) for f in _FINDERS.values()):
            raise ValueError(f"analysis {name!r} (rank {rank}) already has its finder")
        _FINDERS[name] = finder
        return find

    return register


def registered() -> tuple[Finder, ...]:
    """Every registered finder in rank order (parity.show.analysis_finders: all of them)."""
    return tuple(sorted(_FINDERS.values(), key=lambda f: f.rank))


def numeric_failures(run: ValidationRun) -> dict[str, list[OutputComparison]]:
    """Failing rows judged element by element (FAIL, or a 16-bit output's values beyond the
    tolerance: `narrowed`), by output, in the run's output order: what a finder accounts for."""
    rows: dict[str, list[OutputComparison]] = {}
    for c in run.outputs:
        if c.status is Status.FAIL or (c.narrowed and c.n_mismatch):
            rows.setdefault(c.name, []).append(c)
    return rows
