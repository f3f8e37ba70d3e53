"""Validate an LLM export across generate() steps: one input set per captured call.

Flow: load `hf:DIR` -> capture greedy generate() (prefill + each decode step) -> export
(unless an ONNX file is given) -> ONNX Runtime on every captured call -> compare logits and
every present key/value per step. Positions that the attention mask excludes (left padding)
are never attended, and exports legitimately differ there, so they are counted and reported
apart (`extra["masked_positions"]`), never as mismatches: before `compare_outputs`, the ONNX
values at those positions are replaced by torch's, and the largest difference that was
there is kept in the comparison's message and in `extra`.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ExportError, OnnxRunError, ParityError
from core.hf.capture import Capture, CapturedCall, capture_forward, capture_generate
from core.hf.feeds import (
    LOGITS,
    align_logits,
    masked_positions,
    onnx_feeds,
    reference_outputs,
)
from core.hf.loading import LoadedHfModel, load_hf_model
from core.hf.options import HfOptions, hf_directory
from core.results import InputSet, OutputComparison, OutputSet, ValidationRun
from core.tolerances import Tolerance, Tolerances

ProgressCallback = Callable[[Any], None]  # receives core.validate.ProgressEvent

MASKED_NOTE = (
    "positions the attention mask excludes (left padding) are never attended; exports may "
    "differ there, so they are counted apart and not judged"
)


@dataclass(frozen=True)
class MaskedInfo:
    """What was excluded from one comparison: padding elements and the largest diff there."""

    input_set: int
    output: str
    n_masked: int
    max_abs: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "input_set": self.input_set,
            "output": self.output,
            "n_masked": self.n_masked,
            "max_abs": self.max_abs,
        }


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

    Raises a ParityError subclass when the run cannot be made; ExportError when the export
    fails (its message starts with ``export: FAILED`` and gives the exporter's cause, and
    its ``summary`` attribute holds the run summary up to that point).
    """
    from core.onnx_model import load_onnx, make_session

    options = options or HfOptions()
    tolerances = tolerances or Tolerances()
    report = _Progress(progress)
    directory = hf_directory(model)
    timings: dict[str, float] = {}
    t_start = time.perf_counter()

    report("load", f"loading {model}", 0.02)
    t0 = time.perf_counter()
    loaded = load_hf_model(
        directory,
        random_weights=options.random_weights,
        config_overrides=options.config_overrides,
        seed=seed,
    )
    timings["load_model"] = time.perf_counter() - t0

    if loaded.encoder:
        report("capture", "forward() on the prompts (encoder)", 0.15)
        capture = capture_forward(loaded, prompts=options.prompts)
    else:
        report("capture", f"generate(): {options.max_new_tokens} new token(s)", 0.15)
        capture = capture_generate(
            loaded, prompts=options.prompts, max_new_tokens=options.max_new_tokens
        )
    timings["capture"] = capture.seconds
    export_info: dict[str, Any] = {"status": "not run (--onnx given)", "seconds": None}

    if onnx is None:
        path = Path(export_path) if export_path else _default_export_path()
        report("export", f"exporting with torch.onnx.export(dynamo=True) to {path}", 0.25)
        from core.hf.export import export_decoder, export_encoder

        exporter = export_encoder if loaded.encoder else export_decoder
        try:
            result = exporter(loaded.model, capture.calls, path)
        except ExportError as exc:
            seconds = getattr(exc, "seconds", None)
            timings["export"] = seconds or 0.0
            export_info = {
                "status": "FAILED",
                "seconds": seconds,
                "cause": getattr(exc, "cause", exc.message),
            }
            exc.summary = _summary(  # type: ignore[attr-defined]
                model, loaded, options, capture, export_info, (), timings
            )
            raise
        timings["export"] = result.seconds
        onnx_path = str(result.path)
        export_info = {
            "status": "OK",
            "seconds": result.seconds,
            "path": onnx_path,
            "dynamic": {
                "batch": result.dynamic.batch,
                "sequence_length": result.dynamic.sequence,
                "past_sequence_length": result.dynamic.past,
            },
        }
    else:
        onnx_path = onnx

    report("load", f"loading ONNX {onnx_path}", 0.7)
    t0 = time.perf_counter()
    onnx_model = load_onnx(onnx_path)
    signature = onnx_model.signature
    session = make_session(onnx_model, provider=provider, opt_level=ort_opt_level)
    timings["load_onnx"] = time.perf_counter() - t0

    from core.compare import compare_outputs

    input_sets: list[InputSet] = []
    ref_outputs: list[OutputSet] = []
    onnx_outputs: list[OutputSet] = []
    comparisons: list[OutputComparison] = []
    masked: list[MaskedInfo] = []
    t_onnx = t_compare = 0.0
    n = len(capture.calls)
    for i, call in enumerate(capture.calls):
        report("onnx", f"ONNX Runtime on {call.label}", 0.75 + 0.2 * i / n)
        feeds = onnx_feeds(call, signature)
        input_sets.append(InputSet(index=i, feeds=feeds, label=call.label))
        t0 = time.perf_counter()
        raw = _run_session(session, feeds, call)
        onnx_seconds = time.perf_counter() - t0
        t_onnx += onnx_seconds

        t0 = time.perf_counter()
        ref = reference_outputs(call, signature.output_names)
        shown: dict[str, np.ndarray] = {}
        names = list(raw) + [name for name in ref if name not in raw]
        for name in names:
            ref_array, onnx_array, note = ref.get(name), raw.get(name), ""
            if name == LOGITS and ref_array is not None and onnx_array is not None:
                onnx_array, note = align_logits(ref_array, onnx_array)
            if onnx_array is not None:
                shown[name] = onnx_array
            comparison, info = compare_step_output(
                ref_array,
                onnx_array,
                call=call,
                name=name,
                input_set=i,
                tolerance=tolerances.for_output(name),
                compare=compare_outputs,
                note=note,
            )
            comparisons.append(comparison)
            if info is not None:
                masked.append(info)
        t_compare += time.perf_counter() - t0
        ref_outputs.append(OutputSet(arrays=ref, seconds=call.seconds))
        onnx_outputs.append(OutputSet(arrays=shown, seconds=onnx_seconds))
    timings["onnxruntime"] = t_onnx
    timings["compare"] = t_compare
    timings["total"] = time.perf_counter() - t_start
    report("done", "done", 1.0)

    summary = _summary(model, loaded, options, capture, export_info, comparisons, timings)
    summary["masked"] = _masked_summary(masked)
    return ValidationRun(
        model=model,
        onnx=onnx_path,
        signature=signature,
        tolerances=tolerances,
        environment=_environment(provider),
        input_sets=tuple(input_sets),
        comparisons=tuple(comparisons),
        ref_outputs=tuple(ref_outputs),
        onnx_outputs=tuple(onnx_outputs),
        timings=timings,
        extra={
            "kind": "hf_generate",
            "summary": summary,
            "steps": [_step_json(call, comparisons) for call in capture.calls],
            "masked_positions": [m.to_json() for m in masked],
            "onnx_sha256": onnx_model.sha256,
            "opset": signature.opset,
            "producer": signature.producer,
            "ort_opt_level": ort_opt_level,
            "seed": seed,
        },
    )


