"""Element-wise comparison of one output: statuses, statistics, and the re-judge profile.

``compare_outputs(ref, onnx, *, name, input_set, tolerance)`` judges one (input set, output)
by the pass rule ``|onnx - ref| <= atol + rtol * |ref|`` (ref = torch) and returns an
:class:`~core.results.OutputComparison`. It walks both tensors in flat chunks through a few
preallocated float64 buffers, so the extra memory does not grow with the output (inputs may
be ``np.memmap``); every statistic is exact (p99 included) and computed in float64.

Each comparison also carries an :class:`ErrorProfile`: a few KB that re-judge the output at
any (atol, rtol) without the tensors -- what the dashboard's sliders and saved runs use.

How the profile stays exact and small:

* ``min_atol(rtol) = max(|d| - rtol * |ref|)`` is a maximum of linear functions of the
  points ``(|ref|, |d|)``, so only the vertices of their upper-left convex hull matter
  (tens of points). Each chunk finds the few points above the current hull: a cheap
  test against an inner polygon of the hull (three vertices) for every element, then the hull
  itself (np.interp) for the few survivors, then a merge. Points within
  ``hull_slack`` above the hull are not merged (this keeps data lying exactly on a line,
  e.g. an all-zero ONNX output, fast), so ``min_atol`` may fall short of the exact value by
  at most ``hull_slack`` and ``passes`` can only be wrong within that band above the flip
  point. ``hull_slack`` is ``2**-44 * max_abs`` unless the hull grew past 2048 vertices
  (errors lying on a concave curve, e.g. proportional to sqrt|ref|): then it is simplified
  (Douglas-Peucker) to at most 1024 vertices, the slack widening in 4x steps until it fits.
* The 512 largest errors are kept with their ``|ref|``: any tolerance with atol at or above
  the 512th largest error is counted exactly from them, for every rtol.
* A histogram of ``|d|`` with 8 bins per octave (float64 exponent + 3 mantissa bits;
  bin j > 0 holds ``(edge(j-1), edge(j)]``) gives exact counts at rtol = 0 when atol is a
  bin edge, and log-interpolated counts between edges (always within the bin's exact bounds).
* For rtol > 0 below that range, the count is estimated from a uniform random sample of
  2048 element pairs outside the top 512 (stratified estimate; standard error at most
  about 1.1 % of the element count) and clamped to exact lower/upper bounds.
* The count at the run's own tolerance is exact (counted during the pass).

p99 is exact in one pass: errors above a threshold are kept; the threshold is a histogram
edge proven to lie below the k-th largest error (k = what np.percentile's linear method
reads, about 1 % of the elements), or, when errors pile up in a few bins, the k-th largest
kept value with its ties counted. Extra memory: seven chunk buffers (~3 MB at the default
chunk) plus those kept errors (~1-2 % of the elements, 8 bytes each; 58 MiB at 100M).

Cost: about two dozen vectorised float64 passes per chunk (casts, difference, three
einsum sums, abs, argmax, histogram, candidate tests), each over an L2-sized chunk. See
bench/README.md for measurements against numpy, Polygraphy and torch.testing, and for why a
fused numba kernel was measured and not kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.results import ErrorStats, OutputComparison, Status, _mismatch_message
from core.tolerances import Tolerance

__all__ = [
    "DEFAULT_CHUNK_ELEMENTS",
    "ErrorProfile",
    "compare_outputs",
    "failure_message",
]

DEFAULT_CHUNK_ELEMENTS = 65536  # 512 KB per float64 buffer: L2-sized (measured, bench/)

_SHIFT = 49  # float64 bits >> 49 keeps exponent + 3 mantissa bits: 8 bins per octave
_ROUND_UP = (1 << _SHIFT) - 1
_NBINS = 16385  # bin 0: exact zeros; bins 1..16384: (edge(j-1), edge(j)]
_TOP = 512  # largest errors kept with their |ref| in the profile
_SAMPLE = 2048  # random pairs kept for the rtol > 0 count estimate
_HULL_SLACK = 2.0**-44  # relative slack below which points near the hull are not merged
_HULL_MAX = 2048  # more vertices than this: simplify the hull (and widen the slack)
_HULL_KEEP = 1024  # ... down to at most this many
_SEED = 20250101  # fixed: the same tensors always give the same profile


def _edge(k: np.ndarray | int) -> np.ndarray:
    """Bin edges: the float64 whose bits are ``k << 49``."""
    return (np.asarray(k, dtype=np.int64) << _SHIFT).view(np.float64)


def _bin_of(x: float) -> int:
    """Histogram bin of a non-negative value: 0 for 0, else j with edge(j-1) < x <= edge(j)."""
    bits = int(np.float64(x).view(np.int64))
    return (bits + _ROUND_UP) >> _SHIFT


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

    def passes(self, tol: Tolerance) -> bool:
        """Whether every element passes at ``tol``."""
        return self.n_nonfinite_mismatch == 0 and self._finite_passes(tol.atol, tol.rtol)

    def _finite_passes(self, atol: float, rtol: float) -> bool:
        if self.zero_ref_max > atol:
            return False
        if self.hull_d.size and bool(np.any(self.hull_d > atol + rtol * self.hull_r)):
            return False
        return not (self.top_d.size and bool(np.any(self.top_d > atol + rtol * self.top_r)))

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
        top_fail = int(np.count_nonzero(self.top_d > atol + rtol * self.top_r))
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
                share = float(np.mean(self.sample_d > atol + rtol * self.sample_r))
            else:
                share = (above + in_bin * fraction) / max(self.n_finite, 1)
            estimate = top_fail + round(rest * share)
        estimate = min(max(estimate, lo), hi)
        return estimate + extra, lo + extra, hi + extra

    def _hist_above(self, atol: float) -> tuple[int, int, float]:
        """(count in bins wholly above atol, count in atol's bin, interpolated share of it)."""
        j = _bin_of(atol)
        bins, counts = self.hist_bins, self.hist_counts
        above = int(counts[bins > j].sum())
        in_bin = int(counts[bins == j].sum())
        if in_bin == 0 or j == 0:
            return above, in_bin if j else 0, 0.0
        lo, hi = float(_edge(j - 1)), float(_edge(j))
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
        return _edge(np.arange(first - 1, last + 1)), dense

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


# --------------------------------------------------------------------------------------------
# Hull
# --------------------------------------------------------------------------------------------


def _upper_left_hull(r: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the hull part that maximises ``d - k*r`` for some k >= 0 (r ascending).

    Vectorised: keep the staircase (d strictly rising with r), then repeatedly drop every
    point not strictly above the chord of its neighbours. A dropped point is a convex
    combination of kept ones, so no maximum of a linear function changes.
    """
    order = np.lexsort((-d, r))
    r, d = r[order], d[order]
    if r.size > 1:
        running = np.maximum.accumulate(d)
        keep = np.empty(r.size, dtype=bool)
        keep[0] = True
        np.greater(d[1:], running[:-1], out=keep[1:])
        r, d = r[keep], d[keep]
    while r.size > 2:
        left = (d[1:-1] - d[:-2]) * (r[2:] - r[:-2])
        right = (d[2:] - d[:-2]) * (r[1:-1] - r[:-2])
        drop = left <= right
        if not drop.any():
            break
        keep = np.ones(r.size, dtype=bool)
        keep[1:-1] = ~drop
        r, d = r[keep], d[keep]
    return r, d


def _simplify_hull(r: np.ndarray, d: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Douglas-Peucker on the hull chain, all segments of a level at once.

    Drops vertices within ``tau`` (vertically) of the polyline through the kept ones. The
    kept vertices are real points, so the polyline stays below the true envelope, and at
    most ``tau`` below it.
    """
    m = r.size
    keep = np.zeros(m, dtype=bool)
    keep[0] = keep[-1] = True
    every = np.arange(m)
    while True:
        ki = np.flatnonzero(keep)
        seg = np.minimum(np.searchsorted(ki, every, side="right") - 1, ki.size - 2)
        lo, hi = ki[seg], ki[seg + 1]
        gap = d - (d[lo] + (d[hi] - d[lo]) * ((r - r[lo]) / (r[hi] - r[lo])))
        gap[keep] = -math.inf
        worst = np.maximum.reduceat(gap, ki[:-1])  # segment j: [ki[j], ki[j+1])
        split = worst > tau
        if not split.any():
            return r[keep], d[keep]
        at = np.flatnonzero((gap == worst[seg]) & split[seg])
        keep[at[np.diff(seg[at], prepend=-1) != 0]] = True  # the first maximum per segment


# --------------------------------------------------------------------------------------------
# The pass over the data
# --------------------------------------------------------------------------------------------


class _Pass:
    """Running state of one comparison; fed chunk by chunk, then finalised."""

    def __init__(self, n: int, chunk: int, tol: Tolerance) -> None:
        self.n = n
        self.atol, self.rtol = float(tol.atol), float(tol.rtol)
        self.R = np.empty(chunk)
        self.Ob = np.empty(chunk)
        self.D = np.empty(chunk)
        self.T = np.empty(chunk)
        self.Ix = np.empty(chunk, dtype=np.int64)
        self.M = np.empty(chunk, dtype=bool)
        self.M2 = np.empty(chunk, dtype=bool)
        # sums and extremes over finite pairs
        self.n_finite = 0
        self.sum_abs = 0.0
        self.rr = self.rd = self.dd = 0.0
        self.max_abs = -1.0
        self.worst = -1
        self.n_mismatch = 0
        self.n_nan = 0
        self.n_inf = 0
        self.hist = np.zeros(_NBINS, dtype=np.int64)
        # p99 (exact): keep every error above a threshold that is a proven lower bound of the
        # final k-th largest error (a histogram edge below the k-th largest seen so far).
        self.k_keep = max(n - math.floor(0.99 * (n - 1)) + 2, _TOP) if n else _TOP
        self.tp = -math.inf
        self.top_d: list[np.ndarray] = []
        # the _TOP largest errors with their |ref| (for the profile); t_pairs: their cutoff
        self.pair_d: list[np.ndarray] = []
        self.pair_r: list[np.ndarray] = []
        self.pair_size = 0
        self.t_pairs = -math.inf
        self.top_size = 0
        self.top_cap = max(2 * self.k_keep, 1 << 16)
        self.tp_ties = -1  # >= 0 once tp is a data value: elements equal to tp, counted
        # hull of (r, d) for r > 0, its lookup tables, and the max d where r == 0
        self.hull_r = np.zeros(0)
        self.hull_d = np.zeros(0)
        self.zero_max = -math.inf
        self.lines: list[tuple[float, float]] = []
        self.slack_rel = _HULL_SLACK

    # -- one chunk ---------------------------------------------------------------------

    def feed(self, ref_chunk: np.ndarray, onnx_chunk: np.ndarray, start: int) -> None:
        k = ref_chunk.size
        R, Ob, D = self.R[:k], self.Ob[:k], self.D[:k]
        np.copyto(R, ref_chunk, casting="unsafe")
        np.copyto(Ob, onnx_chunk, casting="unsafe")
        np.subtract(Ob, R, out=D)
        dd = float(np.einsum("i,i->", D, D))
        if math.isfinite(dd):  # every pair finite (a NaN/Inf anywhere makes the sum non-finite)
            self._finite(R, D, dd, start, None)
        else:
            self._nonfinite(R, Ob, start)

    def _nonfinite(self, R: np.ndarray, Ob: np.ndarray, start: int) -> None:
        rn, on, ri, oi = np.isnan(R), np.isnan(Ob), np.isinf(R), np.isinf(Ob)
        nan_mm = rn != on
        inf_mm = (ri & ~oi & ~on) | (oi & ~ri & ~rn) | (ri & oi & (R != Ob))
        self.n_nan += int(np.count_nonzero(nan_mm))
        self.n_inf += int(np.count_nonzero(inf_mm))
        pos = np.flatnonzero(~(rn | on | ri | oi))
        m = pos.size
        if m == 0:
            return
        Rf = R[pos]
        D = self.D[:m]
        np.subtract(Ob[pos], Rf, out=D)
        dd = float(np.einsum("i,i->", D, D))
        self._finite(Rf, D, dd, start, pos)

    def _finite(
        self,
        R: np.ndarray,
        D: np.ndarray,
        dd: float,
        start: int,
        pos: np.ndarray | None,
    ) -> None:
        k = R.size
        T, Ix, M = self.T[:k], self.Ix[:k], self.M[:k]
        self.n_finite += k
        self.dd += dd
        self.rd += float(np.einsum("i,i->", R, D))
        self.rr += float(np.einsum("i,i->", R, R))
        np.abs(D, out=D)
        np.abs(R, out=R)
        self.sum_abs += float(D.sum())
        i = int(D.argmax())
        m = float(D[i])
        if m > self.max_abs:
            self.max_abs = m
            self.worst = start + (int(pos[i]) if pos is not None else i)
        # the run's own tolerance, exactly
        if m > self.atol:
            if self.rtol == 0.0:
                np.greater(D, self.atol, out=M)
            else:
                np.multiply(R, self.rtol, out=T)
                np.add(T, self.atol, out=T)
                np.greater(D, T, out=M)
            self.n_mismatch += int(np.count_nonzero(M))
        # histogram of d: bin = ceil(bits / 2**49)
        np.add(D.view(np.int64), _ROUND_UP, out=Ix)
        np.right_shift(Ix, _SHIFT, out=Ix)
        self.hist += np.bincount(Ix, minlength=_NBINS)
        # candidates for the exact p99 and the top errors
        self._raise_tp()
        if self.tp_ties >= 0 and m >= self.tp:
            self.tp_ties += int(np.count_nonzero(np.equal(D, self.tp, out=M)))
        if m > self.tp:
            idx = np.flatnonzero(np.greater(D, self.tp, out=M))
            cand = D[idx]
            self.top_d.append(cand)
            self.top_size += idx.size
            if m > self.t_pairs:  # the profile's largest errors come from these candidates
                big = cand > self.t_pairs
                self.pair_d.append(cand[big])
                self.pair_r.append(R[idx[big]])
                self.pair_size += int(np.count_nonzero(big))
                if self.pair_size > 8 * _TOP:
                    self._compact_pairs()
            if self.top_size > self.top_cap:
                self._compact_top()
        # candidates for the hull (points that could raise min_atol at some rtol)
        self._hull_candidates(R, D, m, T, M)

    # -- p99 / top errors ----------------------------------------------------------------

    def _raise_tp(self) -> None:
        """Raise tp to a histogram edge below the k-th largest error seen so far.

        Everything the final top k can hold is above it, and an error equal to the edge
        is below at least k others, so nothing equal to tp needs keeping.
        """
        j0 = _bin_of(self.tp) if self.tp > 0 else 0  # tp only rises: look above it
        from_top = np.cumsum(self.hist[j0:][::-1])
        reach = int(np.searchsorted(from_top, self.k_keep))
        if reach >= from_top.size:  # fewer than k_keep errors above tp so far
            return
        j = _NBINS - 1 - reach
        edge = float(_edge(j - 1)) if j >= 1 else -math.inf
        if edge > self.tp:
            self.tp, self.tp_ties = edge, -1

    def _compact_top(self) -> None:
        """Drop kept errors at or below tp; if still too many, tp = k-th largest kept value.

        The second case is for errors piled into few histogram bins (many ties): elements
        equal to such a tp are counted, not kept (their |ref| is not needed: they are never
        among the profile's top pairs, whose cutoff is then above tp).
        """
        self._raise_tp()
        d = np.concatenate(self.top_d)
        d = d[d > self.tp]
        if d.size > 2 * self.k_keep:
            v = float(np.partition(d, d.size - self.k_keep)[d.size - self.k_keep])
            ties = int(np.count_nonzero(d == v))
            self.tp_ties = (max(self.tp_ties, 0) if v == self.tp else 0) + ties
            self.tp = v
            d = d[d > v]
        self.top_d, self.top_size = [d], d.size
        self.top_cap = max(2 * d.size, 2 * self.k_keep, 1 << 16)

    def _compact_pairs(self) -> None:
        """Keep the _TOP largest errors (ties at the cutoff: any of them; the rest are <= it)."""
        d, r = self.top_pairs()
        self.pair_d, self.pair_r, self.pair_size = [d], [r], d.size
        if d.size == _TOP:
            self.t_pairs = float(d[-1])

    # -- hull ----------------------------------------------------------------------------

    def _hull_candidates(
        self, R: np.ndarray, D: np.ndarray, m: float, T: np.ndarray, M: np.ndarray
    ) -> None:
        """Find the chunk's points above the hull envelope E (see _rebuild_tables).

        Stage 1 (every element, a few cheap passes): d above the inner polygon of E through
        its leftmost vertex, its knee and its highest vertex. What that polygon does not cover
        -- a new largest error, |ref| left of the leftmost vertex, ref == 0 -- is picked up
        apart, only in chunks that have it. Stage 2 checks the few survivors against E itself;
        the rest are merged into the hull.
        """
        rmin = float(R.min())
        rmin_is_zero = rmin == 0.0
        if rmin_is_zero:  # some ref == 0: their max d, and the smallest positive |ref|
            np.equal(R, 0.0, out=M)
            np.multiply(D, M, out=T)  # d where ref == 0, else 0 (d >= 0; masked max is slow)
            zmax = float(T.max())
            if zmax > self.zero_max:
                self.zero_max = zmax
            U = T.view(np.uint64)
            np.subtract(R.view(np.uint64), 1, out=U)  # ref == 0 wraps to the top
            umin = int(U.min())
            rmin = math.inf if umin == 2**64 - 1 else float(np.uint64(umin + 1).view(np.float64))
        if self.hull_r.size == 0:
            # Start from the hull of every 61st element: its envelope lies below the full
            # one, so it is a valid filter, and the first merge stays small.
            rs, ds = R[::61], D[::61]
            keep = rs > 0.0
            if keep.any():
                self._merge_hull(rs[keep], ds[keep])
            if self.hull_r.size == 0:
                if rmin == math.inf:
                    return  # every ref is zero: nothing for the hull
                self._merge_hull(R[R > 0.0], D[R > 0.0])
                return
        r_left, d_top = float(self.hull_r[0]), float(self.hull_d[-1])
        M2 = self.M2[: R.size]
        # above the inner polygon = above at least one of its chords' lines
        for n_line, (s, a) in enumerate(self.lines):
            np.multiply(R, s, out=T)
            np.add(T, a, out=T)
            np.greater(D, T, out=M2 if n_line else M)
            if n_line:
                np.logical_or(M, M2, out=M)
        if m > d_top:  # a new largest error: the polygon's flat part is not covered above
            np.greater(D, d_top, out=M2)
            np.logical_or(M, M2, out=M)
        if rmin < r_left:  # left of the leftmost vertex every point is a candidate
            np.less(R, r_left, out=M2)
            np.logical_or(M, M2, out=M)
        if rmin_is_zero:  # ref == 0 is handled above, not by the hull
            np.greater(R, 0.0, out=M2)
            np.logical_and(M, M2, out=M)
        if not M.any():
            return
        idx = np.flatnonzero(M)
        r, d = R[idx], D[idx]
        pos = r > 0.0
        r, d = r[pos], d[pos]
        if r.size and self.hull_r.size:
            above = d > self._envelope(r)
            r, d = r[above], d[above]
        if r.size:
            self._merge_hull(r, d)

    def _envelope(self, r: np.ndarray) -> np.ndarray:
        """The hull envelope E at each r > 0, plus the slack (stage 2, on few points)."""
        hr, hd = self.hull_r, self.hull_d
        slack = self.slack_rel * float(hd[-1])
        return np.interp(r, hr, hd, left=-math.inf, right=float(hd[-1])) + slack

    def _merge_hull(self, r: np.ndarray, d: np.ndarray) -> None:
        hr, hd = _upper_left_hull(
            np.concatenate((self.hull_r, r)), np.concatenate((self.hull_d, d))
        )
        if hr.size > _HULL_MAX:  # errors on a concave curve: keep the profile small
            # Simplify to a quarter of the filter's slack, so the next points on the same
            # curve fall within the slack instead of growing the hull again.
            hr, hd = _simplify_hull(hr, hd, self.slack_rel * float(hd[-1]) / 4)
            while hr.size > _HULL_KEEP:  # widen the slack only when the current one is not enough
                self.slack_rel *= 4.0
                hr, hd = _simplify_hull(hr, hd, self.slack_rel * float(hd[-1]) / 4)
        if hr.size != self.hull_r.size or not (
            np.array_equal(hr, self.hull_r) and np.array_equal(hd, self.hull_d)
        ):
            self.hull_r, self.hull_d = hr, hd
            self._rebuild_tables()

    def _rebuild_tables(self) -> None:
        """The stage-1 lines: an inner polygon of the hull envelope E, plus the slack.

        E(r) (the smallest d with which a new point r > 0 would join the hull) is concave and
        rising: -inf left of the leftmost vertex, the hull's polyline in between, flat at the
        largest d to the right. Chords of a concave function lie below it, so the polygon
        never hides a new vertex (beyond the slack, which also absorbs rounding).
        """
        hr, hd = self.hull_r, self.hull_d
        if hr.size == 0:
            return
        r_top, d_top = float(hr[-1]), float(hd[-1])
        slack = self.slack_rel * d_top
        # Stage-1 polygon: leftmost vertex, the knee (farthest above their chord), top vertex.
        # More corners cost a pass each and barely help: points that lie on a curved hull
        # are above every inner polygon, and stage 2 sorts them out.
        corners = [0, hr.size - 1]
        if hr.size > 2:
            gap = hd - np.interp(hr, hr[corners], hd[corners])
            corners.insert(1, int(np.argmax(gap)))
        eps8 = 8 * np.finfo(np.float64).eps
        self.lines = []
        for i, j in zip(corners[:-1], corners[1:], strict=False):
            ri, di, rj, dj = float(hr[i]), float(hd[i]), float(hr[j]), float(hd[j])
            s = (dj - di) / (rj - ri) if rj > ri else 0.0
            a = di - s * ri
            self.lines.append((s, a + slack - eps8 * (abs(a) + s * r_top)))
        if len(self.lines) == 0:  # a single vertex: the envelope is flat at d_top
            self.lines.append((0.0, d_top + slack))

    # -- results -------------------------------------------------------------------------

    def p99(self) -> float | None:
        m = self.n_finite
        if m == 0:
            return None
        values = np.concatenate(self.top_d) if self.top_d else np.zeros(0)
        values = values[values > self.tp]  # exactly the errors above tp ...
        ties = max(self.tp_ties, 0)  # ... and how many equal it: a top-k multiset
        # numpy's default (linear) method, step for step, on the order statistics we kept
        virtual = (m - 1) * np.true_divide(99.0, 100)
        previous = math.floor(virtual)
        if virtual >= m - 1:
            previous = nxt = m - 1
        else:
            nxt = previous + 1
        total = values.size + ties
        if total < m - previous:  # cannot happen: tp is a proven lower bound
            raise AssertionError("p99 candidates lost")
        # ascending rank i among all m errors is rank i - (m - total) in the kept multiset,
        # whose lowest `ties` entries equal tp
        ranks = [previous - (m - total), nxt - (m - total)]
        above = [q - ties for q in ranks if q >= ties]
        part = np.partition(values, above) if above else values
        a, b = (self.tp if q < ties else part[q - ties] for q in ranks)
        gamma = np.float64(virtual - previous)
        diff = b - a
        if gamma >= 0.5:
            return float(b - diff * (1 - gamma))
        return float(a + diff * gamma)

    def top_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The _TOP largest errors, descending, with their |ref|."""
        if not self.pair_d:
            return np.zeros(0), np.zeros(0)
        d = np.concatenate(self.pair_d)
        r = np.concatenate(self.pair_r)
        if d.size > _TOP:
            keep = np.argpartition(-d, _TOP - 1)[:_TOP]
            d, r = d[keep], r[keep]
        order = np.argsort(-d, kind="stable")
        return d[order], r[order]


# --------------------------------------------------------------------------------------------
# Public entry
# --------------------------------------------------------------------------------------------


def _flat(a: np.ndarray) -> np.ndarray:
    """A flat view when the memory allows one (memmaps stay memmaps); else a flat iterator."""
    if a.flags.c_contiguous:
        return a.reshape(-1)
    return a.flat  # type: ignore[return-value]  # slicing a flatiter copies only that slice


def _chunks(ref: np.ndarray, onnx: np.ndarray, n: int, chunk: int):
    fr, fo = _flat(ref), _flat(onnx)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        yield start, np.asarray(fr[start:stop]), np.asarray(fo[start:stop])


def _sample(
    fr: Any, fo: Any, n: int, cutoff: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    idx = np.sort(rng.integers(0, n, size=min(n, 2 * _SAMPLE)))
    idx = idx[np.diff(idx, prepend=-1) != 0]  # distinct positions (np.unique imports lazily)
    rng.shuffle(idx)
    idx = np.sort(idx[:_SAMPLE])
    r = np.asarray(fr[idx], dtype=np.float64)
    o = np.asarray(fo[idx], dtype=np.float64)
    ok = np.isfinite(r) & np.isfinite(o)
    d = np.abs(o[ok] - r[ok])
    r = np.abs(r[ok])
    below = d <= cutoff
    return d[below], r[below]


def failure_message(n_mismatch: int, n_elements: int, stats: ErrorStats | None) -> str:
    """numpy.testing's wording, plus the non-finite counts when there are any."""
    lines = [_mismatch_message(n_mismatch, n_elements)]
    if stats is not None:
        if stats.max_abs is not None:
            lines.append(f"Max absolute difference: {stats.max_abs:.6g}")
        if stats.max_rel is not None:
            lines.append(f"Max relative difference: {stats.max_rel:.6g}")
        if stats.n_nan_mismatch or stats.n_inf_mismatch:
            lines.append(
                f"Non-finite mismatches: {stats.n_nan_mismatch} NaN, {stats.n_inf_mismatch} Inf"
            )
    return "\n".join(lines)


def _numeric(a: np.ndarray) -> bool:
    return a.dtype.kind in "biuf"


def _empty_stats() -> ErrorStats:
    return ErrorStats(
        max_abs=None,
        worst_index=None,
        ref_at_worst=None,
        onnx_at_worst=None,
        max_rel=None,
        mean_abs=None,
        rms=None,
        p99_abs=None,
        n_nan_mismatch=0,
        n_inf_mismatch=0,
        cosine=None,
        snr_db=None,
    )


def compare_outputs(
    ref: np.ndarray | None,
    onnx: np.ndarray | None,
    *,
    name: str,
    input_set: int,
    tolerance: Tolerance,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> OutputComparison:
    """Compare one output of one input set (ref = torch) and judge it at ``tolerance``.

    Bool and integer outputs compare as numbers (float64). Other dtypes (strings, complex)
    are compared for equality only, without statistics or profile.
    """

    def result(status: Status, **kw: Any) -> OutputComparison:
        return OutputComparison(
            input_set=input_set,
            name=name,
            status=status,
            tolerance=tolerance,
            ref_shape=None if ref is None else tuple(int(s) for s in ref.shape),
            onnx_shape=None if onnx is None else tuple(int(s) for s in onnx.shape),
            ref_dtype=None if ref is None else str(ref.dtype),
            onnx_dtype=None if onnx is None else str(onnx.dtype),
            **kw,
        )

    if ref is None or onnx is None:
        side = (
            "both sides"
            if ref is None and onnx is None
            else ("the torch side" if ref is None else "the ONNX side")
        )
        present = onnx if ref is None else ref
        n = 0 if present is None else int(present.size)
        return result(Status.MISSING, n_elements=n, message=f"output {name!r} missing on {side}")
    if ref.shape != onnx.shape:
        return result(
            Status.SHAPE_MISMATCH,
            n_elements=int(ref.size),
            message=f"shape {tuple(ref.shape)} vs ONNX {tuple(onnx.shape)}",
        )
    n = int(ref.size)
    dtype_ok = ref.dtype == onnx.dtype
    if not (_numeric(ref) and _numeric(onnx)):  # e.g. string outputs: equal or not
        n_mismatch = int(np.count_nonzero(np.asarray(ref != onnx))) if dtype_ok else n
        status = Status.PASS if n_mismatch == 0 else Status.FAIL
        if not dtype_ok:
            status = Status.DTYPE_MISMATCH
        message = "" if n_mismatch == 0 else _mismatch_message(n_mismatch, n)
        if not dtype_ok:
            message = f"dtype {ref.dtype} vs ONNX {onnx.dtype}"
        return result(status, n_elements=n, n_mismatch=n_mismatch, message=message)
    if n == 0:
        return result(
            Status.PASS if dtype_ok else Status.DTYPE_MISMATCH,
            n_elements=0,
            stats=_empty_stats(),
            profile=ErrorProfile.empty(0, tolerance),
            n_mismatch=0,
            message="" if dtype_ok else f"dtype {ref.dtype} vs ONNX {onnx.dtype}",
        )

    chunk = max(1, min(int(chunk_elements), n))
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf are handled, not warned
        acc = _Pass(n, chunk, tolerance)
        for start, rc, oc in _chunks(ref, onnx, n, chunk):
            acc.feed(rc, oc, start)
        stats, profile, n_mismatch = _finish(acc, ref, onnx, tolerance)
    passed = n_mismatch == 0
    if not dtype_ok:
        status = Status.DTYPE_MISMATCH
        message = f"dtype {ref.dtype} vs ONNX {onnx.dtype}"
        if not passed:
            message += "\n" + failure_message(n_mismatch, n, stats)
    else:
        status = Status.PASS if passed else Status.FAIL
        message = "" if passed else failure_message(n_mismatch, n, stats)
    return result(
        status,
        n_elements=n,
        stats=stats,
        profile=profile,
        n_mismatch=n_mismatch,
        message=message,
    )


def _finish(
    acc: _Pass, ref: np.ndarray, onnx: np.ndarray, tol: Tolerance
) -> tuple[ErrorStats, ErrorProfile, int]:
    n, m = acc.n, acc.n_finite
    fr, fo = _flat(ref), _flat(onnx)
    nonfinite = acc.n_nan + acc.n_inf
    n_mismatch = acc.n_mismatch + nonfinite
    top_d, top_r = acc.top_pairs()
    hull_r, hull_d = acc.hull_r, acc.hull_d
    zero_max = max(acc.zero_max, 0.0)

    if m:
        w = acc.worst
        worst_index = tuple(int(i) for i in np.unravel_index(w, ref.shape))
        ref_w, onnx_w = float(fr[w]), float(fo[w])
        max_rel = float(np.max(hull_d / hull_r)) if hull_r.size else None
        rr, rd, dd = acc.rr, acc.rd, acc.dd
        ro, oo = rr + rd, rr + 2.0 * rd + dd
        cosine = ro / math.sqrt(rr * oo) if rr > 0 and oo > 0 else None
        if cosine is not None:
            cosine = min(max(cosine, -1.0), 1.0)
        if dd == 0:
            snr = math.inf
        elif rr == 0:
            snr = -math.inf
        else:
            snr = 10.0 * math.log10(rr / dd)
        stats = ErrorStats(
            max_abs=acc.max_abs,
            worst_index=worst_index,
            ref_at_worst=ref_w,
            onnx_at_worst=onnx_w,
            max_rel=max_rel,
            mean_abs=acc.sum_abs / m,
            rms=math.sqrt(dd / m),
            p99_abs=acc.p99(),
            n_nan_mismatch=acc.n_nan,
            n_inf_mismatch=acc.n_inf,
            cosine=cosine,
            snr_db=snr,
        )
    else:
        stats = replace(_empty_stats(), n_nan_mismatch=acc.n_nan, n_inf_mismatch=acc.n_inf)

    if m > top_d.size:
        cutoff = float(top_d[-1]) if top_d.size else math.inf
        sample_d, sample_r = _sample(fr, fo, n, cutoff, np.random.default_rng(_SEED))
    else:
        sample_d = sample_r = np.zeros(0)
    hist_bins = np.flatnonzero(acc.hist).astype(np.int64)
    profile = ErrorProfile(
        n_elements=n,
        n_finite=m,
        n_nonfinite_mismatch=nonfinite,
        hull_r=hull_r,
        hull_d=hull_d,
        zero_ref_max=zero_max,
        hull_slack=acc.slack_rel * max(acc.max_abs, 0.0),
        hist_bins=hist_bins,
        hist_counts=acc.hist[hist_bins],
        top_d=top_d,
        top_r=top_r,
        sample_d=sample_d,
        sample_r=sample_r,
        anchor=np.array([tol.atol, tol.rtol, float(n_mismatch)]),
    )
    return stats, profile, n_mismatch
