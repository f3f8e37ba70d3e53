"""The compiled inner loop of the comparison (numba): every element read once, every figure exact.

:func:`run` walks a range of one chunk in blocks of :data:`BLOCK` elements. Per block:

1. :func:`_sums`, vectorised: the float64 differences into a buffer of ``|d|`` and one of
   ``|ref|``, and the four float64 sums (only here is fast-math allowed, ``reassoc``: it
   lets the sums run in vector lanes and changes nothing but their last bits). A block
   holding NaN/Inf (its sums are not finite) is done again by :func:`_sums_nonfinite`,
   which packs the finite pairs and counts the one-sided NaN/Inf.
2. :func:`_scan`, vectorised, exact: histogram keys, the count at the run's tolerance, the
   largest ``|d|`` and the largest where ref == 0, and a flag on the rare elements.
3. a scalar loop: the histogram, and the errors above the p99 threshold tp appended without a
   branch (tp is raised from the histogram as it fills; the kept errors are compacted here).
4. the flagged elements only: a new largest relative error (by division, exactly), a point
   above the hull (:func:`_above`, handed back to the driver, :mod:`parity.judge.compare_pass`),
   one of the 512 largest errors (a heap, with |ref| and position).

An exact block (every pair equal and finite: every error 0), once the first blocks have
filled the heap and set tp, is taken in one step instead (:func:`_equal_block`: one pass for
equality, sum ref*ref and |ref|, one for the hull's test at d = 0); it changes each figure
as the steps above would (bin 0, the ties of tp = 0, the first max_rel), and a block that
does not qualify goes the general way. An exact output costs about one pass.

State lives in two arrays (slots :data:`F`, :data:`S`) so that one call continues where the
last stopped; :func:`run` returns where it stopped: the end of the range, or earlier when a
buffer cannot take another block (the driver empties it and calls again). Compiled once per
dtype pair (float32, float64; other dtypes are converted first) and cached on disk.
"""

from __future__ import annotations

import math
from enum import IntEnum

import numpy as np
from numba import njit

from parity.judge.error_profile import HIST_ROUND_UP, HIST_SHIFT, TOP_PAIRS
from parity.judge.pass_rule import allowed_at, one_sided_at

__all__ = ["BLOCK", "F", "N_F", "N_S", "S", "raise_tp", "run"]

BLOCK = 4096  # elements per block (its buffers stay in L2; shorter blocks measured slower)
RAISE_EVERY = 1 << 14  # elements between raises of the p99 threshold
EQUAL_PART = 256  # elements an exact block is checked in before the next part
_REL_MARGIN = 1.0 - 2.0**-50  # below max_rel by more than a rounding: a candidate is never missed
_NORMAL = 2.0**-1022  # the smallest normal float64


F = IntEnum(
    "F",
    "SUM_ABS DD RD RR MAX_ABS MAX_REL ZERO_MAX TP ATOL RTOL R_LEFT D_TOP SLACK",
    start=0,
)
"""Slots of the float64 state."""

S = IntEnum(
    "S",
    "N_FINITE WORST N_MISMATCH N_NAN N_INF TIES N_TOP N_HULL N_HEAP TOP_BIN TP_BIN K_KEEP "
    "SINCE_RAISE",
    start=0,
)
"""Slots of the int64 state."""

N_F, N_S = len(F), len(S)
_RU = np.int64(HIST_ROUND_UP)
_SHIFT = np.int64(HIST_SHIFT)
_allowed = njit(cache=True, nogil=True, inline="always")(allowed_at)
_one_sided = njit(cache=True, nogil=True, inline="always")(one_sided_at)


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _sums(ref, onnx, is_diff, i, n, bd, br):
    """|d| and |ref| into the buffers; (sum |d|, sum d*d, sum ref*d, sum ref*ref).

    ``reassoc`` lets the sums run in vector lanes (only their rounding, far below the
    1e-12 they are held to, depends on it); nothing here decides anything."""
    s_abs = s_dd = s_rd = s_rr = 0.0
    if is_diff:
        for j in range(n):
            x = np.float64(ref[i + j])
            d = np.float64(onnx[i + j])
            bd[j] = abs(d)
            br[j] = abs(x)
            s_abs += abs(d)
            s_dd += d * d
            s_rd += x * d
            s_rr += x * x
    else:
        for j in range(n):
            x = np.float64(ref[i + j])
            d = np.float64(onnx[i + j]) - x
            bd[j] = abs(d)
            br[j] = abs(x)
            s_abs += abs(d)
            s_dd += d * d
            s_rd += x * d
            s_rr += x * x
    return s_abs, s_dd, s_rd, s_rr


