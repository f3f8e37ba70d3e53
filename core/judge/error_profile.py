"""The re-judge profile of one output: a few KB that answer pass/fail at any (atol, rtol).

What the dashboard's sliders, re-judging and saved runs use instead of the tensors.
:mod:`parity.judge.compare_pass` builds it in its one pass over the data; this module only reads it.

How it stays exact and small:

* ``min_atol(rtol) = max(|d| - rtol * |ref|)`` is a maximum of linear functions of the
  points ``(|ref|, |d|)``, so only the vertices of their upper-left convex hull matter
  (tens of points, see :mod:`parity.judge.hull`). Points within ``hull_slack`` above the hull may be
  missing (see :mod:`parity.judge.compare_pass`), so ``min_atol`` may fall short of the exact value
  by at most ``hull_slack`` and ``passes`` can only be wrong within that band above the flip
  point.
* The 512 largest errors are kept with their ``|ref|``: any tolerance with atol at or above
  the 512th largest error is counted exactly from them, for every rtol.
* A histogram of ``|d|`` with 8 bins per octave (float64 exponent + 3 mantissa bits;
  bin j > 0 holds ``(edge(j-1), edge(j)]``) gives exact counts at rtol = 0 when atol is a
  bin edge, and log-interpolated counts between edges (always within the bin's exact bounds).
* For rtol > 0 below that range, the count is estimated from a uniform random sample of
  2048 element pairs outside the top 512 (stratified estimate; standard error at most
  about 1.1 % of the element count) and clamped to exact lower/upper bounds.
* The count at the run's own tolerance is exact (counted during the pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.judge.pass_rule import allowed, exceeds
from parity.tolerances import Tolerance

__all__ = [
    "HIST_BINS",
    "HIST_ROUND_UP",
    "HIST_SHIFT",
    "SAMPLE_PAIRS",
    "TOP_PAIRS",
    "ErrorProfile",
    "hist_bin",
    "hist_edge",
]

HIST_SHIFT = 49  # float64 bits >> 49 keeps exponent + 3 mantissa bits: 8 bins per octave
HIST_ROUND_UP = (1 << HIST_SHIFT) - 1
HIST_BINS = 16385  # bin 0: exact zeros; bins 1..16384: (edge(j-1), edge(j)]
TOP_PAIRS = 512  # largest errors kept with their |ref| in the profile
SAMPLE_PAIRS = 2048  # random pairs kept for the rtol > 0 count estimate


def hist_edge(k: np.ndarray | int) -> np.ndarray:
    """Bin edges: the float64 whose bits are ``k << 49``."""
    return (np.asarray(k, dtype=np.int64) << HIST_SHIFT).view(np.float64)


def hist_bin(x: float) -> int:
    """Histogram bin of a non-negative value: 0 for 0, else j with edge(j-1) < x <= edge(j)."""
    bits = int(np.float64(x).view(np.int64))
    return (bits + HIST_ROUND_UP) >> HIST_SHIFT


# --------------------------------------------------------------------------------------------
# Profile
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ErrorProfile:
    """What re-judges one output at any tolerance: numpy arrays and scalars only (no pickle).

    ``d`` is |onnx - ref| and ``r`` is |ref| over finite pairs (both sides finite).
    """

    n_elements: int
    n_finite: int
    n_nonfinite_mismatch: int  # one-sided NaN/Inf and +Inf vs -Inf: fail at any tolerance
    hull_r: np.ndarray  # upper-left hull vertices of (r, d) over pairs with r > 0, r ascending
    hull_d: np.ndarray
    zero_ref_max: float  # largest d where ref == 0 (0.0 when none)
    hull_slack: float  # points up to this far above the hull may be missing (see module doc)
    hist_bins: np.ndarray  # non-empty histogram bins (int64), see module docstring
    hist_counts: np.ndarray  # their counts (int64)
    top_d: np.ndarray  # the largest d, descending (all of them when n_finite <= 512)
    top_r: np.ndarray  # r at those elements
    sample_d: np.ndarray  # random pairs with d <= top_d[-1] (the stratum below the top)
    sample_r: np.ndarray
    anchor: np.ndarray  # [atol, rtol, n_mismatch] counted exactly during the pass

    # -- exact answers -------------------------------------------------------------------

    def min_atol(self, rtol: float) -> float | None:
        """Smallest atol that passes at this rtol; None when non-finite mismatches exist."""
        if self.n_nonfinite_mismatch:
            return None
        candidates = [0.0, float(self.zero_ref_max)]
        if self.hull_d.size:
            candidates.append(float(np.max(self.hull_d - rtol * self.hull_r)))
        if self.top_d.size:
            candidates.append(float(np.max(self.top_d - rtol * self.top_r)))
        atol = max(candidates)
        # The pass rule is evaluated as d <= atol + rtol*r in float64; step up the last ulps.
        for _ in range(8):
            if self._finite_passes(atol, rtol):
                break
            atol = float(np.nextafter(atol, math.inf))
        return atol

    def max_ratio(self, tol: Tolerance) -> float:
        """Largest ``|d| / (atol + rtol * |ref|)``: the error in units of the allowed error,
        1 being the pass line (inf with non-finite mismatches, or an error where nothing is
        allowed). The ratio of two linear functions peaks at a vertex of the upper-left hull,
        so the hull, the top pairs and the ref == 0 maximum hold it (low by at most
        ``hull_slack`` in |d|, like ``min_atol``)."""
        if self.n_nonfinite_mismatch:
            return math.inf
        r = np.concatenate([self.hull_r, self.top_r, [0.0]])
        d = np.concatenate([self.hull_d, self.top_d, [self.zero_ref_max]])
        limit = allowed(r, tol.atol, tol.rtol)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(limit > 0, d / limit, np.where(d > 0, math.inf, 0.0))
        return float(ratio.max())

    def passes(self, tol: Tolerance) -> bool:
        """Whether every element passes at ``tol`` (at the run's own tolerance: its exact count,
        which for integer outputs was decided in their own type)."""
        a_atol, a_rtol, a_count = (float(x) for x in self.anchor)
        if tol.atol == a_atol and tol.rtol == a_rtol and a_count >= 0:
            return a_count == 0
        return self.n_nonfinite_mismatch == 0 and self._finite_passes(tol.atol, tol.rtol)

    def _finite_passes(self, atol: float, rtol: float) -> bool:
        if self.zero_ref_max > atol:
            return False
        if self.hull_d.size and bool(np.any(exceeds(self.hull_d, self.hull_r, atol, rtol))):
            return False
        return not (self.top_d.size and bool(np.any(exceeds(self.top_d, self.top_r, atol, rtol))))

    # -- counts ---------------------------------------------------------------------------

    def n_mismatch(self, tol: Tolerance) -> int:
        """Mismatched elements at ``tol``.

        Exact when: ``tol`` is the run's own tolerance; every element passes; atol is at or
        above the 512th largest error (any rtol); the output has at most 512 finite pairs;
        or rtol == 0 and atol is a histogram edge. Otherwise an estimate that always lies
        within :meth:`n_mismatch_bounds` (see the module docstring for its accuracy).
        """
        return self._count(tol.atol, tol.rtol)[0]

    def n_mismatch_bounds(self, tol: Tolerance) -> tuple[int, int]:
        """Exact lower and upper bounds of the mismatch count at ``tol``."""
        _, lo, hi = self._count(tol.atol, tol.rtol)
        return lo, hi

    def _count(self, atol: float, rtol: float) -> tuple[int, int, int]:
        extra = self.n_nonfinite_mismatch
        a_atol, a_rtol, a_count = (float(x) for x in self.anchor)
        if atol == a_atol and rtol == a_rtol and a_count >= 0:
            n = int(a_count)
            return n, n, n
        if self._finite_passes(atol, rtol):
            return extra, extra, extra
        top_fail = int(np.count_nonzero(exceeds(self.top_d, self.top_r, atol, rtol)))
        complete = self.top_d.size >= self.n_finite
        if complete or (self.top_d.size and atol >= self.top_d[-1]):
            return top_fail + extra, top_fail + extra, top_fail + extra
        # Upper bound from the histogram: every mismatch has d > atol.
        above, in_bin, fraction = self._hist_above(atol)
        hi = above + in_bin
        lo = max(top_fail, above if rtol == 0 else 0, 1)  # it fails, so at least one
        if rtol == 0:
            estimate = above + round(in_bin * fraction)
        else:
            rest = self.n_finite - self.top_d.size
            if self.sample_d.size:
                share = float(np.mean(exceeds(self.sample_d, self.sample_r, atol, rtol)))
            else:
                share = (above + in_bin * fraction) / max(self.n_finite, 1)
            estimate = top_fail + round(rest * share)
        estimate = min(max(estimate, lo), hi)
        return estimate + extra, lo + extra, hi + extra

    def _hist_above(self, atol: float) -> tuple[int, int, float]:
        """(count in bins wholly above atol, count in atol's bin, interpolated share of it)."""
        j = hist_bin(atol)
        bins, counts = self.hist_bins, self.hist_counts
        above = int(counts[bins > j].sum())
        in_bin = int(counts[bins == j].sum())
        if in_bin == 0 or j == 0:
            return above, in_bin if j else 0, 0.0
        lo, hi = float(hist_edge(j - 1)), float(hist_edge(j))
        if atol >= hi:  # atol is the bin's upper edge: nothing in it exceeds atol
            return above, 0, 0.0
        if lo <= 0.0:
            return above, in_bin, 1.0 - atol / hi
        fraction = (math.log(hi) - math.log(atol)) / (math.log(hi) - math.log(lo))
        return above, in_bin, min(max(fraction, 0.0), 1.0)

    def mismatch_curve(self, atols: np.ndarray, rtol: float) -> np.ndarray:
        """Fraction of mismatching elements at each atol (same rtol): for a chart."""
        atols = np.asarray(atols, dtype=np.float64)
        if self.n_elements == 0:
            return np.zeros(atols.shape)
        counts = [self._count(float(a), float(rtol))[0] for a in atols.ravel()]
        return np.asarray(counts, dtype=np.float64).reshape(atols.shape) / self.n_elements

    # -- histogram ------------------------------------------------------------------------

    @property
    def n_zero_error(self) -> int:
        """Finite pairs with exactly zero error (not drawable on a log axis)."""
        return int(self.hist_counts[self.hist_bins == 0].sum())

    def abs_error_histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """(edges, counts) of non-zero |error| over finite pairs, 8 bins per octave.

        ``counts[i]`` holds errors in ``(edges[i], edges[i+1]]``; exact zeros are left out
        (see :attr:`n_zero_error`). Empty arrays when every error is zero.
        """
        keep = self.hist_bins > 0
        bins, counts = self.hist_bins[keep], self.hist_counts[keep]
        if bins.size == 0:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        first, last = int(bins.min()), int(bins.max())
        dense = np.zeros(last - first + 1, dtype=np.int64)
        dense[bins - first] = counts
        return hist_edge(np.arange(first - 1, last + 1)), dense

    # -- storage --------------------------------------------------------------------------

    def to_arrays(self) -> dict[str, np.ndarray]:
        scalars = np.array(
            [self.n_elements, self.n_finite, self.n_nonfinite_mismatch], dtype=np.int64
        )
        return {
            "counts": scalars,
            "hull_r": self.hull_r,
            "hull_d": self.hull_d,
            "zero_ref_max": np.array(self.zero_ref_max, dtype=np.float64),
            "hull_slack": np.array(self.hull_slack, dtype=np.float64),
            "hist_bins": self.hist_bins,
            "hist_counts": self.hist_counts,
            "top_d": self.top_d,
            "top_r": self.top_r,
            "sample_d": self.sample_d,
            "sample_r": self.sample_r,
            "anchor": self.anchor,
        }

    @classmethod
    def from_arrays(cls, d: dict[str, Any]) -> ErrorProfile:
        counts = np.asarray(d["counts"], dtype=np.int64)

        def f64(key: str) -> np.ndarray:
            return np.asarray(d[key], dtype=np.float64)

        return cls(
            n_elements=int(counts[0]),
            n_finite=int(counts[1]),
            n_nonfinite_mismatch=int(counts[2]),
            hull_r=f64("hull_r"),
            hull_d=f64("hull_d"),
            zero_ref_max=float(f64("zero_ref_max")),
            hull_slack=float(f64("hull_slack")) if "hull_slack" in d else 0.0,
            hist_bins=np.asarray(d["hist_bins"], dtype=np.int64),
            hist_counts=np.asarray(d["hist_counts"], dtype=np.int64),
            top_d=f64("top_d"),
            top_r=f64("top_r"),
            sample_d=f64("sample_d"),
            sample_r=f64("sample_r"),
            anchor=f64("anchor"),
        )

    @classmethod
    def empty(cls, n_elements: int = 0, tolerance: Tolerance | None = None) -> ErrorProfile:
        tol = tolerance or Tolerance()
        z = np.zeros(0)
        return cls(
            n_elements=n_elements,
            n_finite=0,
            n_nonfinite_mismatch=0,
            hull_r=z,
            hull_d=z,
            zero_ref_max=0.0,
            hull_slack=0.0,
            hist_bins=np.zeros(0, dtype=np.int64),
            hist_counts=np.zeros(0, dtype=np.int64),
            top_d=z,
            top_r=z,
            sample_d=z,
            sample_r=z,
            anchor=np.array([tol.atol, tol.rtol, 0.0]),
        )
