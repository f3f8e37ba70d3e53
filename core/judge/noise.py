"""Float32 rounding noise, measured: an output's error against a float64 run of the reference,
for ONNX and for torch's own float32 run (``--noise-floor``).

torch in float32 is itself off the float64 result by its rounding; an ONNX export that only
rounds differently is off by about as much (ratio near 1), a bug by orders of magnitude more.
The verdict stays the tolerance's: this only says which of the two an error looks like.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from parity.results import Noise, OutputComparison
from parity.text import number_text

ROUNDING_RATIO = 10.0  # ONNX's float64 error at most this x torch's own: rounding noise


def noise_of(
    ref32: np.ndarray, onnx: np.ndarray, ref64: np.ndarray, exclude: np.ndarray | None = None
) -> Noise | None:
    """Noise of one float output over the elements the verdict judges (`exclude`, the run's
    exclusion mask broadcastable to the output: True is not judged, e.g. padding); None when
    the arrays cannot be compared so."""
    if not (ref32.shape == onnx.shape == ref64.shape) or ref32.size == 0:
        return None
    if not all(np.issubdtype(a.dtype, np.floating) for a in (ref32, onnx, ref64)):
        return None
    r64 = ref64.astype(np.float64, copy=False)
    with np.errstate(all="ignore"):
        torch_diff = ref32.astype(np.float64) - r64
        onnx_diff = onnx.astype(np.float64) - r64
    if exclude is not None:
        try:
            judged = ~np.broadcast_to(np.asarray(exclude, dtype=bool), ref32.shape)
        except ValueError:
            return None
        torch_diff, onnx_diff = torch_diff[judged], onnx_diff[judged]
    torch_error = _max_abs(torch_diff)
    onnx_error = _max_abs(onnx_diff)
    ratio = onnx_error / torch_error if torch_error > 0 else None
    return Noise(torch_error, onnx_error, ratio)


def _max_abs(d: np.ndarray) -> float:
    d = np.abs(d[np.isfinite(d)])
    return float(d.max()) if d.size else 0.0


def with_noise(
    comparisons: Sequence[OutputComparison],
    ref32: Mapping[str, np.ndarray],
    onnx: Mapping[str, np.ndarray],
    ref64: Mapping[str, np.ndarray] | None,
    note: str = "",
    exclude: Mapping[str, np.ndarray] | None = None,
) -> list[OutputComparison]:
    """Each float32 output's comparison with its noise over the elements it judges (or,
    when the float64 run could not be made, a note saying why and noise None)."""
    out = []
    for c in comparisons:
        if c.ref_dtype != "float32":
            out.append(c)
            continue
        if ref64 is None:
            out.append(replace(c, notes=(*c.notes, note)) if note else c)
            continue
        a, b, r = ref32.get(c.name), onnx.get(c.name), ref64.get(c.name)
        mask = (exclude or {}).get(c.name)
        noise = None if a is None or b is None or r is None else noise_of(a, b, r, mask)
        out.append(replace(c, noise=noise))
    return out


def noise_sentence(noise: Noise | None) -> str:
    """One sentence: within float32 rounding, or not (ratio as ``0.9x`` / ``3,600x``)."""
    if noise is None:
        return "rounding noise not measured"
    if noise.ratio is None:
        if noise.onnx_error == 0:
            return "exact: torch float32, ONNX and float64 agree"
        return (
            f"not rounding: torch float32 equals float64 here, ONNX is "
            f"{number_text(noise.onnx_error)} off it"
        )
    if noise.ratio <= ROUNDING_RATIO:
        return (
            f"within float32 rounding: ONNX's error against float64 is {_times(noise.ratio)} "
            "torch's own"
        )
    return f"not rounding: {_times(noise.ratio)} torch's own float32 error"


def _times(ratio: float) -> str:
    if ratio >= 100:
        return f"{float(f'{ratio:.2g}'):,.0f}\u00d7"
    return f"{ratio:.2g}\u00d7"


def noise_lines(comparisons: Sequence[OutputComparison]) -> list[str]:
    """Per output (its worst input set): name: sentence (torch / ONNX error vs float64)."""
    worst: dict[str, OutputComparison] = {}
    for c in comparisons:
        if c.ref_dtype != "float32":
            continue
        best = worst.get(c.name)
        if best is None or _rank(c) > _rank(best):
            worst[c.name] = c
    lines = []
    for name, c in worst.items():
        n = c.noise
        figures = (
            ""
            if n is None
            else f" (torch float32 {number_text(n.torch_error)}, ONNX {number_text(n.onnx_error)}"
            " off float64)"
        )
        lines.append(f"{name}: {noise_sentence(n)}{figures}")
    return lines


def _rank(c: OutputComparison) -> float:
    if c.noise is None:
        return -1.0
    return float("inf") if c.noise.ratio is None and c.noise.onnx_error else (c.noise.ratio or 0)