def compare_step_output(
    ref: np.ndarray | None,
    onnx: np.ndarray | None,
    *,
    call: CapturedCall,
    name: str,
    input_set: int,
    tolerance: Tolerance,
    compare: Callable[..., OutputComparison],
    note: str = "",
) -> tuple[OutputComparison, MaskedInfo | None]:
    """compare_outputs on the attended positions; padding positions are reported apart.

    The ONNX values at masked positions are replaced by torch's before comparing, so the
    verdict and statistics cover attended positions only; how many elements were excluded
    and the largest |onnx - ref| among them go to the message and to the MaskedInfo.
    """
    info: MaskedInfo | None = None
    judged = onnx
    if ref is not None and onnx is not None and ref.shape == onnx.shape:
        where = masked_positions(call, name, tuple(ref.shape))
        if where is not None:
            where = np.broadcast_to(where, ref.shape)
            n_masked = int(where.sum())
            if n_masked:
                diff = np.abs(ref[where].astype(np.float64) - onnx[where].astype(np.float64))
                finite = diff[np.isfinite(diff)]
                max_abs = float(finite.max()) if finite.size else None
                info = MaskedInfo(input_set, name, n_masked, max_abs)
                judged = onnx.copy()
                judged[where] = ref[where].astype(onnx.dtype, copy=False)
    comparison = compare(ref, judged, name=name, input_set=input_set, tolerance=tolerance)
    extra_notes = [text for text in (note, _masked_text(info)) if text]
    if extra_notes:
        message = "; ".join(
            [comparison.message, *extra_notes] if comparison.message else extra_notes
        )
        from dataclasses import replace

        comparison = replace(comparison, message=message)
    return comparison, info