@njit(cache=True, nogil=True)
def _sums_nonfinite(ref, onnx, is_diff, i, n, bd, br, pos):
    """:func:`_sums` over the finite pairs only, packed at the buffers' front (``pos``: their
    offsets), and the count of the others: NaN on one side only, Inf on one side only or
    of opposite signs (:func:`parity.judge.pass_rule.one_sided_at`). A pair of finite
    values whose float64 difference overflows is a finite pair with error inf."""
    s_abs = s_dd = s_rd = s_rr = 0.0
    n_fin = n_nan = n_inf = 0
    for j in range(n):
        x = np.float64(ref[i + j])
        y = np.float64(onnx[i + j])
        d = y if is_diff else y - x
        if math.isfinite(x) and math.isfinite(y):
            bd[n_fin] = abs(d)
            br[n_fin] = abs(x)
            pos[n_fin] = j
            s_abs += abs(d)
            s_dd += d * d
            s_rd += x * d
            s_rr += x * x
            n_fin += 1
            continue
        nan_mm, inf_mm = _one_sided(
            math.isnan(x), math.isnan(y), math.isinf(x), math.isinf(y), x == y
        )
        n_nan += nan_mm
        n_inf += inf_mm
    return s_abs, s_dd, s_rd, s_rr, n_fin, n_nan, n_inf


@njit(cache=True, nogil=True, inline="always")
def _rel_candidate(d, r, max_rel, rel_bar):
    """Whether ``d / r`` (r > 0) may be above ``max_rel`` (the division decides). rel_bar is
    max_rel lowered by more than a rounding, so none is missed; a point on the line
    (``d`` is ``max_rel * r`` rounded, in the normal range) is not one: d / r is then within
    half an ulp of max_rel and rounds to it, or below (an all-zero ONNX output is such a line)."""
    on_line = (d == max_rel * r) & (d >= _NORMAL)
    return (d >= rel_bar * r) & ((d > 0.0) | (max_rel < 0.0)) & (on_line == False)  # noqa: E712


@njit(cache=True, nogil=True)
def _scan(bd, br, n, kb, fb, atol, rtol, d_bar, max_rel, rel_bar, r_left, lines):
    """One vectorised pass over a block's |d| and |ref|: histogram keys, the count at the
    tolerance, the largest |d| and the largest |d| where ref == 0 (as bits: d >= 0, so
    bits order like values), and a flag on each element the scalar loop must see (a
    superset: every bar here is at most the exact one)."""
    bits = bd.view(np.int64)
    s0, a0, s1, a1, s2, a2 = lines[0], lines[1], lines[2], lines[3], lines[4], lines[5]
    n_mismatch = n_flag = 0
    top = zero_top = np.int64(0)
    for j in range(n):
        d, r, b = bd[j], br[j], bits[j]
        kb[j] = (b + _RU) >> _SHIFT
        n_mismatch += d > _allowed(r, atol, rtol)  # the pass rule (parity.judge.pass_rule)
        top = max(top, b)
        zero_top = max(zero_top, b if r == 0.0 else np.int64(0))
        hull = (r < r_left) | (d > r * s0 + a0) | (d > r * s1 + a1) | (d > r * s2 + a2)
        rel = _rel_candidate(d, r, max_rel, rel_bar)
        f = (d > d_bar) | ((r > 0.0) & (hull | rel))
        fb[j] = f
        n_flag += f
    return n_mismatch, top, zero_top, n_flag


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _equal_sums(ref, onnx, i, n, br):
    """Whether ``ref[i:i+n] == onnx[i:i+n]`` everywhere, and then sum ref*ref (``|ref|`` into
    the buffer). Gives up at the first part of :data:`EQUAL_PART` elements holding a
    difference (or a NaN), so an inexact block costs little. ``reassoc``: only the sum's
    last bits depend on it, as in :func:`_sums`."""
    s_rr = 0.0
    for p in range(0, n, EQUAL_PART):
        neq = 0
        for j in range(p, min(p + EQUAL_PART, n)):
            x = np.float64(ref[i + j])
            neq += x != np.float64(onnx[i + j])
            br[j] = abs(x)
            s_rr += x * x
        if neq:
            return False, 0.0
    return True, s_rr


