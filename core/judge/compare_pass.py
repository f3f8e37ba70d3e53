"""The one pass over an output's data: exact statistics and the re-judge profile, chunked.

:func:`measure` walks both tensors in flat chunks through a few preallocated float64 buffers,
so the extra memory does not grow with the output (inputs may be ``np.memmap``); every
statistic is exact (p99 included) and computed in float64. It also builds the
:class:`~parity.judge.error_profile.ErrorProfile`.

How the profile's hull is kept small and fast: each chunk finds the few points above the
current hull: once there is a hull, two comparisons per element (|ref| below one vertex's r,
or d above a bound that a merged point or a new max_rel must exceed right of that r;
:meth:`_Pass._prefilter`; the second is read off the p99 pass's positions when its bound is
the higher) leave ~0.1-2 % of the elements, held and handled every few chunks; on those (on
every element of the first chunk, and of every chunk where the sample says one vertex cannot
cut: errors proportional to |ref|), a test against an inner polygon of the hull (three
vertices), then the hull itself (np.interp), then a merge. max_rel comes from the same
survivors, exactly. Points within
``hull_slack`` above the hull are not merged (this keeps data lying exactly on a line, e.g.
an all-zero ONNX output, fast). ``hull_slack`` is ``2**-44 * max_abs`` unless the hull grew
past 2048 vertices (errors lying on a concave curve, e.g. proportional to sqrt|ref|): then it
is simplified (Douglas-Peucker) to at most 1024 vertices, the slack widening in 4x steps
until it fits.

p99 is exact in one pass: errors above a threshold are kept; the threshold is a histogram
edge proven to lie below the k-th largest error (k = what np.percentile's linear method
reads, about 1 % of the elements), or, when errors pile up in a few bins, the k-th largest
kept value with its ties counted. Extra memory: six chunk buffers (~2.2 MB at the default
chunk) plus those kept errors (~1-3 % of the elements, 8 bytes each; 61 MiB at 100M).

Cost: about fifteen vectorised float64 passes per chunk (cast, difference, three dot
products, two abs, sum, max, the tolerance count, histogram key and np.bincount, the p99 and
hull comparisons), each over an L2-sized chunk; the histogram's keys are written over the
differences once nothing else reads them. What keeps it ~3.5x a bare float32 max(|a - b|)
rather than 2x is measured in docs/benchmarks.md and bench/README.md (with the comparisons
against numpy, Polygraphy and torch.testing, and why a fused numba kernel was not kept).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from parity.judge.chunks import CHUNK_ELEMENTS, flat, flat_chunks
from parity.judge.error_profile import (
    HIST_BINS,
    HIST_ROUND_UP,
    HIST_SHIFT,
    SAMPLE_PAIRS,
    TOP_PAIRS,
    ErrorProfile,
    hist_bin,
    hist_edge,
)
from parity.judge.exact_ints import exact_diff, is_integer_pair
from parity.judge.hull import simplify_hull, upper_left_hull
from parity.judge.pass_rule import exact_int_mismatch, exceeds, exceeds_into, one_sided
from parity.results import ErrorStats
from parity.tolerances import Tolerance

__all__ = ["DEFAULT_CHUNK_ELEMENTS", "empty_stats", "measure"]

DEFAULT_CHUNK_ELEMENTS = CHUNK_ELEMENTS

_HULL_SLACK = 2.0**-44  # relative slack below which points near the hull are not merged
_HULL_MAX = 2048  # more vertices than this: simplify the hull (and widen the slack)
_HULL_KEEP = 1024  # ... down to at most this many
_SEED = 20250101  # fixed: the same tensors always give the same profile
_VECDOT = getattr(np, "vecdot", None)  # numpy >= 2.0
_DOT_BLOCK = 8192  # short enough for OpenBLAS to stay in the calling thread (bench/README.md)
_PREFILTER_SHARE = 0.02  # a fast path leaving more (in the sample) than this: the full path
_ZEROS_SHARE = 0.01  # ref == 0 in more of the sample than this: see _Pass._left_bar
_RAISE_EVERY = 4  # chunks between raises of the p99 threshold once it moves slowly
_HOLD_CHUNKS = 8  # the hull's fast-path survivors are handled every this many chunks ...
_HOLD_POINTS = 1 << 14  # ... or once this many are held
_ROUND_UP = np.uint64(HIST_ROUND_UP)
_SHIFT = np.uint64(HIST_SHIFT)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Sum of a * b (float64): BLAS dot products over blocks of _DOT_BLOCK, each too short
    for OpenBLAS to start its threads (which, on a loaded machine, wait for a free core);
    einsum (single-threaded, ~1.6x slower) on a ragged remainder."""
    k = a.size - a.size % _DOT_BLOCK
    if _VECDOT is not None:
        blocks = _VECDOT(a[:k].reshape(-1, _DOT_BLOCK), b[:k].reshape(-1, _DOT_BLOCK))
        total = float(blocks.sum())
    else:  # numpy < 2: one call per block
        total = sum(float(np.dot(a[i : i + _DOT_BLOCK], b[i : i + _DOT_BLOCK])) for i in
                    range(0, k, _DOT_BLOCK))  # fmt: skip
    if k < a.size:
        total += float(np.einsum("i,i->", a[k:], b[k:]))
    return total


