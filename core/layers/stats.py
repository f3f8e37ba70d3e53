"""The light statistics of one intermediate value, in one fast pass over the two arrays.

Intermediates do not need the outputs' full statistics (quantiles, re-judge profiles): only
what the criterion reads (parity.layers.criterion) and what a table shows.

`error_ratio` = max over elements of |onnx - ref| / (scale + |ref|), where `scale` is the
median of the non-zero |ref| (from a strided sample of at most 65,536 elements). It is the
pass rule with atol = scale and rtol = 1, made dimensionless: near-zero elements are judged
against the value's typical size, large ones relative to themselves, so attention masks
(finfo.min, -1e9) and big logits do not read as large errors, and a tensor's overall size
does not matter. Non-finite elements are compared apart, as in the outputs' pass rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_SAMPLE = 65_536


@dataclass(frozen=True)
class ValueStats:
    shape_ok: bool
    max_abs: float | None
    max_rel: float | None
    scale: float | None
    error_ratio: float | None
    cosine: float | None
    n_nonfinite_mismatch: int


SHAPE_MISMATCH = ValueStats(False, None, None, None, None, None, 0)


def value_stats(ref: np.ndarray, onnx: np.ndarray) -> ValueStats:
    """Statistics of `onnx` against `ref`, in chunks so temporaries stay small."""
    if tuple(ref.shape) != tuple(onnx.shape):
        return SHAPE_MISMATCH
    r_all = np.ascontiguousarray(ref).ravel()
    o_all = np.ascontiguousarray(onnx).ravel()
    if r_all.size == 0:
        return ValueStats(True, 0.0, 0.0, 0.0, 0.0, None, 0)
    scale = _scale(r_all)
    max_abs = max_rel = error_ratio = 0.0
    any_rel = False
    rr = oo = ro = 0.0
    n_bad = n_kept = 0
    with np.errstate(all="ignore"):
        for start in range(0, r_all.size, _CHUNK):
            r = _as_float(r_all[start : start + _CHUNK])
            o = _as_float(o_all[start : start + _CHUNK])
            d = o - r
            if not np.isfinite(d).all():
                r, o, bad = _drop_nonfinite(r, o)
                n_bad += bad
                if r.size == 0:
                    continue
                d = o - r
            n_kept += r.size
            ad = np.abs(d, out=d)
            ar = np.abs(r)
            max_abs = max(max_abs, float(ad.max()))
            nz = ar > 0
            if nz.any():
                any_rel = True
                max_rel = max(max_rel, float((ad[nz] / ar[nz]).max()))
            ar += r.dtype.type(scale) if scale > 0 else _TINY
            error_ratio = max(error_ratio, float(np.divide(ad, ar, out=ad).max()))
            rr += float(np.dot(r, r))
            oo += float(np.dot(o, o))
            ro += float(np.dot(r, o))
    if n_kept == 0:
        return ValueStats(True, 0.0, 0.0, 0.0, 0.0, None, n_bad)
    cosine = None
    if rr > 0 and oo > 0 and math.isfinite(rr * oo) and math.isfinite(ro):
        cosine = max(-1.0, min(1.0, ro / math.sqrt(rr * oo)))
    return ValueStats(
        True, max_abs, max_rel if any_rel else None, scale, error_ratio, cosine, n_bad
    )


_CHUNK = 1 << 22
_TINY = np.float32(np.finfo(np.float32).tiny)


def _as_float(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.float64 or a.dtype == np.float32:
        return a
    if a.dtype == np.bool_:
        return a.astype(np.float32)
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(np.float64)  # exact for any realistic index or shape value
    return a.astype(np.float32)  # float16, bfloat16


def _drop_nonfinite(r: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Keep elements finite on both sides; count one-sided NaN/Inf (same-signed Inf and
    NaN on both sides are equal, as in the outputs' pass rule)."""
    fr, fo = np.isfinite(r), np.isfinite(o)
    both = fr & fo
    odd = ~both
    ro, oo = r[odd], o[odd]
    same = (np.isnan(ro) & np.isnan(oo)) | (np.isinf(ro) & (ro == oo))
    return r[both], o[both], int((~same).sum())


def _scale(r: np.ndarray) -> float:
    step = max(1, r.size // _SAMPLE)
    with np.errstate(all="ignore"):
        sample = np.abs(_as_float(r[::step]))
    sample = sample[(sample > 0) & np.isfinite(sample)]
    if sample.size == 0:
        return 0.0
    return float(np.median(sample))
