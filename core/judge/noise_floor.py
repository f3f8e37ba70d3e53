"""Rounding noise at the candidate's precision, measured: an output's error against a float64
run of the reference, for ONNX and for the floor that precision sets (``--noise-floor``).

torch at a precision is itself off the float64 result by its rounding; an ONNX export that
only rounds differently is off by about as much (ratio near 1), a bug by orders of magnitude
more. The floor follows the precision the candidate computes the output at
(parity.load.file_precision): float32, float16 and bfloat16 are torch's own error at that
precision (torch run at it, or emulated where it cannot run so); int8 is a uniform
quantizer's noise at the compared value's scale, sqrt(n) x scale/2 for n activations quantized
upstream (scale/2: one quantizer's largest error; independent ones add in quadrature), plus
how far float64 lies outside the range the output's DequantizeLinear can give (saturation),
since torch has no int8 run of the same model. The verdict stays the tolerance's: this only says
which of the two an error looks like. Every sentence about it is made here.

A 16-bit file's ratio alone cannot tell a small bug from rounding: torch's own float16 error
is a thousand times float32's, so a scaled LayerNorm weight at 2-3x it still reads as
"within float16 rounding". Where the file's float32 twin was run (`Noise.export_error`: its
graph and 16-bit weights computed in float32, against torch with the same weights), the 16-bit
rounding is taken out of the comparison: what is left must be float32 arithmetic, at most
a tenth of torch's own 16-bit error (`twin_within`), or the error is not rounding whatever
the ratio. `noise_rank` carries that, so every reader of it (findings, suggestions, the noise
lines) decides the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from parity.results import Noise, OutputComparison, PrecisionRun
from parity.text import multiple_text as _times  # a measured multiple in a sentence
from parity.text import number_text

ROUNDING_RATIO = 10.0  # ONNX's float64 error at most this x the floor: rounding noise
SIXTEEN_BIT = ("float16", "bfloat16")


def noise_of(
    ref32: np.ndarray,
    onnx: np.ndarray,
    ref64: np.ndarray,
    exclude: np.ndarray | None = None,
    *,
    precision: str = "float32",
    emulated: str = "",
) -> Noise | None:
    """Noise of one float output over the elements the verdict judges (`exclude`, the run's
    exclusion mask broadcastable to the output: True is not judged, e.g. padding); `ref32`
    is torch's run at `precision` (float32 unless the candidate is 16-bit). None when the
    arrays cannot be compared so."""
    diffs = _diffs(ref64, exclude, onnx, ref32)
    if diffs is None:
        return None
    onnx_diff, torch_diff = diffs
    torch_error = _max_abs(torch_diff)
    onnx_error = _max_abs(onnx_diff)
    ratio = onnx_error / torch_error if torch_error > 0 else None
    return Noise(torch_error, onnx_error, ratio, precision=precision, emulated=emulated)


def int8_noise_of(
    onnx: np.ndarray,
    ref64: np.ndarray,
    scale: float,
    tensors: int,
    exclude: np.ndarray | None = None,
    value_range: tuple[float | None, float | None] = (None, None),
) -> Noise | None:
    """Noise of an int8 candidate's output: ONNX's max error against float64 over the floor
    sqrt(tensors) x scale/2, plus the most float64 lies outside `value_range` (what the
    output's DequantizeLinear can give: saturation is quantization too)."""
    diffs = _diffs(ref64, exclude, onnx, ref64)
    if diffs is None or not scale > 0:
        return None
    onnx_error = _max_abs(diffs[0])
    clipped = 0.0
    low, high = value_range
    if low is not None and high is not None:
        r64 = ref64.astype(np.float64, copy=False)
        if exclude is not None:
            r64 = r64[~np.broadcast_to(np.asarray(exclude, dtype=bool), ref64.shape)]
        with np.errstate(all="ignore"):
            clipped = _max_abs(np.maximum(0.0, np.maximum(r64 - high, low - r64)))
    n = max(tensors, 1)
    floor = math.sqrt(n) * scale / 2 + clipped
    return Noise(floor, onnx_error, onnx_error / floor, precision="int8", scale=scale,
                 tensors=n, clipped=clipped)  # fmt: skip


def _diffs(
    ref64: np.ndarray, exclude: np.ndarray | None, *arrays: np.ndarray
) -> list[np.ndarray] | None:
    """Each array minus ref64 (in float64), over the judged elements; None when shapes or
    types do not allow it."""
    if ref64.size == 0 or any(a.shape != ref64.shape for a in arrays):
        return None
    if not all(np.issubdtype(a.dtype, np.floating) for a in (ref64, *arrays)):
        return None
    r64 = ref64.astype(np.float64, copy=False)
    with np.errstate(all="ignore"):
        diffs = [a.astype(np.float64) - r64 for a in arrays]
        finite = np.isfinite(r64)
        for d in diffs:  # Inf or NaN where float64 is finite: an unbounded error, never 0
            d[finite & ~np.isfinite(d)] = np.inf
    if exclude is not None:
        try:
            judged = ~np.broadcast_to(np.asarray(exclude, dtype=bool), ref64.shape)
        except ValueError:
            return None
        diffs = [d[judged] for d in diffs]
    return diffs


def _max_abs(d: np.ndarray) -> float:
    """The largest error; NaN (non-finite on both sides, where float64 is too) is left out,
    inf (non-finite where float64 is finite, _diffs) counts: no floor reads it as rounding."""
    d = np.abs(d[~np.isnan(d)])
    return float(d.max()) if d.size else 0.0


def with_noise(
    comparisons: Sequence[OutputComparison],
    ref32: Mapping[str, np.ndarray],
    onnx: Mapping[str, np.ndarray],
    ref64: Mapping[str, np.ndarray] | None,
    note: str = "",
    exclude: Mapping[str, np.ndarray] | None = None,
    *,
    precisions: Mapping[str, Any] | None = None,
    at_precision: Mapping[str, PrecisionRun] | None = None,
    basis: str = "",
) -> list[OutputComparison]:
    """Each float32 output's comparison with its noise over the elements it judges, at the
    precision the candidate computes it (`precisions`: parity.load.file_precision's
    OutputPrecision by output name; float32 when absent), against torch's run at that
    precision (`at_precision`: 16-bit runs by precision). Where the floor could not be
    measured, a note saying why and noise None. `basis`: how `ref64` was made where torch's
    plain float64 copy could not run (the float32 floor's `emulated`, said with it)."""
    out = []
    for c in comparisons:
        if c.ref_dtype != "float32":
            out.append(c)
            continue
        if ref64 is None:
            out.append(replace(c, notes=(*c.notes, note)) if note else c)
            continue
        found = (precisions or {}).get(c.name)
        precision = getattr(found, "precision", "float32")
        b, r = onnx.get(c.name), ref64.get(c.name)
        mask = (exclude or {}).get(c.name)
        why = ""
        noise = None
        if b is None or r is None:
            pass
        elif precision == "int8" and found is not None:  # int8: a precision was found
            scale = getattr(found, "scale", None)
            if scale is None:
                why = (
                    "int8 noise floor not measured: the file does not hold this output's "
                    "quantization scale (quantized at run time)"
                )
            else:
                limits = (getattr(found, "low", None), getattr(found, "high", None))
                noise = int8_noise_of(b, r, scale, found.tensors, mask, limits)
        elif precision in SIXTEEN_BIT:
            run = (at_precision or {}).get(precision)
            if run is None or run.arrays is None:
                why = (
                    run.note
                    if run is not None and run.note
                    else f"{precision} noise floor not measured: this kind of run measures "
                    "torch in float32 only"
                )
            elif (low := run.arrays.get(c.name)) is None:
                why = f"{precision} noise floor not measured: torch in {precision} gave no {c.name}"
            elif _overflows(low, r):
                why = (
                    f"{precision} noise floor not measured: torch in {precision} gives Inf/NaN "
                    "where float64 is finite"
                )
            else:
                noise = noise_of(low, b, r, mask, precision=precision, emulated=run.emulated)
        else:
            a = ref32.get(c.name)
            noise = None if a is None else noise_of(a, b, r, mask, emulated=basis)
        notes = c.notes if not why or why in c.notes else (*c.notes, why)
        out.append(replace(c, noise=noise, notes=notes))
    return out


def _overflows(low: np.ndarray, ref64: np.ndarray) -> bool:
    """torch at a 16-bit precision is not finite where float64 is (it overflowed): its error
    is no floor."""
    if low.shape != ref64.shape:
        return False
    with np.errstate(all="ignore"):
        return bool(np.any(~np.isfinite(low) & np.isfinite(ref64)))


def floor_words(noise: Noise) -> str:
    """What the floor is, for this noise: torch's own error at its precision, or int8's."""
    if noise.precision == "int8":
        return "the int8 quantization noise"
    return f"torch's own {noise.precision} error"


def noise_sentence(noise: Noise | None) -> str:
    """One sentence: within rounding at the candidate's precision, or not (ratio as ``0.9x`` /
    ``3,600x``); int8 says its formula."""
    if noise is None:
        return "rounding noise not measured"
    p = noise.precision
    if p == "int8":
        return _int8_sentence(noise)
    emulated = f" (emulated: {noise.emulated})" if noise.emulated else ""
    if twin_off(noise):
        ratio = (
            f"{_times(noise.ratio)} torch's own {p} error{emulated}"
            if noise.ratio is not None
            else f"{number_text(noise.onnx_error)} off float64"
        )
        return f"not rounding: {twin_words(noise)}; ONNX is {ratio}"
    if noise.ratio is None:
        if noise.onnx_error == 0:
            return f"exact: torch {p}, ONNX and float64 agree"
        return (
            f"not rounding: torch {p} equals float64 here, ONNX is "
            f"{number_text(noise.onnx_error)} off it"
        )
    if noise.ratio <= ROUNDING_RATIO:
        if p == "float32":
            how = f" ({noise.emulated})" if noise.emulated else ""
            return (
                f"within float32 rounding: ONNX's error against float64 is {_times(noise.ratio)} "
                f"torch's own{how}"
            )
        return f"within {p} rounding: {_times(noise.ratio)} torch's own {p} error{emulated}"
    if p == "float32" and noise.emulated:
        emulated = f" ({noise.emulated})"
    return f"not rounding: {_times(noise.ratio)} torch's own {p} error{emulated}"


def _int8_sentence(noise: Noise) -> str:
    clipped = (
        f" + {number_text(noise.clipped)} that float64 lies outside the output's int8 range"
        if noise.clipped
        else ""
    )
    formula = (
        f"sqrt(n) x scale/2{clipped} = {number_text(noise.torch_error)}: scale "
        f"{number_text(noise.scale)}, n = {noise.tensors} activation(s) quantized upstream"
    )
    cause = "inputs outside the calibrated range, or a bug"
    if noise.emulated:  # a dynamic file's floor, measured (parity.analyses.quantization)
        formula = f"{noise.emulated}: {number_text(noise.torch_error)}"
        cause = "a bug"
    ratio = noise.ratio or 0.0
    if ratio <= ROUNDING_RATIO:
        return f"within int8 quantization: {_times(ratio)} the int8 quantization noise ({formula})"
    return f"more than int8 quantization noise: {_times(ratio)} it ({formula}); {cause}"


def is_rounding(noise: Noise) -> bool:
    """The error looks like the precision's own rounding (ratio at most ROUNDING_RATIO, and
    a 16-bit file's float32 twin within float32 arithmetic of torch with its weights)."""
    return noise_rank(noise) <= ROUNDING_RATIO


def twin_within(export_error: float, floor: float) -> bool:
    """A 16-bit file's float32 twin against torch with the file's own weights (`export_error`)
    is float32 arithmetic: at most a tenth of torch's own 16-bit error (`floor`). The one rule
    for it (parity.analyses.approximation judges a twin by it too)."""
    return export_error <= floor / ROUNDING_RATIO


def noise_rank(n: Noise) -> float:
    """How far from rounding: the ratio (inf when the floor is 0 and ONNX is not exact); for
    a 16-bit output with its twin measured, at least the twin's error in units where the
    twin_within bound is ROUNDING_RATIO (a twin off by more is never rounding)."""
    exact = float("inf") if n.onnx_error > 0 else 0.0
    rank = exact if n.ratio is None else n.ratio
    if n.export_error is not None and n.precision in SIXTEEN_BIT:
        if n.torch_error > 0:
            twin = ROUNDING_RATIO**2 * n.export_error / n.torch_error
        else:
            twin = float("inf") if n.export_error > 0 else 0.0
        rank = max(rank, twin)
    return rank


def twin_off(noise: Noise) -> bool:
    """A 16-bit output whose float32 twin differs from torch with the file's weights beyond
    float32 arithmetic: an error in the export itself, whatever its ratio says."""
    e = noise.export_error
    if e is None or noise.precision not in SIXTEEN_BIT:
        return False
    return not twin_within(e, noise.torch_error)


def twin_words(noise: Noise) -> str:
    """The twin's comparison in words, for a 16-bit output where it was measured ("" where
    not): "its float32 twin (…) is 0.012 off torch with the file's float16 weights, where
    float32 arithmetic allows 0.00049"."""
    e, p = noise.export_error, noise.precision
    if e is None or p not in SIXTEEN_BIT:
        return ""
    return (
        f"its float32 twin (the same graph and {p} weights computed without rounding to {p}) "
        f"is {number_text(e)} off torch with the file's {p} weights, where float32 arithmetic "
        f"allows {number_text(noise.torch_error / ROUNDING_RATIO)} (a tenth of torch's own {p} "
        "error)"
    )


def output_floors(comparisons: Sequence[OutputComparison]) -> dict[str, tuple[Noise, float, int]]:
    """Per float32 output with noise everywhere it was measured: its worst noise (largest
    ratio) over input sets and candidates, its floor (the largest torch_error: what a
    "k x rounding noise" tolerance multiplies) and over how many input sets. The noise line
    and the suggestion both read these, so they show the same numbers."""
    found: dict[str, list[Noise]] = {}
    sets: dict[str, set[int]] = {}
    for c in comparisons:
        if c.ref_dtype == "float32" and c.noise is not None:
            found.setdefault(c.name, []).append(c.noise)
            sets.setdefault(c.name, set()).add(c.input_set)
    return {
        name: (max(ns, key=noise_rank), max(n.torch_error for n in ns), len(sets[name]))
        for name, ns in found.items()
    }


def set_noise_line(
    comparisons: Sequence[OutputComparison], c: OutputComparison, set_words: str
) -> str:
    """One comparison's noise said as its input set's (`set_words`), with the run's figure
    beside it where that differs: every other view shows the output's worst over the run,
    so a view of one set says which it shows."""
    line = f"Rounding noise on {set_words}: {noise_sentence(c.noise)}"
    mine = [x for x in comparisons if x.candidate == c.candidate]
    worst = output_floors(mine).get(c.name)
    if worst is not None and c.noise is not None and worst[0] != c.noise:
        line += (
            f"; over the run (its worst input set, as other views show): {noise_sentence(worst[0])}"
        )
    return line


def noise_lines(comparisons: Sequence[OutputComparison]) -> list[str]:
    """Per output (its worst input set): name: sentence (floor / ONNX error vs float64; the
    largest floor over input sets where it differs, the number "k x rounding noise" uses)."""
    floors = output_floors(comparisons)
    lines = []
    names = dict.fromkeys(c.name for c in comparisons if c.ref_dtype == "float32")
    for name in names:
        if name not in floors:
            lines.append(f"{name}: {noise_sentence(None)}")
            continue
        n, floor, count = floors[name]
        side = "int8 noise" if n.precision == "int8" else f"torch {n.precision}"
        figures = (
            f" ({side} {number_text(n.torch_error)}, ONNX {number_text(n.onnx_error)} off float64"
        )
        if floor != n.torch_error:
            figures += f"; {side} up to {number_text(floor)} over {count} input sets"
        lines.append(f"{name}: {noise_sentence(n)}{figures})")
    return lines
