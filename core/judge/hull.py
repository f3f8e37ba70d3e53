"""The upper-left convex hull of (|ref|, |error|) points, and its simplification.

Only the hull's vertices matter for ``min_atol(rtol) = max(|d| - rtol * |ref|)``; these two
functions are the geometry, free of the pass that feeds them (:mod:`parity.judge.compare_pass`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["simplify_hull", "upper_left_hull"]


def upper_left_hull(r: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def simplify_hull(r: np.ndarray, d: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
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
