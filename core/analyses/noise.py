"""--noise-floor as a stage: each case's float32 outputs (torch's and every candidate's)
judged against the reference run again in float64, and at a 16-bit candidate's precision
(parity.judge.noise_floor); the source computes those runs per case. A floor that could not
be measured for any output is said (an analysis asked for is never silently absent)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parity.analyses.stage import Analysis, AnalysisContext, CaseHook, Preparation, noted
from parity.results import OutputComparison, OutputSet, ValidationRun
from parity.run.config import RunConfig

if TYPE_CHECKING:
    from parity.sources import Case

NOT_MEASURED = "noise floor not measured: this kind of run has no float64 reference"


class NoiseFloor(Analysis):
    name = "noise_floor"
    timed = False  # its runs are the source's (timings "float64", ...)

    def __init__(self) -> None:
        self._why_not: str | None = None

    def wanted(self, config: RunConfig) -> bool:
        return config.noise_floor

    def before(self, prepare: Preparation) -> CaseHook:
        from parity.judge.noise_floor import with_noise
        from parity.load.file_precision import output_precisions

        found: dict[int, Any] = {
            index: output_precisions(c.path) for index, c in prepare.candidates.items()
        }
        sixteen = {p.precision for f in found.values() for p in f.values()}
        sixteen &= {"float16", "bfloat16"}
        if sixteen:  # the source runs torch at those precisions too
            prepare.source.measure_noise_at(sixteen)

        def hook(
            case: Case, index: int, shown: OutputSet, judged: list[OutputComparison]
        ) -> list[OutputComparison]:
            if case.float64 is None and self._why_not is None:
                self._why_not = case.float64_note or NOT_MEASURED
            return with_noise(
                judged,
                case.reference.arrays,
                shown.arrays,
                case.float64,
                case.float64_note or NOT_MEASURED,
                case.exclude,
                precisions=found.get(index),
                at_precision=case.at_precision,
            )

        return hook

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        if any(c.noise is not None for c in run.outputs):
            return run
        floats = any(c.ref_dtype is not None and "float" in c.ref_dtype for c in run.outputs)
        if not floats:
            return run
        why = (self._why_not or "no output's noise floor could be measured").removeprefix(
            "noise floor not measured: "
        )
        return noted(run, self.name, why, done=False)