def measure(
    ref: np.ndarray, onnx: np.ndarray, tolerance: Tolerance, chunk_elements: int
) -> tuple[ErrorStats, ErrorProfile, int]:
    """Statistics, profile and mismatch count at ``tolerance`` of two same-shape, non-empty
    numeric arrays."""
    n = int(ref.size)
    chunk = max(1, min(int(chunk_elements), n))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # handled, not warned
        acc = _Pass(n, chunk, tolerance, integers=is_integer_pair(ref, onnx))
        for start, rc, oc in flat_chunks(ref, onnx, chunk):
            acc.feed(rc, oc, start)
        return _finish(acc, ref, onnx, tolerance)


class _Pass:
    """Running state of one comparison; fed chunk by chunk, then finalised."""

    def __init__(self, n: int, chunk: int, tol: Tolerance, *, integers: bool = False) -> None:
        self.n = n
        self.integers = integers  # both sides integer/bool: differences and verdict exact
        self.atol, self.rtol = float(tol.atol), float(tol.rtol)
        self.R = np.empty(chunk)
        self.Ob = np.empty(chunk)
        self.D = np.empty(chunk)
        self.T = np.empty(chunk)
        self.M = np.empty(chunk, dtype=bool)
        self.M2 = np.empty(chunk, dtype=bool)
        # sums and extremes over finite pairs
        self.n_finite = 0
        self.sum_abs = 0.0
        self.rr = self.rd = self.dd = 0.0
        self.max_abs = -1.0
        self.max_rel = -1.0  # over ref != 0, element by element (exact, not off the hull)
        self.worst = -1
        self.n_mismatch = 0
        self.n_nan = 0
        self.n_inf = 0
        self.hist = np.zeros(HIST_BINS, dtype=np.int64)
        self.top_bin = -1  # the highest non-empty histogram bin
        self.tp_key, self.tp_bin = math.nan, 0  # tp_bin = hist_bin(tp) while tp_key == tp
        # p99 (exact): keep every error above a threshold that is a proven lower bound of the
        # final k-th largest error (a histogram edge below the k-th largest seen so far).
        self.k_keep = max(n - math.floor(0.99 * (n - 1)) + 2, TOP_PAIRS) if n else TOP_PAIRS
        self.tp = -math.inf
        self.top_d: list[np.ndarray] = []
        # the TOP_PAIRS largest errors with their |ref| (for the profile); t_pairs: their cutoff
        self.pair_d: list[np.ndarray] = []
        self.pair_r: list[np.ndarray] = []
        self.pair_size = 0
        self.t_pairs = -math.inf
        self.top_size = 0
        self.top_cap = max(3 * self.k_keep, 1 << 16)  # compacted past it (see _compact_top)
        self.tp_ties = -1  # >= 0 once tp is a data value: elements equal to tp, counted
        # hull of (r, d) for r > 0, its lookup tables, and the max d where r == 0
        self.hull_r = np.zeros(0)
        self.hull_d = np.zeros(0)
        self.zero_max = -math.inf
        self.lines: list[tuple[float, float]] = []
        self.slack_rel = _HULL_SLACK
        # the fast path's (rk, th) and the share of a sample it lets through, see _prefilter
        self.pre: tuple[float, float, float, bool] | None = None
        self.samp_r = self.samp_d = np.zeros(0)
        # the fast path's survivors, handled a few chunks at a time (_flush_hull)
        self.held_r: list[np.ndarray] = []
        self.held_d: list[np.ndarray] = []
        self.held_size = 0
        self.chunks = 0

    # -- one chunk ---------------------------------------------------------------------

    def feed(self, ref_chunk: np.ndarray, onnx_chunk: np.ndarray, start: int) -> None:
        k = ref_chunk.size
        R, Ob, D = self.R[:k], self.Ob[:k], self.D[:k]
        np.copyto(R, ref_chunk, casting="unsafe")
        if self.integers:  # the difference and the verdict in integers; float64 for the rest
            mag, ge, absref = exact_diff(ref_chunk, onnx_chunk)
            np.copyto(D, mag, casting="unsafe")
            np.negative(D, out=D, where=~ge)
            n_fail = int(np.count_nonzero(exact_int_mismatch(mag, absref, self.atol, self.rtol)))
            self._finite(R, D, _dot(D, D), start, None, n_fail)
            return
        np.subtract(onnx_chunk, R, out=D, casting="unsafe")  # the cast fused into the pass
        dd = _dot(D, D)
        if math.isfinite(dd):  # every pair finite (a NaN/Inf anywhere makes the sum non-finite)
            self._finite(R, D, dd, start, None)
        else:
            np.copyto(Ob, onnx_chunk, casting="unsafe")
            self._nonfinite(R, Ob, start)

    def _nonfinite(self, R: np.ndarray, Ob: np.ndarray, start: int) -> None:
        nan_mm, inf_mm = one_sided(R, Ob)
        self.n_nan += int(np.count_nonzero(nan_mm))
        self.n_inf += int(np.count_nonzero(inf_mm))
        pos = np.flatnonzero(np.isfinite(R) & np.isfinite(Ob))
        m = pos.size
        if m == 0:
            return
        Rf = R[pos]
        D = self.D[:m]
        np.subtract(Ob[pos], Rf, out=D)
        dd = _dot(D, D)
        self._finite(Rf, D, dd, start, pos)

    def _finite(
        self,
        R: np.ndarray,
        D: np.ndarray,
        dd: float,
        start: int,
        pos: np.ndarray | None,
        n_fail: int | None = None,
    ) -> None:
        k = R.size
        T, M = self.T[:k], self.M[:k]
        self.n_finite += k
        self.dd += dd
        self.rd += _dot(R, D)
        self.rr += _dot(R, R)
        np.abs(D, out=D)
        np.abs(R, out=R)
        self.sum_abs += float(D.sum())
        m = float(D.max())
        if m > self.max_abs:  # the first of the largest, like argmax; rarely needed
            i = int(D.argmax())
            self.max_abs = m
            self.worst = start + (int(pos[i]) if pos is not None else i)
        # candidates for the exact p99 and the top errors
        self.chunks += 1
        if self.chunks % _RAISE_EVERY == 0 or self.n_finite < 4 * self.k_keep:
            self._raise_tp()  # a lower tp only keeps more: raised every chunk while it moves fast
        if self.tp_ties >= 0 and m >= self.tp:
            self.tp_ties += int(np.count_nonzero(np.equal(D, self.tp, out=M)))
        tp, idx = self.tp, None
        if m > tp:
            idx = np.flatnonzero(np.greater(D, tp, out=M))
            cand = D[idx]
            self.top_d.append(cand)
            self.top_size += idx.size
            if m > self.t_pairs:  # the profile's largest errors come from these candidates
                big = cand > self.t_pairs
                self.pair_d.append(cand[big])
                self.pair_r.append(R[idx[big]])
                self.pair_size += int(np.count_nonzero(big))
                if self.pair_size > 8 * TOP_PAIRS:
                    self._compact_pairs()
            if self.top_size > self.top_cap:
                self._compact_top()
        # the run's own tolerance, exactly (nothing fails while the largest error is <= atol)
        if n_fail is not None:  # counted in the values' own type (integers)
            self.n_mismatch += n_fail
        elif m > self.atol:
            if idx is not None and self.atol >= tp:  # a failing d > atol >= tp: kept above
                fails = exceeds(D[idx], R[idx], self.atol, self.rtol)
            else:
                fails = exceeds_into(D, R, self.atol, self.rtol, scratch=T, out=M)
            self.n_mismatch += int(np.count_nonzero(fails))
        # candidates for the hull (points that could raise min_atol at some rtol)
        self._hull_candidates(R, D, m, T, M, (tp, idx))
        # histogram of d: bin = ceil(bits / 2**49), the keys written over D (its last use:
        # fewer bytes in cache)
        U = D.view(np.uint64)  # d >= 0: the bits + HIST_ROUND_UP never reach the sign bit
        np.add(U, _ROUND_UP, out=U)
        np.right_shift(U, _SHIFT, out=U)  # unsigned: faster than the int64 shift
        counts = np.bincount(U.view(np.int64))  # up to the chunk's largest bin only
        self.hist[: counts.size] += counts
        self.top_bin = max(self.top_bin, counts.size - 1)

    # -- p99 / top errors ----------------------------------------------------------------

    def _raise_tp(self) -> None:
        """Raise tp to a histogram edge below the k-th largest error seen so far.

        Everything the final top k can hold is above it, and an error equal to the edge
        is below at least k others, so nothing equal to tp needs keeping.
        """
        if self.n_finite < self.k_keep:  # fewer than k_keep errors so far
            return
        if self.tp_key != self.tp:  # tp's bin, worked out once per tp
            self.tp_key, self.tp_bin = self.tp, hist_bin(self.tp) if self.tp > 0 else 0
        j0 = self.tp_bin  # tp only rises: look above it
        top = self.top_bin  # bins above it are empty (they add nothing to the counts)
        if top < j0:
            return
        from_top = np.cumsum(self.hist[j0 : top + 1][::-1])
        reach = int(np.searchsorted(from_top, self.k_keep))
        if reach >= from_top.size:  # fewer than k_keep errors above tp so far
            return
        j = top - reach
        if j - 1 < j0:  # edge(j - 1) <= edge(j0 - 1) < tp: no higher edge
            return
        edge = float(hist_edge(j - 1))
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
        self.top_cap = max(2 * d.size, 3 * self.k_keep, 1 << 16)

    def _compact_pairs(self) -> None:
        """Keep the TOP_PAIRS largest errors (ties at the cutoff: any of them; the rest <= it)."""
        d, r = self.top_pairs()
        self.pair_d, self.pair_r, self.pair_size = [d], [r], d.size
        if d.size == TOP_PAIRS:
            self.t_pairs = float(d[-1])

    # -- hull ----------------------------------------------------------------------------

    def _hull_candidates(
        self,
        R: np.ndarray,
        D: np.ndarray,
        m: float,
        T: np.ndarray,
        M: np.ndarray,
        top: tuple[float, np.ndarray | None],
    ) -> None:
        """max_rel, the ref == 0 maximum and the hull's new points; see _prefilter for the
        fast path, taken once there is a hull and a max_rel. ``top``: the p99 pass's
        threshold and the positions above it (None: the chunk has none).

        The fast path's survivors are held and handled a few chunks at a time: a survivor
        picked against an older hull and max_rel is picked against a lower bar (both only
        grow), and a handled point that no longer adds anything is dropped by the tests.
        """
        if self.hull_r.size == 0 or self.max_rel < 0.0 or self.samp_r.size == 0:
            self._flush_hull()
            self._hull_candidates_full(R, D, m, T, M)
            return
        if self.pre is None:
            self.pre = self._prefilter()
        rk, th, share, zeros = self.pre
        if share > _PREFILTER_SHARE:  # e.g. errors proportional to |ref|: a cone of points
            self._flush_hull()  # along the hull, which one vertex cannot cut: the full path
            self._hull_candidates_full(R, D, m, T, M)
            return
        tp, above_tp = top
        M2 = self.M2[: R.size]
        np.less(R, rk, out=M2)
        if zeros and not self._left_bar(R, D, T, M, M2):  # a new smallest |ref| > 0
            self._flush_hull()
            self._hull_candidates_full(R, D, m, T, M)
            return
        if th >= tp:  # d > th only where d > tp: those are the p99 pass's positions
            left = np.flatnonzero(M2)
            if above_tp is not None and m > th:
                high = above_tp[D[above_tp] > th]
                idx = np.concatenate((high, left)) if left.size else high
            else:
                idx = left
        else:
            np.greater(D, th, out=M)
            np.logical_or(M, M2, out=M)
            idx = np.flatnonzero(M)
        if idx.size == 0:
            return
        self.held_r.append(R[idx])  # a position in both sets is one point twice: harmless
        self.held_d.append(D[idx])
        self.held_size += idx.size
        if self.held_size > _HOLD_POINTS or self.chunks % _HOLD_CHUNKS == 0:
            self._flush_hull()

    def _left_bar(
        self, R: np.ndarray, D: np.ndarray, T: np.ndarray, M: np.ndarray, M2: np.ndarray
    ) -> bool:
        """Narrow M2 (|ref| < rk) to the points there that can matter, where ref == 0 is
        common (ReLU outputs: else half the chunk would be held). False, M2 untouched, when
        the chunk has a |ref| > 0 left of the hull's leftmost vertex (always a new vertex).
        Else a point at r_left <= |ref| needs d above the leftmost vertex's d (the envelope
        rises from there) or above max_rel * r_left (a new max_rel), and a point at
        ref == 0 needs d above the ref == 0 maximum."""
        U = T.view(np.uint64)
        np.subtract(R.view(np.uint64), 1, out=U)  # ref == 0 wraps to the top
        umin = int(U.min())
        r_left = float(self.hull_r[0])
        if umin != 2**64 - 1 and float(np.uint64(umin + 1).view(np.float64)) < r_left:
            return False
        bar = min(
            float(self.hull_d[0]),
            (self.max_rel * r_left) * (1.0 - 2.0**-50),
            max(self.zero_max, 0.0),
        )
        np.greater(D, bar, out=M)
        np.logical_and(M2, M, out=M2)
        return True

    def _flush_hull(self) -> None:
        """The held survivors against the exact tests: ref == 0, max_rel, stages 2 and 1."""
        if not self.held_r:
            return
        r, d = np.concatenate(self.held_r), np.concatenate(self.held_d)
        self.held_r, self.held_d, self.held_size = [], [], 0
        zero = r == 0.0
        if zero.any():
            zmax = float(d[zero].max())
            if zmax > self.zero_max:
                self.zero_max = zmax
            r, d = r[~zero], d[~zero]
        if r.size == 0:
            return
        rel = float((d / r).max())
        if rel > self.max_rel:
            self.max_rel, self.pre = rel, None
        # the full path's stages 2 and 1 on the survivors (stage 2 first: it leaves fewer;
        # the same points pass both in either order), so the same points are merged
        above = d > self._envelope(r)
        if not above.any():
            return
        r, d = r[above], d[above]
        flag = (d > float(self.hull_d[-1])) | (r < float(self.hull_r[0]))
        for s, a in self.lines:
            flag |= d > r * s + a
        r, d = r[flag], d[flag]
        if r.size:
            self._merge_hull(r, d)

    def _prefilter(self) -> tuple[float, float, float, bool]:
        """(rk, th, share, zeros): every point the full path could use has |ref| < rk or
        d > th. share: at most the part of the sample with ref != 0 that passes (errors
        proportional to |ref| put a cone of points along the hull: no vertex cuts it well,
        and the full path's polygon is cheaper than a quarter of the elements through the
        exact tests); zeros: ref == 0 is common in the sample (see _left_bar).

        For |ref| >= rk, a point merged into the hull passes stage 1 (a line, rising since
        the hull's d rises with r, is at least its value at rk, computed with the same
        roundings; or d > d_top) and stage 2 (d > the vertex's d, below); and d / |ref| can
        exceed max_rel only when d > max_rel * rk, which th bounds from below with a margin
        for rounding. So two comparisons per element leave a few survivors for the exact
        tests. rk is the hull vertex that leaves the fewest survivors in a sample of the
        first chunk (any vertex is correct; the choice is only about speed).
        """
        hr, hd = self.hull_r, self.hull_d
        th = np.full(hr.size, float(hd[-1]))
        for s, a in self.lines:
            np.minimum(th, hr * s + a, out=th)
        # A merged point also passes stage 2: d > E(r) + slack, and np.interp's E is at
        # least hd[v] right of hr[v] (slope >= 0 times x - xp[j] >= 0, plus hd[j] >= hd[v])
        # as long as its slopes are finite (an infinite one can give -inf).
        if bool(np.isfinite(np.diff(hd) / np.diff(hr)).all()):
            np.maximum(th, hd, out=th)
        np.minimum(th, (self.max_rel * hr) * (1.0 - 2.0**-50), out=th)
        left = np.searchsorted(self.samp_r, hr)
        above = self.samp_d.size - np.searchsorted(self.samp_d, th, side="right")
        v = int(np.argmin(left + above))
        zeros = int(np.searchsorted(self.samp_r, 0.0, side="right"))  # see _left_bar
        share = float(left[v] - zeros + above[v]) / self.samp_d.size
        return float(hr[v]), float(th[v]), share, zeros > _ZEROS_SHARE * self.samp_r.size

    def _hull_candidates_full(
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
        if rmin < math.inf:  # max_rel over ref != 0 (M still marks ref == 0 when there is one)
            np.divide(D, R, out=T)
            if rmin_is_zero:
                np.copyto(T, 0.0, where=M)
            rel = float(T.max())
            if rel > self.max_rel:
                self.max_rel = rel
        if self.hull_r.size == 0:
            # Start from the hull of every 61st element: its envelope lies below the full
            # one, so it is a valid filter, and the first merge stays small.
            rs, ds = R[::61], D[::61]
            if self.samp_r.size == 0:  # the prefilter's sample (see _prefilter)
                self.samp_r, self.samp_d = np.sort(rs), np.sort(ds)
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
        hr, hd = upper_left_hull(np.concatenate((self.hull_r, r)), np.concatenate((self.hull_d, d)))
        if hr.size > _HULL_MAX:  # errors on a concave curve: keep the profile small
            # Simplify to a quarter of the filter's slack, so the next points on the same
            # curve fall within the slack instead of growing the hull again.
            hr, hd = simplify_hull(hr, hd, self.slack_rel * float(hd[-1]) / 4)
            while hr.size > _HULL_KEEP:  # widen the slack only when the current one is not enough
                self.slack_rel *= 4.0
                hr, hd = simplify_hull(hr, hd, self.slack_rel * float(hd[-1]) / 4)
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
        self.pre = None
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
        """The TOP_PAIRS largest errors, descending, with their |ref|."""
        if not self.pair_d:
            return np.zeros(0), np.zeros(0)
        d = np.concatenate(self.pair_d)
        r = np.concatenate(self.pair_r)
        if d.size > TOP_PAIRS:
            keep = np.argpartition(-d, TOP_PAIRS - 1)[:TOP_PAIRS]
            d, r = d[keep], r[keep]
        order = np.argsort(-d, kind="stable")
        return d[order], r[order]


def _sample(
    fr: Any, fo: Any, n: int, cutoff: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    idx = np.sort(rng.integers(0, n, size=min(n, 2 * SAMPLE_PAIRS)))
    idx = idx[np.diff(idx, prepend=-1) != 0]  # distinct positions (np.unique imports lazily)
    rng.shuffle(idx)
    idx = np.sort(idx[:SAMPLE_PAIRS])
    ref, onnx = np.asarray(fr[idx]), np.asarray(fo[idx])
    if is_integer_pair(ref, onnx):
        mag, _, absref = exact_diff(ref, onnx)
        d, r = mag.astype(np.float64), absref.astype(np.float64)
    else:
        r = ref.astype(np.float64)
        o = onnx.astype(np.float64)
        ok = np.isfinite(r) & np.isfinite(o)
        d = np.abs(o[ok] - r[ok])
        r = np.abs(r[ok])
    below = d <= cutoff
    return d[below], r[below]


def empty_stats() -> ErrorStats:
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


def _finish(
    acc: _Pass, ref: np.ndarray, onnx: np.ndarray, tol: Tolerance
) -> tuple[ErrorStats, ErrorProfile, int]:
    acc._flush_hull()
    n, m = acc.n, acc.n_finite
    fr, fo = flat(ref), flat(onnx)
    nonfinite = acc.n_nan + acc.n_inf
    n_mismatch = acc.n_mismatch + nonfinite
    top_d, top_r = acc.top_pairs()
    hull_r, hull_d = acc.hull_r, acc.hull_d
    zero_max = max(acc.zero_max, 0.0)

    if m:
        w = acc.worst
        worst_index = tuple(int(i) for i in np.unravel_index(w, ref.shape))
        ref_w, onnx_w = float(fr[w]), float(fo[w])
        max_rel = acc.max_rel if acc.max_rel >= 0.0 else None
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
        stats = replace(empty_stats(), n_nan_mismatch=acc.n_nan, n_inf_mismatch=acc.n_inf)

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
