"""Validate an HF model's export on every forward call that generate() makes.

Flow: load `hf:DIR` -> capture greedy generate() (prefill + each decode step; an encoder's
single forward) -> export, unless an ONNX file is given -> ONNX Runtime on every captured
call -> compare logits and every present key/value per step (core.hf.steps; padding
positions counted apart) -> one `ValidationRun` with one input set per step.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ExportError, OnnxRunError
from core.hf.capture import Capture, CapturedCall, capture_forward, capture_generate
from core.hf.feeds import onnx_feeds
from core.hf.loading import LoadedHfModel, load_hf_model
from core.hf.options import HfOptions, hf_directory
from core.hf.steps import StepResult, compare_call, step_json
from core.hf.summary import build_summary, transformers_version
from core.results import InputSet, OutputSet, ValidationRun
from core.tolerances import Tolerances
from core.validate import ProgressCallback, ProgressReporter, environment


def run_hf_validation(
    model: str,
    *,
    options: HfOptions | None = None,
    onnx: str | None = None,
    tolerances: Tolerances | None = None,
    provider: str = "CPUExecutionProvider",
    ort_opt_level: str = "all",
    export_path: str | None = None,
    seed: int = 0,
    progress: ProgressCallback | None = None,
) -> ValidationRun:
    """Validate `hf:DIR` against `onnx` (or Parity's own export) on every generate() step.

    Raises a ParityError subclass when the run cannot be made. An export that fails raises
    ExportError: its message starts with ``export: FAILED`` and gives the exporter's cause,
    and its ``summary`` attribute holds the run summary up to that point.
    """
    from core.compare import compare_outputs
    from core.onnx_model import load_onnx, make_session

    options = options or HfOptions()
    tolerances = tolerances or Tolerances()
    report = ProgressReporter(progress)
    timings: dict[str, float] = {}
    t_start = time.perf_counter()

    report("load", f"loading {model}", 0.02)
    t0 = time.perf_counter()
    loaded = load_hf_model(
        hf_directory(model),
        random_weights=options.random_weights,
        config_overrides=options.config_overrides,
        seed=seed,
    )
    timings["load_model"] = time.perf_counter() - t0

    capture = _capture(loaded, options, report)
    timings["capture"] = capture.seconds

    if onnx is None:
        onnx_path, export_info = _export(
            model, loaded, options, capture, export_path, timings, report
        )
    else:
        onnx_path, export_info = onnx, {"status": "not run (--onnx given)", "seconds": None}

    report("load", f"loading ONNX {onnx_path}", 0.7)
    t0 = time.perf_counter()
    onnx_model = load_onnx(onnx_path)
    signature = onnx_model.signature
    session = make_session(onnx_model, provider=provider, opt_level=ort_opt_level)
    timings["load_onnx"] = time.perf_counter() - t0

    input_sets: list[InputSet] = []
    results: list[StepResult] = []
    onnx_seconds: list[float] = []
    t_compare = 0.0
    n = len(capture.calls)
    for i, call in enumerate(capture.calls):
        report("onnx", f"ONNX Runtime on {call.label}", 0.75 + 0.2 * i / n)
        feeds = onnx_feeds(call, signature)
        input_sets.append(InputSet(index=call.index, feeds=feeds, label=call.label))
        t0 = time.perf_counter()
        raw = _run_session(session, feeds, call)
        onnx_seconds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        results.append(
            compare_call(
                call,
                raw,
                output_names=signature.output_names,
                tolerances=tolerances,
                compare=compare_outputs,
            )
        )
        t_compare += time.perf_counter() - t0
    timings["onnxruntime"] = sum(onnx_seconds)
    timings["compare"] = t_compare
    timings["total"] = time.perf_counter() - t_start
    report("done", "done", 1.0)

    comparisons = tuple(c for r in results for c in r.comparisons)
    masked = tuple(m for r in results for m in r.masked)
    summary = build_summary(
        model, loaded, options, capture, export_info, comparisons, timings, masked
    )
    return ValidationRun(
        model=model,
        onnx=onnx_path,
        signature=signature,
        tolerances=tolerances,
        environment=_environment(provider),
        input_sets=tuple(input_sets),
        comparisons=comparisons,
        ref_outputs=tuple(
            OutputSet(arrays=r.ref, seconds=c.seconds)
            for r, c in zip(results, capture.calls, strict=True)
        ),
        onnx_outputs=tuple(
            OutputSet(arrays=r.onnx, seconds=s) for r, s in zip(results, onnx_seconds, strict=True)
        ),
        timings=timings,
        extra={
            "kind": "hf_generate",
            "summary": summary,
            "steps": [step_json(call, comparisons) for call in capture.calls],
            "masked_positions": [m.to_json() for m in masked],
            "onnx_sha256": onnx_model.sha256,
            "opset": signature.opset,
            "producer": signature.producer,
            "ort_opt_level": ort_opt_level,
            "seed": seed,
        },
    )


def _capture(loaded: LoadedHfModel, options: HfOptions, report: ProgressReporter) -> Capture:
    if loaded.encoder:
        report("capture", "forward() on the prompts (encoder)", 0.15)
        return capture_forward(loaded, prompts=options.prompts)
    report("capture", f"generate(): {options.max_new_tokens} new token(s)", 0.15)
    return capture_generate(loaded, prompts=options.prompts, max_new_tokens=options.max_new_tokens)


def _export(
    model: str,
    loaded: LoadedHfModel,
    options: HfOptions,
    capture: Capture,
    export_path: str | None,
    timings: dict[str, float],
    report: ProgressReporter,
) -> tuple[str, dict[str, Any]]:
    """Parity's own export: (path, export summary); ExportError carries the summary."""
    from core.hf.export import export_decoder, export_encoder

    path = Path(export_path) if export_path else _default_export_path()
    report("export", f"exporting with torch.onnx.export(dynamo=True) to {path}", 0.25)
    exporter = export_encoder if loaded.encoder else export_decoder
    try:
        result = exporter(loaded.model, capture.calls, path)
    except ExportError as exc:
        seconds = getattr(exc, "seconds", None)
        timings["export"] = seconds or 0.0
        info = {"status": "FAILED", "seconds": seconds, "cause": getattr(exc, "cause", str(exc))}
        exc.summary = build_summary(  # type: ignore[attr-defined]
            model, loaded, options, capture, info, (), timings
        )
        raise
    timings["export"] = result.seconds
    return str(result.path), {
        "status": "OK",
        "seconds": result.seconds,
        "path": str(result.path),
        "dynamic": {
            "batch": result.dynamic.batch,
            "sequence_length": result.dynamic.sequence,
            "past_sequence_length": result.dynamic.past,
        },
    }


def _run_session(session: Any, feeds: Mapping[str, np.ndarray], call: CapturedCall) -> dict:
    names = [o.name for o in session.get_outputs()]
    try:
        values = session.run(names, dict(feeds))
    except Exception as exc:  # onnxruntime raises its own exception types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OnnxRunError(f"ONNX Runtime failed on {call.label}: {first}") from exc
    return dict(zip(names, values, strict=True))


def _default_export_path() -> Path:
    return Path(tempfile.mkdtemp(prefix="parity-hf-")) / "model.onnx"


def _environment(provider: str) -> dict[str, str]:
    env = environment(provider)
    env["transformers"] = transformers_version()
    return env
