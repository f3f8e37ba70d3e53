"""The error in units of the allowed error: ``ratio = |onnx - ref| / (atol + rtol * |ref|)``.

An element passes when its ratio is at most 1, so 1 is the pass line whatever the tolerance and
whatever the output's scale. Which elements fail is the pass rule's (:mod:`parity.judge.pass_rule`);
this module turns it into the ratio every view reads: per element (:func:`element_errors`, the
Inspect heatmaps, the per-axis profile) and per comparison from its profile, no tensors
(:func:`comparison_ratio`, the grids and the sentences). Its colours are
:mod:`parity.show.colors`'.
"""

from __future__ import annotations

import numpy as np

from parity.judge.pass_rule import element_mismatch
from parity.results import OutputComparison, Status
from parity.tolerances import Tolerance

__all__ = ["comparison_ratio", "element_errors", "element_ratio"]

_ABOVE_ONE = float(np.nextafter(1.0, 2.0))


def element_ratio(
    ref: np.ndarray, onnx: np.ndarray, tolerance: Tolerance
) -> tuple[np.ndarray, np.ndarray]:
    """(ratio as float64, mismatch as bool) per element of two same-shape arrays."""
    _, ratio, fails = element_errors(ref, onnx, tolerance)
    return ratio, fails


def element_errors(
    ref: np.ndarray, onnx: np.ndarray, tolerance: Tolerance
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(|error|, ratio, mismatch) per element of two same-shape arrays (float64, bool).

    Mismatch is the pass rule's (parity.judge.pass_rule, as the verdict decides it), and the
    ratio is kept on its side of 1 (a failing element whose ratio rounds to 1 reads just above
    it). Equal values, NaN on both sides and equal-signed Inf are error 0; a NaN/Inf on one side
    only is error inf and a mismatch at any tolerance.
    """
    d, limit, fails = element_mismatch(ref, onnx, float(tolerance.atol), float(tolerance.rtol))
    ratio = _divide(d, limit)
    ratio = np.where(fails, np.maximum(ratio, _ABOVE_ONE), np.minimum(ratio, 1.0))
    return d, ratio, fails


def _divide(d: np.ndarray, allowed: np.ndarray) -> np.ndarray | np.float64:
    """d / allowed, where nothing allowed (atol 0 at ref 0) is inf for an error, 0 for none."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.divide(d, allowed)
    if np.ndim(ratio) == 0:
        return np.float64(0.0) if np.isnan(ratio) else ratio
    ratio[np.isnan(ratio)] = 0.0  # 0 / 0 only: d and allowed are finite here
    return ratio


def comparison_ratio(c: OutputComparison) -> float | None:
    """The worst element's error ÷ allowed error at the comparison's tolerance, from its
    profile (no tensors); on the side of 1 its verdict is on. None when the output is not
    judged element by element (shape, missing, strings)."""
    if c.profile is None or c.status in (Status.SHAPE_MISMATCH, Status.MISSING):
        return None
    ratio = c.profile.max_ratio(c.tolerance)
    failing = (c.n_mismatch or 0) > 0
    if failing and ratio <= 1.0:  # within the profile's slack of the line
        return _ABOVE_ONE
    return min(ratio, 1.0) if not failing else ratio
