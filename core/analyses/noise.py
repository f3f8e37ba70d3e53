"""--noise-floor as an analysis: each case's float32 outputs (torch's and every candidate's)
judged against the reference run again in float64, and at a 16-bit candidate's precision
(parity.judge.noise_floor); the source computes those runs per case. A floor that could not
be measured for any output is said (an analysis asked for is never silently absent).

By default (no --noise-floor, no other analysis, `RunConfig.noise_floor_default`), a run
whose float32 outputs fail, or pass only at a tolerance looser than the default, gets the
floor after its cases, on its smallest such input sets (at most DEFAULT_SETS, by input
elements), where the torch model has at most DEFAULT_PARAMETERS parameters and its float64
copy fits --max-memory: a correct export failing a tight atol then says "float32 rounding,
not a bug" instead of an unexplained FAIL, and a bug a loosened tolerance passes is said
(parity.show.findings). Only the float32 candidates are measured: a 16-bit or int8 file beside
them has its own explanation (its floor is --noise-floor's), and leaves theirs unchanged.
Decided from the model's size and the run's memory budget, never from a wall-clock time: the
same run explains itself the same way on a fast machine and a slow one. What it measured is
the run's done note; --no-noise-floor turns it off."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from parity.analyses.interface import Analysis, AnalysisContext, CaseHook, Preparation, noted
from parity.errors import ParityError
from parity.results import OutputComparison, OutputSet, RunKind, Status, ValidationRun
from parity.run.config import RunConfig

if TYPE_CHECKING:
    from parity.sources import Case

NOT_MEASURED = "noise floor not measured: this kind of run has no float64 reference"
DEFAULT_PARAMETERS = 50_000_000  # a bigger model's float64 pass is --noise-floor's to ask for
DEFAULT_SETS = 2  # failing input sets measured by default, the smallest first


class NoiseFloor(Analysis):
    name = "noise_floor"
    timed = False  # its runs are the source's (timings "float64", ...)

    def __init__(self) -> None:
        self._why_not: str | None = None
        self._after = False  # for the verdict by cause, after the cases (float32 files)

    def wanted(self, config: RunConfig) -> bool:
        return config.measures_noise or by_default(config)

    def before(self, prepare: Preparation) -> CaseHook | None:
        if not prepare.config.measures_noise:
            return None  # by default: after the cases, only if outputs fail
        from parity.judge.noise_floor import with_noise
        from parity.load.file_precision import output_precisions

        found: dict[int, Any] = {
            index: output_precisions(c.path) for index, c in prepare.candidates.items()
        }
        precisions = {p.precision for f in found.values() for p in f.values()}
        per_case = prepare.config.noise_floor or prepare.config.kind is RunKind.HF_GENERATE
        if not per_case and precisions <= {"float32"}:
            # the verdict by cause on float32 files: float64 only on the sets it must explain
            self._after = True
            return None
        prepare.source.measure_noise()
        sixteen = precisions & {"float16", "bfloat16"}
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
                basis=case.float64_note if case.float64 is not None else "",
                precisions=found.get(index),
                at_precision=case.at_precision,
            )

        return hook

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        if not context.config.measures_noise:
            return _measured_by_default(run, context, self.name)
        if self._after:
            return _measured_by_default(run, context, self.name, for_cause=True)
        if any(c.noise is not None for c in run.outputs):
            return run
        floats = any(c.ref_dtype is not None and "float" in c.ref_dtype for c in run.outputs)
        if not floats or not context.config.noise_floor:
            return run  # measured for the verdict by cause only: what it leaves is unexplained
        why = (self._why_not or "no output's noise floor could be measured").removeprefix(
            "noise floor not measured: "
        )
        return noted(run, self.name, why, done=False)


def by_default(config: RunConfig) -> bool:
    """The floor is measured without being asked: a torch run asking for no analysis."""
    asked = config.layers or config.suggest or config.repro is not None
    return config.noise_floor_default and config.kind is RunKind.TORCH and not asked


def _measured_by_default(
    run: ValidationRun, context: AnalysisContext, name: str, *, for_cause: bool = False
) -> ValidationRun:
    """The floor on the smallest failing input sets (module doc); the run unchanged when
    nothing fails in float32, no candidate is float32 throughout, the model is over
    DEFAULT_PARAMETERS (or its size is unknown) or its float64 copy is past --max-memory.
    `for_cause` (the verdict by cause): every set where an output fails, or passes only at a
    tolerance looser than the default, whatever the model's size: what it leaves unmeasured
    is never forgiven."""
    from parity.load.file_precision import output_precisions
    from parity.run.noise_floor_runs import parameter_count

    failing = sorted({c.input_set for c in run.outputs if _needs_floor(c)})
    cases = {c.input_set.index: c for c in run.cases}
    if not failing or any(cases.get(i) is None or cases[i].reference is None for i in failing):
        return run
    parameters = parameter_count(getattr(context.source, "torch_model", None))
    too_big = parameters is None or parameters > DEFAULT_PARAMETERS
    if too_big and not for_cause:
        return run
    try:
        precisions = {c.index: output_precisions(c.info.onnx) for c in run.candidates}
    except Exception:  # the file's precision unknown: no floor said by default
        return run
    # a 16-bit or int8 file: its floor is --noise-floor's to measure; the float32 ones beside it
    wide = {i for i, f in precisions.items() if all(p.precision == "float32" for p in f.values())}
    failing = sorted({c.input_set for c in run.outputs if c.candidate in wide and _needs_floor(c)})
    if not failing:
        return run
    signature = run.signature
    if signature is None:  # no candidate was read: nothing to run in float64
        return run
    measured: list[int] = []
    rows = list(run.outputs)
    spent = 0.0
    order = sorted(failing, key=lambda i: (_elements(cases[i]), i))
    for index in order if for_cause else order[:DEFAULT_SETS]:
        case = cases[index]
        context.deadline.check()
        context.report("torch", f"torch in float64 on input set {index} (noise floor)", None)
        t0 = time.perf_counter()
        try:
            arrays, how = context.source.float64_of(case.input_set, signature)
        except ParityError:
            break  # its float64 copy is past --max-memory: not by default
        spent += time.perf_counter() - t0
        if arrays is None:
            break
        measured.append(index)
        rows = _judged(rows, run, case, arrays, how, {i: precisions[i] for i in wide})
    if not measured:
        return run
    run = run.with_rows(rows)
    run = replace(run, timings={**run.timings, "float64": spent})
    sets = ", ".join(str(i) for i in measured)
    plural = "s" if len(measured) > 1 else ""
    if for_cause:
        text = (
            f"measured for the verdict by cause: torch in float64 on input set{plural} {sets} "
            f"({spent:.2g} s), where an output differs beyond the default tolerance"
        )
        return noted(run, name, text)
    size = f"a model of {parameters:,} parameters" if parameters is not None else "a model"
    text = (
        f"measured without --noise-floor because outputs failed (or passed only at a loosened "
        f"tolerance): torch in float64 on input "
        f"set{plural} {sets} ({size}; up to {DEFAULT_PARAMETERS:,} get it by default); "
        "--no-noise-floor turns it off"
    )
    return noted(run, name, text)


def _needs_floor(c: OutputComparison) -> bool:
    """A float32 row the floor should explain: it fails, or passes only at a tolerance looser
    than the default (a bug it may hide: said by default too, not only by cause)."""
    if c.ref_dtype != "float32":
        return False
    return c.status is Status.FAIL or c.passes_only_loosened


def _elements(case: Any) -> int:
    """The input set's size: its feeds' elements (the float64 pass grows with them)."""
    return sum(int(getattr(a, "size", 0)) for a in case.input_set.feeds.values())


def _judged(
    rows: list[OutputComparison],
    run: ValidationRun,
    case: Any,
    float64: Any,
    how: str,
    precisions: dict[int, Any],
) -> list[OutputComparison]:
    """`rows` with the noise of `case`'s set, per candidate (its kept outputs)."""
    from parity.judge.noise_floor import with_noise

    index = case.input_set.index
    position = [c.input_set.index for c in run.cases].index(index)
    new: dict[tuple[int, int, str], OutputComparison] = {}
    for view in run.candidates:
        if view.index not in precisions:  # not float32 throughout: not measured by default
            continue
        mine = [r for r in rows if r.candidate == view.index and r.input_set == index]
        if not mine or position >= len(view.onnx_outputs):
            continue
        judged = with_noise(
            mine,
            case.reference.arrays,
            view.onnx_outputs[position].arrays,
            float64,
            exclude=case.exclusions,
            precisions=precisions.get(view.index),
            basis=how,
        )
        new.update({(r.candidate, r.input_set, r.name): r for r in judged})
    return [new.get((r.candidate, r.input_set, r.name), r) for r in rows]
