"""The one pass over an output's data: exact statistics and the re-judge profile, chunked.

:func:`measure` walks both tensors in flat chunks (inputs may be ``np.memmap``: never loaded
whole) through the compiled loop of :mod:`parity.judge.compare_kernel`, which reads each
element once and keeps every statistic exactly (float64 differences and sums, the exact
histogram, the count at the run's tolerance, max_abs and its position, max_rel, NaN/Inf)
and hands back the few elements the rest needs. This module holds what is done with those
few, in numpy, and builds the :class:`~parity.judge.error_profile.ErrorProfile`.

p99 is exact in one pass: errors above a threshold tp are kept; tp is a histogram edge
proven to lie below the k-th largest error (k = what np.percentile's linear method reads,
about 1 % of the elements; raised in the loop as the histogram fills), or, when errors pile
up in a few bins, a data value with its ties counted (not kept): the one value of the k-th
largest's bin when it holds one (exact zeros, errors of a few exact float32 ulps: no
sorting, :func:`parity.judge.compare_kernel.raise_tp`), else the k-th largest kept value
(one np.partition here).

The profile's hull: the loop hands back the points above an inner polygon of the current
hull (three vertices), left of its leftmost vertex or above its top; here they are tested
against the hull itself (np.interp) and merged. The first chunk's every 61st point seeds it.
Points within ``hull_slack`` above the hull are not merged (this keeps data lying exactly on
a line, e.g. an all-zero ONNX output, fast). ``hull_slack`` is ``2**-44 * max_abs`` unless
the hull grew past 2048 vertices (errors lying on a concave curve, e.g. proportional to
sqrt|ref|): then it is simplified (Douglas-Peucker) to at most 1024 vertices, the slack
widening in 4x steps until it fits.

Extra memory: the hull's candidate buffers (1 MB), and the p99 candidates' buffer, 4 x 1 %
of the elements, 8 bytes each (32 MiB at 100M). The cost against a bare float32
``max(|a - b|)`` (1.5-1.9x) is measured in docs/benchmarks.md and bench/README.md.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from parity.judge import compare_kernel as kernel
from parity.judge.chunks import CHUNK_ELEMENTS, flat, flat_chunks
from parity.judge.compare_kernel import F, S
from parity.judge.error_profile import (
    HIST_BINS,
    SAMPLE_PAIRS,
    TOP_PAIRS,
    ErrorProfile,
    hist_bin,
    hist_edge,
)
from parity.judge.exact_ints import exact_diff, is_integer_pair
from parity.judge.hull import simplify_hull, upper_left_hull
from parity.judge.pass_rule import exact_int_mismatch
from parity.results import ErrorStats
from parity.tolerances import Tolerance

__all__ = ["DEFAULT_CHUNK_ELEMENTS", "empty_stats", "measure"]

DEFAULT_CHUNK_ELEMENTS = CHUNK_ELEMENTS

_HULL_SLACK = 2.0**-44  # relative slack below which points near the hull are not merged
_HULL_MAX = 2048  # more vertices than this: simplify the hull (and widen the slack)
_HULL_KEEP = 1024  # ... down to at most this many
_SEED = 20250101  # fixed: the same tensors always give the same profile
_SEED_STEP = 61  # the first chunk's every 61st point seeds the hull
_CAP = 1 << 16  # hull candidates the loop hands back at most at a time
_HOLD_POINTS = 1 << 12  # hull candidates are merged once this many are held (and at the end)
_EDGES = hist_edge(np.arange(HIST_BINS))
_NO_LINE = (0.0, math.inf)  # an unused stage-1 line: nothing is above it


def measure(
    ref: np.ndarray, onnx: np.ndarray, tolerance: Tolerance, chunk_elements: int
) -> tuple[ErrorStats, ErrorProfile, int]:
    """Statistics, profile and mismatch count at ``tolerance`` of two same-shape, non-empty
    numeric arrays."""
    n = int(ref.size)
    chunk = max(1, min(int(chunk_elements), n))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # handled, not warned
        acc = _Pass(n, tolerance, integers=is_integer_pair(ref, onnx))
        for start, rc, oc in flat_chunks(ref, onnx, chunk):
            acc.feed(rc, oc, start)
        return _finish(acc, ref, onnx, tolerance)


def _loop_pair(ref: np.ndarray, onnx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chunk as the loop takes it: both float32 or both float64, native, contiguous
    (float16 and mixed float widths up to 32 bits widen to float32, the rest to float64:
    every value stays exact, as the float64 difference then sees it)."""
    kinds = {ref.dtype.kind, onnx.dtype.kind}
    narrow = kinds == {"f"} and max(ref.dtype.itemsize, onnx.dtype.itemsize) <= 4
    t = np.dtype(np.float32 if narrow else np.float64)
    return np.ascontiguousarray(ref, dtype=t), np.ascontiguousarray(onnx, dtype=t)


