"""The one loop every run goes through: source -> ONNX Runtime per candidate -> compare.

A source (core.sources) yields cases lazily: an input set, its reference outputs (computed
once), and what must not be judged. Each candidate (today one: the ONNX file under one
provider and optimisation level) runs on the case with core.runner.run_onnx and is compared
with core.compare.compare_outputs; one `ValidationRun` is assembled at the end. The
dashboard and the CLI call `run_validation` with a `RunConfig`; so does `core.validate()`, the
public function (which is why this module is not named `validate`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.compare import compare_outputs
from core.config import Loaders, RunConfig, check_config, default_loaders
from core.deadline import Deadline
from core.progress import ProgressCallback, ProgressEvent, ProgressReporter, environment
from core.results import OutputComparison, OutputSet, RunKind, ValidationRun
from core.signature import OnnxSignature
from core.sources import Case, Source
from core.tolerances import Tolerances

__all__ = [
    "Candidate",
    "Loaders",
    "ProgressCallback",
    "ProgressEvent",
    "RunConfig",
    "compare_case",
    "default_loaders",
    "open_source",
    "run_validation",
]


@dataclass(frozen=True)
class Candidate:
    """One way to run the ONNX side: a loaded file, its session, provider and opt level."""

    path: str
    model: Any  # core.onnx_model.OnnxModel
    session: Any  # onnxruntime.InferenceSession
    provider: str
    opt_level: str

    @property
    def signature(self) -> OnnxSignature:
        return self.model.signature


def open_source(config: RunConfig, loaders: Loaders, report: ProgressReporter) -> Source:
    """The source for this kind of run (the config is checked first)."""
    check_config(config)
    if config.kind is RunKind.HF_GENERATE:
        from core.hf.source import HfSource

        return HfSource(config, report)
    if config.kind is RunKind.REFERENCE:
        from core.sources.stored import StoredSource

        return StoredSource(config, report)
    from core.sources.torch_inputs import TorchSource

    return TorchSource(config, loaders, report)


def run_validation(
    config: RunConfig,
    *,
    progress: ProgressCallback | None = None,
    loaders: Loaders | None = None,
) -> ValidationRun:
    """Run the reference and ONNX Runtime on every case, compare every output.

    Raises a `ParityError` subclass when the run cannot be made; a model whose numbers
    disagree is not an error, it is a run whose verdict is "fail". Temp folders the run
    made (an hf: export without --export-path) are removed when it returns or raises.
    """
    loaders = loaders or default_loaders()
    report = ProgressReporter(progress)
    t_start = time.perf_counter()
    deadline = Deadline(config.timeout)
    source = open_source(config, loaders, report)
    with ExitStack() as cleanup:

        def workdir() -> Path:
            path = Path(tempfile.mkdtemp(prefix="parity-"))
            cleanup.callback(shutil.rmtree, path, ignore_errors=True)
            return path

        onnx_path = config.onnx or source.default_onnx(workdir)
        t0 = time.perf_counter()
        candidate = _load_candidate(onnx_path, config, loaders, report)
        source.timings["load_onnx"] = time.perf_counter() - t0
        deadline.check()
        run = _run_cases(config, source, [candidate], report, t_start, deadline)
        if config.layers:
            run = _with_layers(run, config, source, candidate, report)
            deadline.check()
    return run


def _with_layers(
    run: ValidationRun,
    config: RunConfig,
    source: Source,
    candidate: Candidate,
    report: ProgressReporter,
) -> ValidationRun:
    """The same source's model and the same input sets, with intermediate values compared
    (core.layers); never changes the outputs' verdict."""
    from core.layers.localise import HF_NOT_COMPARED, localise_run, not_compared

    if config.kind is RunKind.HF_GENERATE:
        return replace(run, layers=not_compared(HF_NOT_COMPARED))
    t0 = time.perf_counter()
    layers = localise_run(
        getattr(source, "torch_model", None),
        candidate.path,
        run.input_sets,
        candidate.signature,
        provider=candidate.provider,
        opt_level=candidate.opt_level,
        memory_mb=config.layers_memory_mb,
        progress=lambda message: report("layers", message, None),
    )
    timings = {**run.timings, "layers": time.perf_counter() - t0}
    return replace(run, layers=layers, timings=timings)


def _load_candidate(
    path: str, config: RunConfig, loaders: Loaders, report: ProgressReporter
) -> Candidate:
    report("load", f"loading ONNX {path}", 0.02)
    onnx_model = loaders.load_onnx(path)
    config.tolerances.check_outputs(onnx_model.signature.output_names)
    session = loaders.make_session(
        onnx_model, provider=config.provider, opt_level=config.ort_opt_level
    )
    return Candidate(str(path), onnx_model, session, config.provider, config.ort_opt_level)


