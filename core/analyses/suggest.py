"""--suggest as a stage: per-output tolerances fitted on the run's input sets and checked on
fresh ones (parity.analyses.fresh_check) through the context's `rerun`, while the ONNX file
and the model are at hand. The fresh sets' count and size are said before they run."""

from __future__ import annotations

from dataclasses import replace

from parity.analyses.stage import Analysis, AnalysisContext
from parity.results import ValidationRun
from parity.run.config import RunConfig
from parity.run.progress import NOTICE


class Suggest(Analysis):
    name = "suggest"

    def wanted(self, config: RunConfig) -> bool:
        return config.suggest

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        from parity.analyses.fresh_check import suggest_checked

        n = 2 * max(len(run.input_sets), 1)
        context.report(NOTICE, f"Checking the suggested tolerances on {n} fresh input sets", None)
        checked = suggest_checked(run, context.config, rerun=context.rerun)
        return replace(run, suggested_tolerances=checked)
