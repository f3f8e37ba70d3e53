"""Pipeline stages side by side: several --onnx files (a raw export, the optimizer's fused
file, its float16 copy, ...) given in pipeline order, with --stages or where every file after
the first is a conversion (no exporter made it), are each judged against torch (the run's
rows) and against the stage before it (ONNX against ONNX, on the same input sets, from the
outputs the run already holds: nothing runs again), so the findings name the first stage
where the numbers break. Candidates at the run's first provider and optimisation level
only."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from parity.analyses.interface import Analysis, AnalysisContext, noted
from parity.results import CandidateRun, RunKind, Status, ValidationRun
from parity.run.config import RunConfig
from parity.text import number_text

NAME = "stages"


class Stages(Analysis):
    name = NAME

    def wanted(self, config: RunConfig) -> bool:
        # ONNX against ONNX (no model): the first file is the reference, not a stage
        return config.kind is not RunKind.ONNX and len(config.onnx_files) >= 2

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        stages = _stage_candidates(run)
        if len(stages) < 2:
            return run
        if not context.config.stages and not conversions(context):
            return run  # files side by side (two exports), not one pipeline's stages
        if not all(s.onnx_outputs for s in stages):  # a run that keeps no outputs: rows only
            return run
        steps = [_step(run, before, after) for before, after in itertools.pairwise(stages)]
        return noted(run, NAME, stages_sentence(run, stages, steps))


@dataclass(frozen=True)
class Step:
    """One stage against the stage before it: the largest difference over its outputs and
    input sets, and the outputs that fail the run's tolerance there (the torch reference's
    tolerance, applied with the earlier stage as the reference)."""

    max_abs: float | None
    failing: tuple[str, ...]
    missing: tuple[str, ...]  # outputs one of the two stages does not have


def conversions(context: AnalysisContext) -> bool:
    """Every file is a conversion of the one before it (`converted`): one graph's successive
    conversions, so the files are stages without --stages. Two exports of a model side by
    side are not (nor a raw export given after its float16 copy)."""
    models = [getattr(c, "model", None) for c in context.candidates]
    if len(models) < 2 or any(m is None for m in models):
        return False
    return all(converted(a, b) for a, b in itertools.pairwise(models))


def converted(before: Any, after: Any) -> bool:
    """`after` reads as a conversion of `before`: another tool wrote it (producer_name), or
    it adds what converters add and exporters do not: ops in a domain of their own (ONNX
    Runtime's fused ops) or 16-bit values; and it takes nothing back (no such op or 16-bit
    value of `before` is gone)."""
    ops_a: frozenset[str] = getattr(before, "domains", frozenset())
    ops_b: frozenset[str] = getattr(after, "domains", frozenset())
    half_a, half_b = getattr(before, "sixteen_bit", False), getattr(after, "sixteen_bit", False)
    if not ops_a <= ops_b or (half_a and not half_b):
        return False
    other_tool = getattr(before, "producer", "") != getattr(after, "producer", "")
    return other_tool or ops_b > ops_a or (half_b and not half_a)


def _stage_candidates(run: ValidationRun) -> list[CandidateRun]:
    """Each file's candidate at the first provider and level, in the order given."""
    if not run.candidates:
        return []
    first = run.candidates[0].info
    return [
        c
        for c in run.candidates
        if (c.info.provider, c.info.ort_opt_level) == (first.provider, first.ort_opt_level)
    ]


def _step(run: ValidationRun, before: CandidateRun, after: CandidateRun) -> Step:
    from parity.judge.compare import compare_outputs

    worst: float | None = None
    failing: dict[str, None] = {}
    missing: dict[str, None] = {}
    for k, (a, b) in enumerate(zip(before.onnx_outputs, after.onnx_outputs, strict=True)):
        if not a.arrays or not b.arrays:  # a stage that could not run on this set
            continue
        index = run.input_sets[k].index
        for name in dict.fromkeys([*a.arrays, *b.arrays]):
            if name not in a.arrays or name not in b.arrays:
                missing[name] = None
                continue
            row = compare_outputs(
                a.arrays[name],
                b.arrays[name],
                name=name,
                input_set=index,
                tolerance=run.tolerances.for_output(name),
                exclude=run.exclusion(index, name),
            )
            if row.status is not Status.PASS:
                failing[name] = None
            x = row.stats.max_abs if row.stats is not None else None
            if x is not None and (worst is None or x > worst):
                worst = x
    return Step(worst, tuple(failing), tuple(missing))


def _against_torch(c: CandidateRun) -> tuple[bool, float | None]:
    """Whether every row of a stage passes against torch, and its largest error."""
    if c.info.error is not None:
        return False, None
    worst = max(
        (r.stats.max_abs for r in c.outputs if r.stats is not None and r.stats.max_abs is not None),
        default=None,
    )
    return all(r.status is Status.PASS for r in c.outputs), worst


def _short(c: CandidateRun) -> str:
    """``#1 fused.onnx``: a stage by its index and file name (one provider and level)."""
    return f"#{c.info.index} {PurePath(c.info.onnx).name or c.info.onnx}"


def stages_sentence(run: ValidationRun, stages: list[CandidateRun], steps: list[Step]) -> str:
    """The stages in words, the first where the numbers break named first."""
    parts = []
    broken: str | None = None
    for i, stage in enumerate(stages):
        ok, worst = _against_torch(stage)
        label = _short(stage)
        torch_words = (
            f"could not run ({stage.info.error})"
            if stage.info.error is not None
            else f"{'passes' if ok else 'fails'} against torch (max |error| {number_text(worst)})"
        )
        if i == 0:
            parts.append(f"{label} {torch_words}")
            if not ok and broken is None:
                broken = f"{label} (against torch)"
            continue
        step = steps[i - 1]
        previous = _short(stages[i - 1])
        if step.failing or step.missing:
            what = ", ".join([*step.failing, *(f"{m} (missing)" for m in step.missing)])
            against = (
                f"differs from {previous} by max {number_text(step.max_abs)}, beyond the run's "
                f"tolerance ({what})"
            )
        else:
            against = (
                f"agrees with {previous} within the run's tolerance (max "
                f"{number_text(step.max_abs)})"
            )
        parts.append(f"{label} {against}; it {torch_words}")
        if broken is None and (step.failing or step.missing or not ok):
            broken = f"{label} (against {previous}{'' if ok else ' and torch'})"
    head = (
        f"The numbers first break at {broken}."
        if broken is not None
        else "The numbers hold through every stage."
    )
    return f"{head} Pipeline stages, in the order given: " + "; ".join(parts) + "."
