"""Files exported in training mode, said on every run from the file alone: the Dropout and
BatchNormalization nodes each candidate file holds in training mode (read once when the file
was loaded, parity.load.training_mode) become one note per file, which the findings say as a
bug (parity.show.findings) whether or not the numbers failed at this optimisation level."""

from __future__ import annotations

from collections.abc import Iterator

from parity.analyses.interface import Analysis, AnalysisContext, noted
from parity.results import ValidationRun
from parity.run.config import RunConfig

NAME = "training_mode"


class TrainingMode(Analysis):
    name = NAME
    timed = False  # nothing runs: the counts were read with the file

    def wanted(self, config: RunConfig) -> bool:
        return True

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        from parity.load.training_mode import training_words

        several = len({path for path, _ in _files(context)}) > 1
        said: set[str] = set()
        for path, counts in _files(context):
            if counts and path not in said:
                said.add(path)
                run = noted(run, NAME, training_words(counts, path if several else ""))
        return run


def _files(context: AnalysisContext) -> Iterator[tuple[str, tuple[tuple[str, int], ...]]]:
    """(file, training-mode counts) of every loaded candidate and each part of one."""
    for candidate in context.candidates:
        if candidate is None:
            continue
        for part in (candidate.parts or {"": candidate}).values():
            yield part.path, tuple(getattr(part.model, "training", ()) or ())
