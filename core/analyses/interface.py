"""The interface every optional analysis implements, and the context the pipeline hands it.

A new kind of evidence is one module here with one `Analysis` subclass, its result type
registered by name (parity.results.by_name) and its findings registered beside it
(parity.show.finder): no new field wiring in the API, the CLI, the codec or the pages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from parity.limits.budget import MemoryBudget
from parity.limits.deadline import Deadline
from parity.results import AnalysisNote, OutputComparison, OutputSet, ValidationRun
from parity.run.config import Loaders, RunConfig
from parity.run.progress import ProgressCallback, ProgressReporter

if TYPE_CHECKING:
    from parity.run.candidates import Candidate
    from parity.sources import Case, Source

CaseHook = Callable[["Case", int, OutputSet, list[OutputComparison]], list[OutputComparison]]
"""(case, candidate index, the candidate's outputs as compared, its rows) -> the rows."""


@dataclass(frozen=True)
class Preparation:
    """What an analysis may look at before the cases run: the config, the source and the
    loaded candidates by index (a hook can tell its source what to compute per case)."""

    config: RunConfig
    source: Source
    candidates: dict[int, Candidate]


@dataclass(frozen=True)
class AnalysisContext:
    """What every analysis draws on after the loop. `lead()` is the first candidate with its
    ONNX Runtime session; `lead_without_sessions()` lets every session go first (--layers opens
    its own: a 2.5 GB LLM's weights held twice would pass the layers budget). `rerun(config)`
    makes another run through the same pipeline and loaders (the suggestion's fresh sets)."""

    config: RunConfig
    source: Source
    reference: Candidate | None  # ONNX against ONNX: the reference file, loaded
    # per candidate, in order (None: did not load); their sessions are let go with the lead's
    candidates: Sequence[Candidate | None]
    lead: Callable[[], Candidate | None]
    lead_without_sessions: Callable[[], Candidate | None]
    loaders: Loaders
    deadline: Deadline
    budget: MemoryBudget
    report: ProgressReporter
    progress: ProgressCallback | None
    rerun: Callable[[RunConfig], ValidationRun]


class Analysis:
    """One optional analysis. Subclasses set `name` (the JSON's `analyses[].analysis` and the
    timing's key) and override `wanted` and `apply`; `before` only where a case needs it."""

    name: ClassVar[str] = ""
    timed: ClassVar[bool] = True  # its seconds go in run.timings[name]

    def wanted(self, config: RunConfig) -> bool:
        raise NotImplementedError

    def before(self, prepare: Preparation) -> CaseHook | None:
        """Called before the cases run; a returned hook sees each candidate's judged case."""
        return None

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        return run


def noted(run: ValidationRun, analysis: str, text: str, *, done: bool = True) -> ValidationRun:
    """`run` with one more analysis note (what an analysis did, or why it could not)."""
    return replace(run, analyses=(*run.analyses, AnalysisNote(analysis, text, done)))
