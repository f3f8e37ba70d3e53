"""The noise floor's result (--noise-floor, parity.judge.noise_floor measures it): each output's
rounding noise at the candidate's precision, held on its row (`OutputComparison.noise`: one
per input set and output, the report's `outputs[].noise`), with its JSON, the same in the
report and a saved run. Its findings (rounding or a bug, a bug a tolerance hides) are
parity.show.noise_findings'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import parity.files.strict_json as sj
from parity.files.json_output import from_exact, strict

__all__ = ["NOISE_PRECISIONS", "Noise", "PrecisionRun", "noise_from_json", "noise_to_json"]

NOISE_PRECISIONS = ("float32", "float16", "bfloat16", "int8")  # `outputs[].noise.precision`


@dataclass(frozen=True)
class PrecisionRun:
    """The reference run once more at a 16-bit precision (``--noise-floor`` on a float16 /
    bfloat16 candidate): its outputs by ONNX name (None: not run, `note` says why), and how
    it was emulated where torch could not run at that precision ("" where it did)."""

    arrays: Mapping[str, np.ndarray] | None
    emulated: str = ""
    note: str = ""


@dataclass(frozen=True)
class Noise:
    """An output's rounding noise at the candidate's precision, measured against the reference
    run in float64 (parity.judge.noise_floor): `onnx_error` = max |onnx - torch64|; `torch_error` =
    the floor: max |torch - torch64| with torch run at `precision` (float32, float16,
    bfloat16; `emulated` says how where torch could not run at it), or for int8 the
    quantization noise sqrt(n) x scale/2 + clipped (`scale` the compared value's quantization
    scale, `tensors` = n the activations quantized upstream, `clipped` the most float64 lies
    outside the range its DequantizeLinear can give); `ratio` = onnx_error / torch_error
    (None where torch_error is 0). `export_error`, 16-bit only: the file's float32 twin (its
    graph and 16-bit weights computed in float32) against torch with those same weights,
    max abs: the export with the 16-bit rounding taken out (None: not measured;
    parity.analyses.approximation measures it, parity.judge.noise_floor judges it)."""

    torch_error: float
    onnx_error: float
    ratio: float | None
    precision: str = "float32"
    scale: float | None = None
    tensors: int = 0
    clipped: float = 0.0  # int8: how far float64 lies outside the output's range, at most
    emulated: str = ""
    export_error: float | None = None


def noise_to_json(n: Noise | None) -> dict[str, Any] | None:
    """``outputs[].noise``, the same in the report and the manifest (strict: null for
    non-finite); int8's scale, tensors and clipped under "quantization"."""
    if n is None:
        return None
    return strict(
        {
            "torch_error": n.torch_error,
            "onnx_error": n.onnx_error,
            "ratio": n.ratio,
            "precision": n.precision,
            "quantization": None
            if n.precision != "int8"
            else {"scale": n.scale, "tensors": int(n.tensors), "clipped": n.clipped},
            "emulated": n.emulated or None,
            "export_error": n.export_error,
        }
    )


def noise_from_json(raw: Any, at: str) -> Noise | None:
    """Noise read back; precision, quantization, emulated and export_error are absent before
    they existed."""
    if raw is None:
        return None
    raw = sj.obj(raw, at)
    precision = sj.string(raw.get("precision", "float32"), f"{at}.precision")
    if precision not in NOISE_PRECISIONS:
        raise sj.FieldError(f"{at}.precision: expected one of {', '.join(NOISE_PRECISIONS)}")
    quantization = raw.get("quantization")
    q = {} if quantization is None else sj.obj(quantization, f"{at}.quantization")
    return Noise(
        torch_error=from_exact(raw.get("torch_error"), f"{at}.torch_error") or 0.0,
        onnx_error=from_exact(raw.get("onnx_error"), f"{at}.onnx_error") or 0.0,
        ratio=from_exact(raw.get("ratio"), f"{at}.ratio"),
        precision=precision,
        scale=from_exact(q.get("scale"), f"{at}.quantization.scale"),
        tensors=sj.integer(q.get("tensors", 0), f"{at}.quantization.tensors"),
        clipped=from_exact(q.get("clipped"), f"{at}.quantization.clipped") or 0.0,
        emulated=sj.optional(sj.string, raw.get("emulated"), f"{at}.emulated") or "",
        export_error=from_exact(raw.get("export_error"), f"{at}.export_error"),
    )
