"""Orchestrate one validation: load both models, make inputs, run both, compare.

This is the one place the steps meet; each step lives in its own module. The dashboard and
the CLI call `run_validation` with a `RunConfig` and get back a `ValidationRun`.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.compare import compare_outputs
from core.errors import UsageError
from core.results import InputSet, OutputComparison, OutputSet, ValidationRun
from core.signature import OnnxSignature
from core.tolerances import Tolerances


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; the CLI's flags and the Run page's widgets map onto it."""

    model: str | None
    onnx: str | None
    weights: str | None = None
    dims: Mapping[str, int] = field(default_factory=dict)
    n_input_sets: int = 1
    seed: int = 0
    int_ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    input_files: tuple[str, ...] = ()
    provider: str = "CPUExecutionProvider"
    ort_opt_level: str = "all"
    tolerances: Tolerances = field(default_factory=Tolerances)
    reference_file: str | None = None
    hf: Any = None  # core.hf.HfOptions for an "hf:DIR" model (prompts, steps, export path)


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a run, for a progress bar: `fraction` is overall progress in [0, 1]."""

    step: str
    message: str
    fraction: float | None
    elapsed: float


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class Loaders:
    """Where a run gets its heavy objects. The dashboard passes versions cached by content
    identity, so a second run of the same files reuses the loaded model and ONNX session."""

    load_onnx: Callable[[str], Any]
    make_session: Callable[..., Any]  # (onnx_model, *, provider, opt_level)
    load_torch_model: Callable[..., Any]  # (spec, *, weights)


def default_loaders() -> Loaders:
    from core.onnx_model import load_onnx, make_session
    from core.torch_model import load_torch_model

    return Loaders(load_onnx, make_session, load_torch_model)


class ProgressReporter:
    """Calls `callback` with ProgressEvents timed from construction (None: does nothing)."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._callback = callback
        self._start = time.perf_counter()

    def __call__(self, step: str, message: str, fraction: float | None = None) -> None:
        if self._callback is not None:
            elapsed = time.perf_counter() - self._start
            self._callback(ProgressEvent(step, message, fraction, elapsed))


def environment(provider: str) -> dict[str, str]:
    """Versions that decide the numbers; torch is read only if already imported."""
    import sys

    import onnx
    import onnxruntime

    torch_mod = sys.modules.get("torch")
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "numpy": np.__version__,
        "torch": getattr(torch_mod, "__version__", "not loaded"),
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "provider": provider,
    }


def _resolve_onnx_path(config: RunConfig) -> str:
    if config.onnx:
        return config.onnx
    if config.model and config.model.startswith("demo:"):
        from core.demos import demo_onnx_path

        return str(demo_onnx_path(config.model.removeprefix("demo:")))
    raise UsageError("--onnx is required (only a demo:NAME model has a built-in ONNX file)")


def _check_config(config: RunConfig) -> None:
    if config.n_input_sets < 1:
        raise UsageError(f"the number of input sets must be >= 1, got {config.n_input_sets}")
    if config.model is None and config.reference_file is None:
        raise UsageError(
            "give a model (--model SPEC) or stored reference outputs (--reference REF.npz "
            "with --inputs)"
        )
    if config.model is not None and config.reference_file is not None:
        raise UsageError("give either --model or --reference, not both")
    if config.reference_file is not None and not config.input_files:
        raise UsageError("--reference needs the feeds it was computed on (--inputs FEEDS.npz)")