@njit(cache=True, nogil=True)
def _equal_block(ref, onnx, i, n, br, r_left, lines):
    """An exact block the general path would take in one step: every pair equal and finite
    (every |d| 0, so with atol, rtol >= 0 no mismatch, histogram bin 0, nothing larger than
    the largest error, the heap's or the hull's top) and no point (|ref|, 0) that
    :func:`_scan` would flag for the hull. Returns (taken, sum ref*ref, how many |ref| > 0)."""
    equal, s_rr = _equal_sums(ref, onnx, i, n, br)
    if not (equal and math.isfinite(s_rr)):  # Inf on both sides: a non-finite pair
        return False, 0.0, 0
    s0, a0, s1, a1, s2, a2 = lines[0], lines[1], lines[2], lines[3], lines[4], lines[5]
    n_flag = n_pos = 0
    for j in range(n):  # _scan's hull test at d = 0 (no fast-math: a decision)
        r = br[j]
        hull = (r < r_left) | (0.0 > r * s0 + a0) | (0.0 > r * s1 + a1) | (0.0 > r * s2 + a2)
        n_flag += (r > 0.0) & hull
        n_pos += r > 0.0
    return n_flag == 0, s_rr, n_pos


@njit(cache=True, nogil=True)
def _heap_push(hd, hr, hi, n, d, r, i):
    """Into the min-heap of the largest errors (n entries, room for one more): the error,
    its |ref| and its position."""
    k = n
    while k > 0:
        p = (k - 1) >> 1
        if hd[p] <= d:
            break
        hd[k], hr[k], hi[k] = hd[p], hr[p], hi[p]
        k = p
    hd[k], hr[k], hi[k] = d, r, i


@njit(cache=True, nogil=True)
def _heap_replace(hd, hr, hi, n, d, r, i):
    """Replace the heap's smallest entry (hd[0] < d) with (d, r, i)."""
    k = 0
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and hd[c + 1] < hd[c]:
            c += 1
        if hd[c] >= d:
            break
        hd[k], hr[k], hi[k] = hd[c], hr[c], hi[c]
        k = c
    hd[k], hr[k], hi[k] = d, r, i


@njit(cache=True, nogil=True)
def _above(hr, hd, r, d, slack):
    """Whether (r > 0, d) lies above the hull's envelope (its polyline, -inf left of it, flat
    right of it) plus ``slack``: the driver's test (np.interp), with a slack the driver
    makes a little smaller, so that every point it would take is handed back."""
    m = hr.size
    if m == 0 or r < hr[0]:
        return True
    if r >= hr[m - 1]:
        return d > hd[m - 1] + slack
    lo, hi = 0, m - 1  # hr[lo] <= r < hr[hi]
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if hr[mid] <= r:
            lo = mid
        else:
            hi = mid
    slope = (hd[hi] - hd[lo]) / (hr[hi] - hr[lo])  # as np.interp
    return d > slope * (r - hr[lo]) + hd[lo] + slack


@njit(cache=True, nogil=True)
def _one_value(top, n_top, lo_edge, hi_edge):
    """The one value of ``top[:n_top]`` in (lo_edge, hi_edge]; -1 if none or several."""
    value = -1.0
    for q in range(n_top):
        d = top[q]
        if lo_edge < d <= hi_edge:
            if value < 0.0:
                value = d
            elif d != value:
                return -1.0
    return value


