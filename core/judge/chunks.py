"""Walking two same-shape arrays in pieces of bounded size: the one chunk iterator of every
pass over an output's data (the statistics, the histogram, the per-axis profile).

Arrays are read in place: a memory-mapped saved run is never loaded whole, and a
non-contiguous array is copied one chunk at a time, never whole. Two shapes of piece:
flat runs of elements (:func:`flat_chunks`, for reductions that do not care where an element
sits) and index blocks (:func:`pieces`, for the per-axis profile, which does).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["CHUNK_ELEMENTS", "flat", "flat_chunks", "pieces"]

CHUNK_ELEMENTS = 1 << 16
"""512 KB per float64 buffer: L2-sized (measured fastest for the statistics and the profile)."""


def flat(a: np.ndarray) -> Any:
    """A flat view when the memory allows one (memmaps stay memmaps); else a flat iterator,
    whose slices copy only what they take."""
    a = np.asanyarray(a)
    if a.flags.c_contiguous:
        return a.reshape(-1)
    return a.flat


def flat_chunks(
    ref: np.ndarray, onnx: np.ndarray, chunk: int
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first flat position, ref chunk, onnx chunk) over two same-size arrays, in order."""
    fr, fo = flat(ref), flat(onnx)
    n = int(np.size(ref))
    step = max(1, int(chunk))
    for start in range(0, n, step):
        stop = min(start + step, n)
        yield start, np.asarray(fr[start:stop]), np.asarray(fo[start:stop])


def pieces(shape: tuple[int, ...], chunk: int) -> Iterator[tuple[tuple, int, int]]:
    """(index key, split axis s, first index along s): pieces of about `chunk` elements that
    fix one index of every axis before s and take a block of axis s and all axes after it."""
    nd = len(shape)
    if nd == 0:
        yield (), 0, 0
        return
    if 0 in shape:
        return
    tail = [math.prod(shape[k + 1 :]) for k in range(nd)]
    s = next(k for k in range(nd) if tail[k] <= chunk)
    block = max(1, chunk // tail[s])
    for outer in np.ndindex(*shape[:s]):
        for lo in range(0, shape[s], block):
            yield (*outer, slice(lo, min(shape[s], lo + block))), s, lo
