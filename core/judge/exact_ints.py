"""Integer and boolean outputs, compared exactly in their own type.

A float64 copy of an int64 holds 53 bits: ``2**60`` and ``2**60 + 1`` become the same number
and would pass at atol 0. Here the difference is taken in 64-bit unsigned arithmetic (exact
for every pair of int64 / uint64 / bool values) and the pass rule
``|onnx - ref| <= atol + rtol * |ref|`` is decided without rounding: in integers when
rtol is 0, else in float64 with the few elements near the boundary re-decided in exact
rational arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["count_mismatch", "exact_diff", "is_integer_pair", "mismatch_mask"]

_I64_MAX = int(np.iinfo(np.int64).max)


def is_integer_pair(ref: np.ndarray, onnx: np.ndarray) -> bool:
    """Both sides hold integers or booleans: compared by :func:`exact_diff`."""
    return ref.dtype.kind in "biu" and onnx.dtype.kind in "biu"


def exact_diff(ref: np.ndarray, onnx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``|onnx - ref|``, ``onnx >= ref``, ``|ref|``): the magnitudes as exact uint64 (as
    Python ints in the rare case of uint64 above int64 against negative values)."""
    r, o = _common(ref, onnx)
    if r.dtype == object:  # uint64 beyond int64 on one side, negatives on the other: rare
        diff = o - r
        ge = np.asarray(diff >= 0, dtype=bool)
        return np.abs(diff), ge, np.abs(r)  # Python ints: |d| may reach 2**64 + 2**63
    ge = o >= r
    ru, ou = r.view(np.uint64), o.view(np.uint64)
    mag = np.where(ge, ou - ru, ru - ou)  # modulo 2**64, exact since 0 <= |o - r| < 2**64
    # |int64 min| is 2**63: exact in uint64
    absref = ru if r.dtype == np.uint64 else np.where(r < 0, np.uint64(0) - ru, ru)
    return mag, ge, absref


def count_mismatch(mag: np.ndarray, absref: np.ndarray, atol: float, rtol: float) -> int:
    """Elements with ``mag > atol + rtol * absref``, decided exactly."""
    return int(np.count_nonzero(mismatch_mask(mag, absref, atol, rtol)))


def mismatch_mask(mag: np.ndarray, absref: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Per element, ``mag > atol + rtol * absref``, decided exactly (bool array)."""
    if mag.dtype == object:  # Python ints (see exact_diff)
        a, q = Fraction(atol), Fraction(rtol)
        flat = zip(mag.reshape(-1), absref.reshape(-1), strict=True)
        return np.array([m > a + q * r for m, r in flat], dtype=bool).reshape(mag.shape)
    if rtol == 0.0:
        bound = math.floor(atol)  # integers: d <= atol  <=>  d <= floor(atol)
        if bound >= 2**64 - 1:
            return np.zeros(mag.shape, dtype=bool)
        return mag > np.uint64(bound)
    d = mag.astype(np.float64)
    t = atol + rtol * absref.astype(np.float64)
    fails = d > t
    # float64 rounding moves d and t by a few ulps at most: re-decide those near the line
    near = np.flatnonzero(np.abs(d - t) <= 2.0**-40 * (d + t))
    if near.size:
        a, q = Fraction(atol), Fraction(rtol)
        flat_fails, flat_mag, flat_ref = fails.reshape(-1), mag.reshape(-1), absref.reshape(-1)
        for i in near:
            flat_fails[i] = Fraction(int(flat_mag[i])) > a + q * int(flat_ref[i])
    return fails


def _common(ref: np.ndarray, onnx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both as int64 when the values allow it, else both uint64, else Python ints."""
    big = [a.dtype == np.uint64 and a.size and int(a.max()) > _I64_MAX for a in (ref, onnx)]
    if not any(big):
        return ref.astype(np.int64, copy=False), onnx.astype(np.int64, copy=False)
    if all(a.size == 0 or a.dtype.kind in "bu" or int(a.min()) >= 0 for a in (ref, onnx)):
        return ref.astype(np.uint64, copy=False), onnx.astype(np.uint64, copy=False)
    return ref.astype(object), onnx.astype(object)