def run_validation(
    config: RunConfig,
    *,
    progress: ProgressCallback | None = None,
    loaders: Loaders | None = None,
) -> ValidationRun:
    """Run torch (or read stored reference outputs) and ONNX Runtime, compare every output.

    Raises a `ParityError` subclass when the run cannot be made; a model whose numbers
    disagree is not an error, it is a run whose verdict is "fail".
    """
    from core.inputs import load_input_files, make_input_sets
    from core.runner import run_onnx

    _check_config(config)
    if config.model is not None and config.model.startswith("hf:"):
        return _run_hf(config, progress)
    if loaders is None:
        loaders = default_loaders()
    report = ProgressReporter(progress)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    onnx_path = _resolve_onnx_path(config)
    report("load", f"loading ONNX {onnx_path}", 0.02)
    onnx_model = loaders.load_onnx(onnx_path)
    signature = onnx_model.signature
    session = loaders.make_session(
        onnx_model, provider=config.provider, opt_level=config.ort_opt_level
    )
    timings["load_onnx"] = time.perf_counter() - t0

    torch_model = None
    if config.model is not None:
        t0 = time.perf_counter()
        report("load", f"loading model {config.model}", 0.05)
        torch_model = loaders.load_torch_model(config.model, weights=config.weights)
        timings["load_model"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    if config.input_files:
        input_sets = load_input_files(config.input_files, signature)
    else:
        input_sets = make_input_sets(
            signature,
            dims=config.dims,
            n_sets=config.n_input_sets,
            seed=config.seed,
            int_ranges=config.int_ranges,
        )
    timings["inputs"] = time.perf_counter() - t0

    ref_outputs = _reference_outputs(config, torch_model, input_sets, signature, report)
    onnx_outputs: list[OutputSet] = []
    comparisons: list[OutputComparison] = []
    n = len(input_sets)
    t_onnx = t_compare = 0.0
    for i, input_set in enumerate(input_sets):
        report("onnx", f"ONNX Runtime on {_set_name(input_set)}", 0.1 + 0.85 * (i + 0.5) / n)
        t0 = time.perf_counter()
        onnx_out = run_onnx(session, input_set, signature=signature)
        t_onnx += time.perf_counter() - t0
        onnx_outputs.append(onnx_out)
        report(
            "compare", f"comparing outputs of {_set_name(input_set)}", 0.1 + 0.85 * (i + 0.8) / n
        )
        t0 = time.perf_counter()
        comparisons.extend(
            _compare_set(input_set.index, ref_outputs[i], onnx_out, config.tolerances)
        )
        t_compare += time.perf_counter() - t0
    timings["torch"] = sum(o.seconds for o in ref_outputs)
    timings["onnxruntime"] = t_onnx
    timings["compare"] = t_compare
    report("done", "done", 1.0)

    return ValidationRun(
        model=config.model or f"reference:{config.reference_file}",
        onnx=str(onnx_path),
        signature=signature,
        tolerances=config.tolerances,
        environment=environment(config.provider),
        input_sets=tuple(input_sets),
        comparisons=tuple(comparisons),
        ref_outputs=tuple(ref_outputs),
        onnx_outputs=tuple(onnx_outputs),
        timings=timings,
        extra={
            "onnx_sha256": onnx_model.sha256,
            "model_sha256": getattr(torch_model, "sha256", None),
            "opset": signature.opset,
            "producer": signature.producer,
            "ort_opt_level": config.ort_opt_level,
            "seed": config.seed,
        },
    )


def _run_hf(config: RunConfig, progress: ProgressCallback | None) -> ValidationRun:
    """An LLM is validated on every generate() step it really runs: core.hf does that."""
    from core.hf import HfOptions
    from core.hf.validate import run_hf_validation

    options = config.hf or HfOptions()
    return run_hf_validation(
        config.model,
        options=options,
        onnx=config.onnx,
        tolerances=config.tolerances,
        provider=config.provider,
        ort_opt_level=config.ort_opt_level,
        export_path=options.export_path,
        seed=config.seed,
        progress=progress,
    )


def _set_name(input_set: InputSet) -> str:
    return input_set.label or f"input set {input_set.index}"


def _reference_outputs(
    config: RunConfig,
    torch_model: object,
    input_sets: tuple[InputSet, ...],
    signature: OnnxSignature,
    report: ProgressReporter,
) -> list[OutputSet]:
    if config.reference_file is not None:
        from core.reference import load_reference_outputs

        report("reference", f"reading reference outputs {config.reference_file}", 0.08)
        return list(
            load_reference_outputs(
                config.reference_file, signature=signature, n_sets=len(input_sets)
            )
        )
    from core.runner import run_torch

    outputs = []
    n = len(input_sets)
    for i, input_set in enumerate(input_sets):
        report("torch", f"torch on {_set_name(input_set)}", 0.1 + 0.85 * i / n)
        outputs.append(run_torch(torch_model, input_set, signature))
    return outputs


def _compare_set(
    index: int,
    ref: OutputSet,
    onnx: OutputSet,
    tolerances: Tolerances,
) -> list[OutputComparison]:
    """Compare every output of one set: ONNX order first, then torch-only outputs."""
    names = list(onnx.arrays) + [name for name in ref.arrays if name not in onnx.arrays]
    return [
        compare_outputs(
            ref.arrays.get(name),
            onnx.arrays.get(name),
            name=name,
            input_set=index,
            tolerance=tolerances.for_output(name),
        )
        for name in names
    ]