@njit(cache=True, nogil=True)
def raise_tp(fs, st, hist, edges, top, n_top, crowded):
    """Raise the p99 threshold tp below the k-th largest error so far (k = K_KEEP).

    To a histogram edge below it: everything the final top k can hold is above the edge,
    and an error equal to the edge is below at least k others, so nothing equal to tp
    needs keeping. When no edge is left between tp and that error's bin, and the bin holds
    one value only (exact zeros; errors that are a few exact float32 ulps, whose bins hold
    one value each), tp becomes that value and the bin's errors are its ties (counted, not
    kept: the top-k multiset is every error above tp plus TIES copies of tp). Telling one
    value reads the kept errors, so it is done only when they ``crowded`` the buffer (bin
    0 needs no reading: it holds exact zeros only). Every error above tp is kept, so
    every error of a bin above tp's is in ``top[:n_top]``."""
    k_keep = st[S.K_KEEP]
    if st[S.N_FINITE] < k_keep:
        return
    j0, top_bin, tp = st[S.TP_BIN], st[S.TOP_BIN], fs[F.TP]
    cum = 0
    j = top_bin
    while j >= j0:
        cum += hist[j]
        if cum >= k_keep:
            break
        j -= 1
    if j < j0:  # fewer than k_keep above tp
        return
    if j - 1 >= j0 and edges[j - 1] > tp:
        tp = fs[F.TP] = edges[j - 1]
        j0 = st[S.TP_BIN] = j - 1
        st[S.TIES] = -1
    if not (j > j0 or tp < 0.0):  # the bin holds errors at or below tp: not all kept
        return
    if j == 0:
        value = 0.0
    elif crowded:
        value = _one_value(top, n_top, edges[j - 1], edges[j])
        if value < 0.0:
            return
    else:
        return
    fs[F.TP] = value
    st[S.TP_BIN] = j
    st[S.TIES] = hist[j]


