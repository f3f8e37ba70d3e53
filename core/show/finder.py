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

An analysis that measures a failing candidate against torch's float model (--layers,
--noise-floor) registers its `Evidence`, asked where no finder speaks instead, in rank order:
what it locates in the candidate (where its outputs start to differ) before each failing
output's finding (the first evidence with one speaks for that output), what it sees on every
candidate that ran, passing or not (a bug a loose tolerance hides), and what it would have
told where it was not measured (the "Not measured in this run" hint).

An analysis of the whole run (the frozen search, --data) registers a run finder instead
(`finds_in_run`): asked once per run, its findings placed by its rank among the run's own parts
(RUN_PARTS, parity.show.findings); with `explains`, what it found accounts for the failure and
no "not measured" hint is said beside it; with `alone`, a run that holds its result is one the
other analyses do not apply to (a data run: its answers lead), and no hint is said. Every
analysis registers the words its "Asked for but not done (...)" finding names it by
(`asked_as`), beside its findings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from parity.results import Finding, OutputComparison, Status, ValidationRun

__all__ = [
    "RUN_PARTS",
    "Evidence",
    "Find",
    "Finder",
    "RunFinder",
    "asked_as",
    "asked_words",
    "evidence",
    "evidences",
    "finds",
    "finds_in_run",
    "numeric_failures",
    "registered",
    "run_finders",
]

# (the candidate's run as if it were the only one, its index, at most this many outputs)
Find = Callable[[ValidationRun, int, "int | None"], list[Finding]]
F = TypeVar("F", bound=Find)
RunFind = Callable[[ValidationRun], list[Finding]]
G = TypeVar("G", bound=RunFind)

RUN_PARTS = {"training_mode": 300, "candidates": 400, "padded_batch": 500,
             "near_ties": 700, "not_run": 800, "unmeasured": 900}  # fmt: skip
"""The ranks of the run's own parts, in reading order (parity.show.findings): a run finder's
rank places its findings among them (--data's answers first: 100, pipeline stages 200; the
frozen search's after the padded batch: 600)."""


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


@dataclass(frozen=True)
class RunFinder:
    name: str  # the analysis's name
    rank: int  # its place among the run's parts (RUN_PARTS) and the other run finders
    find: RunFind
    explains: bool = False  # what it found accounts for the failure: no "not measured" hint
    alone: bool = False  # a run holding its result gets no "not measured" hint either


_RUN_FINDERS: dict[str, RunFinder] = {}
_ASKED: dict[str, str] = {}


def finds_in_run(
    name: str, *, rank: int, explains: bool = False, alone: bool = False
) -> Callable[[G], G]:
    """Register `find` as what analysis `name` concludes of the whole run, said at `rank`
    among the run's parts (RUN_PARTS). One per name and per rank."""

    def register(find: G) -> G:
        finder = RunFinder(name, rank, find, explains, alone)
        others = [f for f in _RUN_FINDERS.values() if f != finder]
        clash = any(f.name == name or f.rank == rank for f in others)
        if clash or rank in RUN_PARTS.values():
            raise ValueError(f"analysis {name!r} (rank {rank}) already has its run finder")
        _RUN_FINDERS[name] = finder
        return find

    return register


def run_finders() -> tuple[RunFinder, ...]:
    """Every registered run finder in rank order."""
    return tuple(sorted(_RUN_FINDERS.values(), key=lambda f: f.rank))


def asked_as(name: str, words: str) -> None:
    """The words analysis `name` is named by where it was asked for and could not run
    ("--noise-floor", "the frozen-size search"): its module says them, once."""
    if _ASKED.get(name, words) != words:
        raise ValueError(f"analysis {name!r} already has its words")
    _ASKED[name] = words


def asked_words(name: str) -> str:
    """Analysis `name`'s words (asked_as); its name where it registered none."""
    return _ASKED.get(name, name)


Locate = Callable[[ValidationRun, int], list[Finding]]  # (the candidate's run, its index)
# (the candidate's run, its index, a failing output's name, its failing rows)
JudgeOutput = Callable[[ValidationRun, int, str, list[OutputComparison]], "Finding | None"]
# (the run, every candidate's findings) -> what it would have told, in words, or None
Hint = Callable[[ValidationRun, list[Finding]], "str | None"]


@dataclass(frozen=True)
class Evidence:
    """What an analysis measured against torch's float model says of a candidate (module
    doc): each part optional."""

    name: str
    rank: int  # the order evidences are asked in, lowest first
    locate: Locate | None = None  # a failing candidate's findings before its outputs'
    judge: JudgeOutput | None = None  # one failing output's finding: the first one speaks
    every: Locate | None = None  # every candidate that ran, after its other findings
    hint: Hint | None = None  # "Not measured in this run: ..." where it was not


_EVIDENCE: dict[str, Evidence] = {}


def evidence(
    name: str,
    *,
    rank: int,
    locate: Locate | None = None,
    judge: JudgeOutput | None = None,
    every: Locate | None = None,
    hint: Hint | None = None,
) -> None:
    """Register analysis `name`'s evidence (module doc). One per name and per rank."""
    found = Evidence(name, rank, locate, judge, every, hint)
    others = [e for e in _EVIDENCE.values() if e != found]
    if any(e.name == name or e.rank == rank for e in others):
        raise ValueError(f"analysis {name!r} (rank {rank}) already has its evidence")
    _EVIDENCE[name] = found


def evidences() -> tuple[Evidence, ...]:
    """Every registered evidence in rank order."""
    return tuple(sorted(_EVIDENCE.values(), key=lambda e: e.rank))


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
