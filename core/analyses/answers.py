"""--data as a stage: each batch's outputs (the lead candidate's against torch's) read
sample by sample while the loop runs (parity.data.answers), then what changes per output,
the skipped samples and the labels' accuracy put on the run (`run.data`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parity.analyses.interface import Analysis, AnalysisContext, CaseHook, Preparation
from parity.errors import UsageError
from parity.results import OutputComparison, OutputSet, Status, ValidationRun
from parity.run.config import RunConfig

if TYPE_CHECKING:
    from parity.data.answers import OutputAnswers
    from parity.sources import Case


class Answers(Analysis):
    name = "answers"
    timed = True

    def __init__(self) -> None:
        self._answers: dict[str, OutputAnswers] | None = None
        self._lead: int | None = None
        self._notes: dict[str, None] = {}

    def wanted(self, config: RunConfig) -> bool:
        return config.data is not None

    def before(self, prepare: Preparation) -> CaseHook | None:
        from parity.data.answers import answers_for

        options = prepare.config.data
        assert options is not None
        source: Any = prepare.source
        if not prepare.candidates:
            return None
        self._lead = min(prepare.candidates)
        outputs = prepare.candidates[self._lead].signature.output_names
        for flag, named in (
            ("--task", options.tasks),
            ("--min-agreement", options.min_agreement),
        ):
            unknown = [n for n in named if n not in outputs]
            if unknown:
                raise UsageError(
                    f"{flag} {unknown[0]}: no such output (the file's outputs: "
                    f"{', '.join(outputs)})"
                )

        def hook(
            case: Case, index: int, shown: OutputSet, judged: list[OutputComparison]
        ) -> list[OutputComparison]:
            batch = source.batch(case.input_set.index)
            if index != self._lead or batch is None:
                return judged
            ref = case.reference.arrays
            rows = batch.rows
            if self._answers is None:
                kinds = {
                    n: (a.shape, a.dtype)
                    for n, a in ref.items()
                    if n in shown.arrays and a.ndim >= 1 and a.shape[0] == rows
                }
                known: dict[str, str] = source.known_tasks()  # an hf: config's id2label
                self._answers = answers_for(
                    kinds,
                    options.tasks,
                    options.min_agreement,
                    known=known,
                    suggest=prepare.config.suggest,
                )
            for name, answers in self._answers.items():
                r, o = ref.get(name), shown.arrays.get(name)
                if r is None or o is None or r.shape != o.shape or r.shape[0] != rows:
                    self._notes[f"output {name}: not judged per sample on {batch.label}"] = None
                    continue
                answers.add(batch, r, o)
            return judged

        return hook

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        from parity.data.result import DataResult

        source: Any = context.source
        data, batcher = source.dataset, source.batcher
        if data is None or batcher is None:
            return run
        outputs = tuple(a.result() for a in (self._answers or {}).values())
        skipped = tuple(batcher.skipped)
        lead = [c for c in run.outputs if c.candidate == self._lead]
        raised = sorted({c.input_set for c in lead if c.status is Status.ERROR})
        if raised:  # ONNX Runtime raised on those batches: nothing to read sample by sample
            labels = ", ".join(s.label for s in run.input_sets if s.index in raised[:3])
            more = f" and {len(raised) - 3} more" if len(raised) > 3 else ""
            self._notes[
                f"ONNX Runtime raised on {len(raised)} batch(es) ({labels}{more}): their "
                "samples are not judged"
            ] = None
        result = DataResult(
            source=data.source,
            format=data.format,
            samples=batcher.read - len(skipped),
            skipped=skipped,
            outputs=outputs,
            labels=data.labels,
            batch_size=batcher.batch_size,
            notes=tuple(self._notes),
            processor=data.processor,
        )
        return run.with_result("data", result)