class _Pass:
    """Running state of one comparison; fed chunk by chunk, then finalised."""

    def __init__(self, n: int, tol: Tolerance, *, integers: bool = False) -> None:
        self.n = n
        self.integers = integers  # both sides integer/bool: differences and verdict exact
        self.atol, self.rtol = float(tol.atol), float(tol.rtol)
        self.fs = np.zeros(kernel.N_F)
        self.st = np.zeros(kernel.N_S, dtype=np.int64)
        fs, st = self.fs, self.st
        fs[F.MAX_ABS] = fs[F.MAX_REL] = -1.0  # max_rel over ref != 0, element by element
        fs[F.ZERO_MAX] = fs[F.TP] = -math.inf
        # integers: the verdict is counted here, exactly, in their own type
        fs[F.ATOL], fs[F.RTOL] = (math.inf, 0.0) if integers else (self.atol, self.rtol)
        st[S.WORST] = -1
        st[S.TIES] = -1  # >= 0 once tp is a data value: elements equal to tp, counted
        # p99 (exact): keep every error above a threshold that is a proven lower bound of the
        # final k-th largest error (a histogram edge below the k-th largest seen so far).
        st[S.K_KEEP] = max(n - math.floor(0.99 * (n - 1)) + 2, TOP_PAIRS) if n else TOP_PAIRS
        self.int_mismatch = 0
        self.hist = np.zeros(HIST_BINS, dtype=np.int64)
        # the loop's buffers: the TOP_PAIRS largest errors with their |ref| (a heap), the
        # errors above tp (compacted in the loop, grown here), the hull candidates it hands
        # back, one block of |d|, |ref|, histogram keys, flags and positions
        self.heap_d, self.heap_r = np.zeros(TOP_PAIRS), np.zeros(TOP_PAIRS)
        self.heap_i = np.zeros(TOP_PAIRS, dtype=np.int64)
        self.buf_top = np.empty(max(4 * int(st[S.K_KEEP]), 1 << 16))
        self.buf_r, self.buf_d = np.empty(_CAP), np.empty(_CAP)
        self.block_d, self.block_r = np.empty(kernel.BLOCK), np.empty(kernel.BLOCK)
        self.block_key = np.empty(kernel.BLOCK, dtype=np.int64)
        self.block_flag = np.empty(kernel.BLOCK, dtype=np.bool_)
        self.block_pos = np.empty(kernel.BLOCK, dtype=np.int64)
        # hull of (r, d) for r > 0 and its stage-1 lines (in the loop's form too)
        self.hull_r = np.zeros(0)
        self.hull_d = np.zeros(0)
        self.lines: list[tuple[float, float]] = []
        self.loop_lines = np.array(_NO_LINE * 3)
        fs[F.R_LEFT] = fs[F.D_TOP] = math.inf  # no hull yet: every r > 0 is a candidate
        self.slack_rel = _HULL_SLACK
        self.seeded = False

    # -- one chunk ---------------------------------------------------------------------

    def feed(self, ref_chunk: np.ndarray, onnx_chunk: np.ndarray, start: int) -> None:
        if self.integers:  # the difference and the verdict in integers; float64 for the rest
            mag, ge, absref = exact_diff(ref_chunk, onnx_chunk)
            fails = exact_int_mismatch(mag, absref, self.atol, self.rtol)
            self.int_mismatch += int(np.count_nonzero(fails))
            a = np.ascontiguousarray(ref_chunk, dtype=np.float64).reshape(-1)
            b = np.asarray(mag, dtype=np.float64).reshape(-1)
            np.negative(b, out=b, where=~ge.reshape(-1))
        else:
            a, b = _loop_pair(ref_chunk, onnx_chunk)
        if not self.seeded:
            self.seeded = True
            self._seed_hull(a, b, self.integers)
        i, k = 0, a.size
        while i < k:
            i = kernel.run(
                a, b, self.integers, i, k, start, self.fs, self.st, self.hist, _EDGES,
                self.loop_lines, self.hull_r, self.hull_d, self.buf_top, self.buf_r, self.buf_d,
                self.heap_d, self.heap_r, self.heap_i, self.block_d, self.block_r, self.block_key,
                self.block_flag, self.block_pos,
            )  # fmt: skip
            self._drain(stopped=i < k)

    def _seed_hull(self, a: np.ndarray, b: np.ndarray, is_diff: bool) -> None:
        """Start the hull from every 61st point: its envelope lies below the full one, so
        it is a valid filter, and the first merge stays small."""
        x = a[::_SEED_STEP].astype(np.float64)
        y = b[::_SEED_STEP].astype(np.float64)
        d = np.abs(y if is_diff else y - x)
        r = np.abs(x)
        keep = np.isfinite(x) & np.isfinite(y) & (r > 0.0)
        if keep.any():
            self._merge_hull(r[keep], d[keep])

    def _drain(self, stopped: bool) -> None:
        """Take what the loop handed back: hull candidates (a few thousand at a time: they
        are above the hull as it was when they were found, and the tests here drop those
        the hull has grown past since), and, when it ``stopped`` early, what filled up."""
        if stopped and 2 * int(self.st[S.N_TOP]) + kernel.BLOCK > self.buf_top.size:
            self._compact_top()
        if stopped or self.st[S.N_HULL] > _HOLD_POINTS:
            self._take_hull()

    def _take_hull(self) -> None:
        n_hull = int(self.st[S.N_HULL])
        if n_hull:
            self.st[S.N_HULL] = 0
            self._add_hull(self.buf_r[:n_hull].copy(), self.buf_d[:n_hull].copy())

    # -- p99 / top errors ----------------------------------------------------------------

    def _compact_top(self) -> None:
        """Drop kept errors at or below tp; if still too many, tp = k-th largest kept value.

        The second case is for errors piled into few histogram bins (many ties): elements
        equal to such a tp are counted, not kept (their |ref| is not needed: the profile's
        largest errors come from the loop's own heap).
        """
        fs, st = self.fs, self.st
        kernel.raise_tp(fs, st, self.hist, _EDGES, self.buf_top, int(st[S.N_TOP]), True)
        tp, k_keep = float(fs[F.TP]), int(st[S.K_KEEP])
        d = self.buf_top[: int(st[S.N_TOP])]
        d = d[d > tp]
        if d.size > 2 * k_keep:
            v = float(np.partition(d, d.size - k_keep)[d.size - k_keep])
            ties = int(np.count_nonzero(d == v))
            st[S.TIES] = (max(int(st[S.TIES]), 0) if v == tp else 0) + ties
            fs[F.TP] = v
            st[S.TP_BIN] = hist_bin(v) if v > 0 else 0
            d = d[d > v]
        size = max(2 * d.size + kernel.BLOCK, 4 * k_keep, 1 << 16)
        if size > self.buf_top.size:
            self.buf_top = np.empty(size)
        self.buf_top[: d.size] = d
        st[S.N_TOP] = d.size

    # -- hull ----------------------------------------------------------------------------

    def _add_hull(self, r: np.ndarray, d: np.ndarray) -> None:
        """The loop's candidates (r > 0, above the stage-1 polygon when they were found)
        against the current hull: stage 2 (the envelope itself), then stage 1 again (the
        hull may have grown since), so the same points are merged as in one pass."""
        if self.hull_r.size:
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
        padded = self.lines + [_NO_LINE] * (3 - len(self.lines))
        self.loop_lines = np.array([x for line in padded for x in line])
        self.fs[F.R_LEFT], self.fs[F.D_TOP] = float(hr[0]), d_top
        self.fs[F.SLACK] = slack - 2.0**-40 * d_top  # below the slack by more than roundings

    # -- results -------------------------------------------------------------------------

    def p99(self) -> float | None:
        m = int(self.st[S.N_FINITE])
        if m == 0:
            return None
        # numpy's default (linear) method, step for step, on the order statistics we kept
        virtual = (m - 1) * np.true_divide(99.0, 100)
        previous = math.floor(virtual)
        if virtual >= m - 1:
            previous = nxt = m - 1
        else:
            nxt = previous + 1
        a, b = self._order_statistics(m, previous, nxt)
        gamma = np.float64(virtual - previous)
        diff = b - a
        if gamma >= 0.5:
            return float(b - diff * (1 - gamma))
        return float(a + diff * gamma)

    def _order_statistics(self, m: int, previous: int, nxt: int) -> tuple[Any, Any]:
        """The errors of ascending rank ``previous`` and ``nxt`` among all ``m``."""
        tp = float(self.fs[F.TP])
        kept = self.buf_top[: int(self.st[S.N_TOP])]
        # The exact histogram says which bins hold the two; when every error in them was
        # kept (all above tp), only those need sorting.
        cum = np.cumsum(self.hist)
        j_lo = int(np.searchsorted(cum, previous, side="right"))
        j_hi = int(np.searchsorted(cum, nxt, side="right"))
        lo_edge = float(hist_edge(j_lo - 1)) if j_lo > 0 else -math.inf
        if tp <= lo_edge:
            below = int(cum[j_lo - 1]) if j_lo > 0 else 0
            window = kept[(kept > lo_edge) & (kept <= float(hist_edge(j_hi)))]
            if window.size != int(cum[j_hi]) - below:  # cannot happen: tp is a lower bound
                raise AssertionError("p99 candidates lost")
            q = previous - below
            part = np.partition(window, q)  # one selection: the next one up is the min above
            return part[q], (part[q] if nxt == previous else part[q + 1 :].min())
        values = kept[kept > tp]  # exactly the errors above tp ...
        ties = max(int(self.st[S.TIES]), 0)  # ... and how many equal it: a top-k multiset
        total = values.size + ties
        if total < m - previous:  # cannot happen: tp is a proven lower bound
            raise AssertionError("p99 candidates lost")
        # ascending rank i among all m errors is rank i - (m - total) in the kept multiset,
        # whose lowest `ties` entries equal tp
        ranks = [previous - (m - total), nxt - (m - total)]
        above = [q - ties for q in ranks if q >= ties]
        part = np.partition(values, above) if above else values
        a, b = (tp if q < ties else part[q - ties] for q in ranks)
        return a, b

    def top_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The TOP_PAIRS largest errors, descending (equal ones in the order they sit), with
        their |ref|."""
        n = int(self.st[S.N_HEAP])
        d, r, at = self.heap_d[:n], self.heap_r[:n], self.heap_i[:n]
        order = np.lexsort((at, -d))
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
    acc._take_hull()
    fs, st = acc.fs, acc.st
    n, m = acc.n, int(st[S.N_FINITE])
    n_nan, n_inf = int(st[S.N_NAN]), int(st[S.N_INF])
    max_abs = float(fs[F.MAX_ABS])
    fr, fo = flat(ref), flat(onnx)
    nonfinite = n_nan + n_inf
    n_mismatch = int(st[S.N_MISMATCH]) + acc.int_mismatch + nonfinite
    top_d, top_r = acc.top_pairs()
    hull_r, hull_d = acc.hull_r, acc.hull_d
    zero_max = max(float(fs[F.ZERO_MAX]), 0.0)

    if m:
        w = int(st[S.WORST])
        worst_index = tuple(int(i) for i in np.unravel_index(w, ref.shape))
        ref_w, onnx_w = float(fr[w]), float(fo[w])
        max_rel = float(fs[F.MAX_REL]) if fs[F.MAX_REL] >= 0.0 else None
        rr, rd, dd = float(fs[F.RR]), float(fs[F.RD]), float(fs[F.DD])
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
            max_abs=max_abs,
            worst_index=worst_index,
            ref_at_worst=ref_w,
            onnx_at_worst=onnx_w,
            max_rel=max_rel,
            mean_abs=float(fs[F.SUM_ABS]) / m,
            rms=math.sqrt(dd / m),
            p99_abs=acc.p99(),
            n_nan_mismatch=n_nan,
            n_inf_mismatch=n_inf,
            cosine=cosine,
            snr_db=snr,
        )
    else:
        stats = replace(empty_stats(), n_nan_mismatch=n_nan, n_inf_mismatch=n_inf)

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
        hull_slack=acc.slack_rel * max(max_abs, 0.0),
        hist_bins=hist_bins,
        hist_counts=acc.hist[hist_bins],
        top_d=top_d,
        top_r=top_r,
        sample_d=sample_d,
        sample_r=sample_r,
        anchor=np.array([tol.atol, tol.rtol, float(n_mismatch)]),
    )
    return stats, profile, n_mismatch
