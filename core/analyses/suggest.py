"""--suggest as an analysis: per-output tolerances fitted on the run's input sets and checked on
fresh ones (parity.analyses.fresh_check) through the context's `rerun`, while the ONNX file
and the model are at hand. The fresh sets' count and size are said before they run."""

from __future__ import annotations

from parity.analyses.interface import Analysis, AnalysisContext, noted
from parity.results import ValidationRun
from parity.run.config import RunConfig
from parity.run.progress import NOTICE


class Suggest(Analysis):
    name = "suggest"

    def wanted(self, config: RunConfig) -> bool:
        return config.suggest

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        from parity.analyses.fresh_check import suggest_checked
        from parity.judge.suggest import has_noise

        n = 2 * max(len(run.input_sets), 1)
        said = f"Checking the suggested tolerances on {n} fresh input sets"
        if not has_noise(run):  # its cost: a float64 run of torch on each fresh set
            said += " (torch in float64 on each too: this run has no noise floor to tell a bug)"
        context.report(NOTICE, said, None)
        checked = suggest_checked(run, context.config, rerun=context.rerun)
        run = run.with_result("suggested_tolerances", checked)
        if checked.outputs:
            return run
        return noted(run, self.name, NOTHING, done=False)


# every output left without one is withheld with its reason (exact, a bug, not rounding, not
# checked on fresh inputs, ...): the note says none was suggested, the withheld lines say why
NOTHING = "no tolerance is suggested for any output (the suggested tolerances say why for each)"
