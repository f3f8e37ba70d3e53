"""The frozen-at-export search and the static-axis check as an analysis: a failing generated run
of a torch model on a file with dynamic axes gets the nodes that hold a size frozen at export,
each confirmed by real runs (parity.run.frozen_search); any torch run gets the input axes the
file fixes where the model takes other sizes. Needs a source that runs torch at other sizes
(`Source.runs_other_sizes`), one candidate."""

from __future__ import annotations

from parity.analyses.interface import Analysis, AnalysisContext
from parity.results import RunKind, StaticAxes, ValidationRun
from parity.run.config import RunConfig


class FrozenSizes(Analysis):
    name = "frozen"

    def wanted(self, config: RunConfig) -> bool:
        return config.kind is RunKind.TORCH

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        from parity.run.frozen_search import should_look, static_axes, with_frozen

        lead = context.lead()
        if lead is None or not context.source.runs_other_sizes or run.is_multi_candidate:
            return run
        if should_look(run, context.config):
            context.report("frozen", "looking for sizes frozen at export", None)
            run = with_frozen(run, context.config, context.source, lead, deadline=context.deadline)
        axes = static_axes(run, context.config, context.source, deadline=context.deadline)
        return run.with_result("static_axes", StaticAxes(axes))