@njit(cache=True, nogil=True)
def run(ref, onnx, is_diff, lo, hi, base, fs, st, hist, edges, lines, env_r, env_d, top,
        hull_r, hull_d, heap_d, heap_r, heap_i, bd, br, kb, fb, pos):  # fmt: skip
    """Feed ``ref[lo:hi]``, ``onnx[lo:hi]`` (position ``base + i``; ``is_diff``: onnx holds
    the signed difference already) into the state; return where it stopped."""
    atol, rtol = fs[F.ATOL], fs[F.RTOL]
    max_abs, worst = fs[F.MAX_ABS], st[S.WORST]
    max_rel = fs[F.MAX_REL]
    rel_bar = max_rel * _REL_MARGIN
    zero_max, tp = fs[F.ZERO_MAX], fs[F.TP]
    r_left, d_top, slack = fs[F.R_LEFT], fs[F.D_TOP], fs[F.SLACK]
    s0, a0, s1, a1, s2, a2 = lines[0], lines[1], lines[2], lines[3], lines[4], lines[5]
    n_mismatch, ties = st[S.N_MISMATCH], st[S.TIES]
    n_top, n_hull, n_heap, top_bin = st[S.N_TOP], st[S.N_HULL], st[S.N_HEAP], st[S.TOP_BIN]
    heap_min = heap_d[0] if n_heap == TOP_PAIRS else -math.inf
    one = np.empty(1)
    one[0] = max(max_abs, 0.0)
    max_bits = one.view(np.int64)[0] if max_abs >= 0.0 else np.int64(-1)
    one[0] = max(zero_max, 0.0)
    zero_bits = one.view(np.int64)[0]
    bits = bd.view(np.int64)
    can_equal = not is_diff and atol >= 0.0 and rtol >= 0.0  # then 0 is within tolerance
    i = lo
    while i < hi:
        n = min(BLOCK, hi - i)
        if n_hull + n > hull_r.size:
            break
        if n_top + n > top.size:  # raise tp, drop what is now at or below it
            st[S.TOP_BIN], st[S.TIES] = top_bin, ties
            raise_tp(fs, st, hist, edges, top, n_top, True)
            tp, ties = fs[F.TP], st[S.TIES]
            kept = 0
            for q in range(n_top):
                if top[q] > tp:
                    top[kept] = top[q]
                    kept += 1
            n_top = kept
            if 2 * n_top + n > top.size:  # errors piled in few bins: the driver decides
                break
        # an exact block (every error 0) after the first ones: what the general path below
        # would do to each figure, without its passes (see _equal_block)
        equal = False
        if (
            can_equal
            and ref[i] == onnx[i]
            and max_bits >= 0
            and tp >= 0.0
            and min(heap_min, d_top) >= 0.0
        ):
            equal, s_rr, n_pos = _equal_block(ref, onnx, i, n, br, r_left, lines)
        if equal:
            fs[F.RR] += s_rr
            st[S.N_FINITE] += n
            hist[0] += n
            if ties >= 0 and tp == 0.0:
                ties += n
            if n_pos and max_rel < 0.0:  # 0 / |ref|: the first relative error
                max_rel = rel_bar = 0.0
        else:
            s_abs, s_dd, s_rd, s_rr = _sums(ref, onnx, is_diff, i, n, bd, br)
            n_fin, packed = n, False
            if not math.isfinite(s_abs + s_dd + s_rd + s_rr):
                s_abs, s_dd, s_rd, s_rr, n_fin, n_nan, n_inf = _sums_nonfinite(
                    ref, onnx, is_diff, i, n, bd, br, pos
                )
                st[S.N_NAN] += n_nan
                st[S.N_INF] += n_inf
                packed = True
            fs[F.SUM_ABS] += s_abs
            fs[F.DD] += s_dd
            fs[F.RD] += s_rd
            fs[F.RR] += s_rr
            st[S.N_FINITE] += n_fin
            d_bar = min(heap_min, d_top)
            d_tie = tp if ties >= 0 else math.nan  # ties with tp counted (see _compact_top)
            n_fail, block_top, block_zero, n_flag = _scan(
                bd, br, n_fin, kb, fb, atol, rtol, d_bar, max_rel, rel_bar, r_left, lines
            )
            n_mismatch += n_fail
            n_tie = 0
            for j in range(n_fin):  # the histogram, the errors above tp and its ties (no branch)
                hist[kb[j]] += 1
                top[n_top] = bd[j]
                n_top += bd[j] > tp
                n_tie += bd[j] == d_tie
            ties += n_tie
            if n_fin:
                top_bin = max(top_bin, (block_top + _RU) >> _SHIFT)
            zero_bits = max(zero_bits, block_zero)
            if n_fin and block_top > max_bits:  # the first of the largest, like argmax
                max_bits = block_top
                for j in range(n_fin):
                    if bits[j] == block_top:
                        worst = base + i + (pos[j] if packed else j)
                        break
            words = fb.view(np.uint64)
            for q in range((n_fin + 7) >> 3 if n_flag else 0):
                if words[q] == 0:  # eight unflagged elements
                    continue
                for j in range(8 * q, min(8 * q + 8, n_fin)):
                    if not fb[j]:
                        continue
                    d, r = bd[j], br[j]
                    if r > 0.0:
                        if _rel_candidate(d, r, max_rel, rel_bar):
                            rel = d / r
                            if rel > max_rel:
                                max_rel = rel
                                rel_bar = max_rel * _REL_MARGIN
                        hull = (r < r_left) | (d > d_top) | (d > r * s0 + a0)
                        hull = hull | (d > r * s1 + a1) | (d > r * s2 + a2)
                        if hull and _above(env_r, env_d, r, d, slack):
                            hull_r[n_hull] = r
                            hull_d[n_hull] = d
                            n_hull += 1
                    if d > heap_min:  # a tie with the smallest kept: the first one stays
                        at = base + i + (pos[j] if packed else j)
                        if n_heap < TOP_PAIRS:
                            _heap_push(heap_d, heap_r, heap_i, n_heap, d, r, at)
                            n_heap += 1
                            if n_heap == TOP_PAIRS:
                                heap_min = heap_d[0]
                        else:
                            _heap_replace(heap_d, heap_r, heap_i, n_heap, d, r, at)
                            heap_min = heap_d[0]
        i += n
        st[S.SINCE_RAISE] += n
        if st[S.SINCE_RAISE] >= RAISE_EVERY:
            st[S.SINCE_RAISE] = 0
            st[S.TOP_BIN], st[S.TIES] = top_bin, ties
            raise_tp(fs, st, hist, edges, top, n_top, False)
            tp, ties = fs[F.TP], st[S.TIES]
    one.view(np.int64)[0] = max_bits
    fs[F.MAX_ABS] = one[0] if max_bits >= 0 else -1.0
    one.view(np.int64)[0] = zero_bits
    fs[F.ZERO_MAX] = one[0]
    st[S.WORST], fs[F.MAX_REL] = worst, max_rel
    st[S.N_MISMATCH], st[S.TIES] = n_mismatch, ties
    st[S.N_TOP], st[S.N_HULL], st[S.N_HEAP], st[S.TOP_BIN] = n_top, n_hull, n_heap, top_bin
    return i