def _run_cases(
    config: RunConfig,
    source: Source,
    candidates: list[Candidate],
    report: ProgressReporter,
    t_start: float,
    deadline: Deadline,
) -> ValidationRun:
    from core.runner import run_onnx

    (candidate,) = candidates  # several candidates side by side: a later feature
    timings: dict[str, float] = {}
    signature = candidate.signature
    cases: list[Case] = []
    onnx_outputs: list[OutputSet] = []
    comparisons: list[OutputComparison] = []
    t_onnx = t_compare = 0.0
    for case in source.cases(signature):
        deadline.check()  # torch cannot be interrupted: checked between cases
        cases.append(case)
        name = case.input_set.label or f"input set {case.input_set.index}"
        fraction = _fraction(len(cases), source.n_cases)
        for cand in candidates:
            report("onnx", f"ONNX Runtime on {name}", fraction)
            t0 = time.perf_counter()
            raw = run_onnx(
                cand.session, case.input_set, signature=cand.signature, deadline=deadline
            )
            t_onnx += time.perf_counter() - t0
            t0 = time.perf_counter()
            shown, judged = compare_case(case, raw, config.tolerances)
            t_compare += time.perf_counter() - t0
            onnx_outputs.append(shown)
            comparisons.extend(judged)
    deadline.check()
    report("done", "done", 1.0)
    timings.update(source.timings)
    timings["onnxruntime"] = t_onnx
    timings["compare"] = t_compare
    provenance = replace(
        source.provenance(),
        onnx_sha256=candidate.model.sha256,
        opset=signature.opset,
        producer=signature.producer,
        ort_opt_level=candidate.opt_level,
    )
    generation = source.generation(comparisons, {**timings, "total": time.perf_counter() - t_start})
    return ValidationRun(
        model=source.model,
        onnx=candidate.path,
        signature=signature,
        tolerances=config.tolerances,
        environment=environment(candidate.provider, also=source.environment_modules),
        input_sets=tuple(c.input_set for c in cases),
        comparisons=tuple(comparisons),
        ref_outputs=tuple(c.reference for c in cases),
        onnx_outputs=tuple(onnx_outputs),
        exclusions=tuple(dict(c.exclude) for c in cases),
        timings=timings,
        provenance=provenance,
        generation=generation,
    )


def _fraction(done: int, total: int | None) -> float | None:
    if not total:
        return None
    return 0.1 + 0.85 * min(done / total, 1.0)


def compare_case(
    case: Case, onnx: OutputSet, tolerances: Tolerances
) -> tuple[OutputSet, list[OutputComparison]]:
    """Compare one candidate's outputs with the case's reference: ONNX order first, then
    reference-only outputs. Returns the candidate's outputs as compared (crops applied)."""
    ref = case.reference.arrays
    shown: dict[str, np.ndarray] = {}
    comparisons: list[OutputComparison] = []
    for name in list(onnx.arrays) + [n for n in ref if n not in onnx.arrays]:
        array, note = _cropped(case, name, onnx.arrays.get(name))
        if array is not None:
            shown[name] = array
        comparison = compare_outputs(
            ref.get(name),
            array,
            name=name,
            input_set=case.input_set.index,
            tolerance=tolerances.for_output(name),
            exclude=case.exclude.get(name),
        )
        comparisons.append(_with_notes(comparison, note, case.exclude_reason))
    return replace(onnx, arrays=shown), comparisons


def _cropped(case: Case, name: str, array: np.ndarray | None) -> tuple[np.ndarray | None, str]:
    crop = case.crop.get(name)
    if crop is None or array is None or array.ndim != len(crop.index):
        return array, ""
    cropped = array[crop.index]
    if cropped.shape == array.shape:
        return array, ""
    return cropped, f"ONNX {name} {list(array.shape)} compared at {crop.reason}"


def _with_notes(comparison: OutputComparison, note: str, reason: str) -> OutputComparison:
    excluded = ""
    if comparison.n_excluded:
        worst = comparison.excluded_max_abs
        where = "nan/inf" if worst is None else f"{worst:.3g}"
        excluded = f"{comparison.n_excluded} element(s) excluded ({reason or 'not judged'}), "
        excluded += f"max abs diff {where}"
    extra = [text for text in (note, excluded) if text]
    if not extra:
        return comparison
    return replace(comparison, message="; ".join(t for t in (comparison.message, *extra) if t))
