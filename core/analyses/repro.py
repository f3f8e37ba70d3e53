"""--repro DIR as an analysis: the first confirmed divergence written as a standalone folder
(parity.layers.repro) while the ONNX file it cuts still exists (the API's in-memory export
is a temp file). What was written, or why nothing was, is the run's `repro` analysis note;
a folder that cannot be written is a note that is not done (the CLI names it with the other
unwritten outputs)."""

from __future__ import annotations

from parity.analyses.interface import Analysis, AnalysisContext, noted
from parity.errors import WriteError
from parity.results import ValidationRun
from parity.run.config import RunConfig


class Repro(Analysis):
    name = "repro"

    def wanted(self, config: RunConfig) -> bool:
        return config.repro is not None

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        from parity.layers.repro import write_repro

        folder = context.config.repro
        assert folder is not None
        try:
            written = write_repro(
                run.layers, folder, command=context.config.repro_command, onnx_path=run.onnx
            )
        except WriteError as exc:
            return noted(run, self.name, exc.message, done=False)
        return noted(run, self.name, written.message)
