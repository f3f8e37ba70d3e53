"""The pass rule, in one place: an element passes when ``|onnx - ref| <= atol + rtol * |ref|``.

NaN on both sides is equal, and so is Inf of one sign on both sides; NaN or Inf on one side
only (or Infs of opposite signs) is a mismatch at any tolerance, counted apart. Integer and
boolean outputs are decided exactly in their own type (the difference from
:mod:`parity.judge.exact_ints`, the comparison without rounding here). Every judge and view
asks this module: the chunked statistics (:mod:`parity.judge.compare_pass`), the re-judge
profile (:mod:`parity.judge.error_profile`), the element views and colours
(:mod:`parity.judge.ratio`, :mod:`parity.show`) and the scatter's pass band.

`allowed` is computed as ``|ref| * rtol + atol`` (float64) everywhere, so a view and the
verdict never disagree on an element at the line.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from parity.judge.exact_ints import exact_diff, is_integer_pair

# The rule in words, once: the CLI's help, the terminal's notes, the HTML report and the pages
ALLOWED_TEXT = "atol + rtol·|reference|"
RULE_TEXT = f"|ONNX − reference| ≤ {ALLOWED_TEXT}"
RULE_SENTENCE = f"An element passes when {RULE_TEXT}; NaN or ±Inf on one side only never passes."

__all__ = [
    "ALLOWED_TEXT",
    "RULE_SENTENCE",
    "RULE_TEXT",
    "allowed",
    "allowed_at",
    "element_mismatch",
    "exceeds",
    "exact_int_mismatch",
    "one_sided",
    "one_sided_at",
]


def allowed(absref: np.ndarray | float, atol: float, rtol: float) -> np.ndarray:
    """The largest |error| that passes at each ``|ref|``."""
    return allowed_at(np.asarray(absref, dtype=np.float64), atol, rtol)


def allowed_at(absref: Any, atol: float, rtol: float) -> Any:
    """:func:`allowed`, written for a float64 array or one float64 (the comparison's
    compiled loop, :mod:`parity.judge.compare_kernel`, compiles this function)."""
    return absref * rtol + atol


def exceeds(d: np.ndarray, absref: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Per element, whether the finite error ``d`` (>= 0) fails at ``|ref|`` (bool array)."""
    return np.asarray(d) > allowed(absref, atol, rtol)


def one_sided(ref: np.ndarray, onnx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(NaN mismatch, Inf mismatch) per element: NaN on one side only; Inf on one side only
    (the other finite) or Infs of opposite signs. Both are mismatches at any tolerance."""
    return one_sided_at(np.isnan(ref), np.isnan(onnx), np.isinf(ref), np.isinf(onnx), ref == onnx)


def one_sided_at(rn: Any, on: Any, ri: Any, oi: Any, equal: Any) -> tuple[Any, Any]:
    """:func:`one_sided` from each side's NaN and Inf flags and ``ref == onnx``, written for
    bool arrays or single bools (the comparison's compiled loop compiles this function:
    hence ``== False``, which is a logical not for both)."""
    nan_mm = rn != on
    inf_mm = (
        (ri & (oi == False) & (on == False))  # noqa: E712
        | (oi & (ri == False) & (rn == False))  # noqa: E712
        | (ri & oi & (equal == False))  # noqa: E712
    )
    return nan_mm, inf_mm


def exact_int_mismatch(mag: np.ndarray, absref: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Per element, ``mag > atol + rtol * absref`` decided exactly, for the exact integer
    magnitudes of :func:`parity.judge.exact_ints.exact_diff` (uint64, or Python ints)."""
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
    t = allowed(absref, atol, rtol)
    fails = d > t
    # float64 rounding moves d and t by a few ulps at most: re-decide those near the line
    near = np.flatnonzero(np.abs(d - t) <= 2.0**-40 * (d + t))
    if near.size:
        a, q = Fraction(atol), Fraction(rtol)
        flat_fails, flat_mag, flat_ref = fails.reshape(-1), mag.reshape(-1), absref.reshape(-1)
        for i in near:
            flat_fails[i] = Fraction(int(flat_mag[i])) > a + q * int(flat_ref[i])
    return fails


def element_mismatch(
    ref: np.ndarray, onnx: np.ndarray, atol: float, rtol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(|error|, allowed, mismatch) per element of two same-shape arrays (float64, float64,
    bool), decided as the verdict decides it. Equal values, NaN on both sides and equal-signed
    Inf are error 0; a one-sided NaN/Inf is error inf with allowed 1 (a mismatch at any
    tolerance)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if is_integer_pair(ref, onnx):
            mag, _, absref = exact_diff(ref, onnx)
            fails = exact_int_mismatch(mag, absref, atol, rtol)
            return np.asarray(mag, dtype=np.float64), allowed(absref, atol, rtol), fails
        r = np.asarray(ref, dtype=np.float64)
        o = np.asarray(onnx, dtype=np.float64)
        d = np.abs(o - r)
        limit = allowed(np.abs(r), atol, rtol)
        fails = d > limit
        bad = ~np.isfinite(d)
        if bad.any():
            nan_mm, inf_mm = one_sided(r, o)
            mm = nan_mm | inf_mm
            fails = np.where(bad, mm, fails)
            d = np.where(bad, np.where(mm, math.inf, 0.0), d)
            limit = np.where(bad, 1.0, limit)
        return d, limit, fails