def _masked_text(info: MaskedInfo | None) -> str:
    if info is None:
        return ""
    where = "nan/inf" if info.max_abs is None else f"{info.max_abs:.3g}"
    return (
        f"{info.n_masked} padding element(s) excluded (never attended), max abs diff there {where}"
    )


def _run_session(session: Any, feeds: Mapping[str, np.ndarray], call: CapturedCall) -> dict:
    names = [o.name for o in session.get_outputs()]
    try:
        values = session.run(names, dict(feeds))
    except Exception as exc:  # onnxruntime raises its own exception types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OnnxRunError(f"ONNX Runtime failed on {call.label}: {first}") from exc
    return dict(zip(names, values, strict=True))


def step_ok(index: int, comparisons: Any) -> bool:
    mine = [c for c in comparisons if c.input_set == index]
    return bool(mine) and all(c.status.passed for c in mine)


def _step_json(call: CapturedCall, comparisons: Any) -> dict[str, Any]:
    return {
        "index": call.index,
        "step": call.step,
        "phase": call.phase,
        "label": call.label,
        "batch": int(call.input_ids.shape[0]),
        "sequence_length": int(call.input_ids.shape[1]),
        "past_length": call.past_length,
        "ok": step_ok(call.index, comparisons),
    }


def _summary(
    model: str,
    loaded: LoadedHfModel,
    options: HfOptions,
    capture: Capture,
    export_info: Mapping[str, Any],
    comparisons: Any,
    timings: Mapping[str, float],
) -> dict[str, Any]:
    calls = capture.calls
    ok = [call.label for call in calls if step_ok(call.index, comparisons)]
    failed = [call.label for call in calls if call.label not in ok]
    first_mask = calls[0].inputs.get("attention_mask")
    return {
        "model": model,
        "model_type": loaded.model_type,
        "architecture": type(loaded.model).__name__,
        "config_overrides": dict(loaded.config_overrides),
        "weights": "random" if loaded.random_weights else "trained",
        "prompts": list(capture.prompts),
        "left_padded": _padding_side(first_mask) == "left",
        "padding": _padding_side(first_mask),
        "generated": list(capture.generated),
        "kind": "encoder" if loaded.encoder else "causal_lm",
        "max_new_tokens": None if loaded.encoder else options.max_new_tokens,
        "n_calls": len(calls),
        "n_prefill": sum(c.phase == "prefill" for c in calls),
        "n_decode": sum(c.phase == "decode" for c in calls),
        "n_forward": sum(c.phase == "forward" for c in calls),
        "export": dict(export_info),
        "steps_ok": len(ok) if comparisons else 0,
        "steps_total": len(calls),
        "failed_steps": failed if comparisons else [],
        "timings": {
            "load": timings.get("load_model"),
            "capture": timings.get("capture"),
            "export": timings.get("export"),
            "onnxruntime": timings.get("onnxruntime"),
            "compare": timings.get("compare"),
            "total": timings.get("total"),
        },
        "transformers": _transformers_version(),
    }


def _padding_side(mask: np.ndarray | None) -> str:
    if mask is None or not (mask == 0).any():
        return "none"
    return "left" if (mask[:, 0] == 0).any() else "right"


def _masked_summary(masked: list[MaskedInfo]) -> dict[str, Any]:
    diffs = [m.max_abs for m in masked if m.max_abs is not None]
    return {
        "n_elements": sum(m.n_masked for m in masked),
        "max_abs": max(diffs) if diffs else None,
        "note": MASKED_NOTE,
    }


def _default_export_path() -> Path:
    return Path(tempfile.mkdtemp(prefix="parity-hf-")) / "model.onnx"


def _transformers_version() -> str:
    import sys

    module = sys.modules.get("transformers")
    return str(getattr(module, "__version__", "not loaded"))


def _environment(provider: str) -> dict[str, str]:
    try:
        from core.validate import environment
    except ImportError:
        env: dict[str, str] = {"provider": provider}
    else:
        env = dict(environment(provider))
    env["transformers"] = _transformers_version()
    return env


class _Progress:
    """Sends core.validate.ProgressEvent-s (step, message, fraction, elapsed) if asked."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._callback = callback
        self._start = time.perf_counter()

    def __call__(self, step: str, message: str, fraction: float | None = None) -> None:
        if self._callback is None:
            return
        elapsed = time.perf_counter() - self._start
        try:
            from core.validate import ProgressEvent
        except ImportError:
            return
        self._callback(ProgressEvent(step, message, fraction, elapsed))


__all__ = ["MASKED_NOTE", "MaskedInfo", "ParityError", "compare_step_output", "run_hf_validation"]
