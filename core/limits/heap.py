"""Big arrays in mappings of their own, so that memory freed is memory given back.

glibc's malloc serves a block of 128 KiB or more from its own mmap, but raises that threshold
to the size of each such block freed, up to 32 MiB: after the first batch of --layers has
freed its arrays, the next batches' arrays (ONNX Runtime's extra outputs, torch's captured
values) come from the heap, whose freed pages stay in the process. Measured on a 12-block
MLP at batch 2048 (8 MiB per value, `--layers-memory 64`): peak RSS 0.94-1.0 GB against a
plain run's 0.54-0.62 GB, growing batch after batch; 0.71 GB with a fixed threshold, for about
2 s more system time in 16 s. A fixed threshold (set once: glibc then stops moving it) keeps
every block of MAPPED_FROM bytes or more in its own mapping, returned when freed.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["MAPPED_FROM", "map_big_blocks"]

MAPPED_FROM = 1 << 20
"""Blocks of this many bytes or more get a mapping of their own (glibc's M_MMAP_THRESHOLD)."""

_M_MMAP_THRESHOLD = -3  # malloc.h
_set: list[bool] = []


def map_big_blocks() -> bool:
    """Fix the process's mmap threshold at MAPPED_FROM (once; glibc on Linux only: elsewhere,
    or where the C library has no mallopt, nothing changes). True when it is set."""
    if _set:
        return _set[0]
    done = False
    if sys.platform.startswith("linux"):
        try:
            mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
            done = bool(mallopt(_M_MMAP_THRESHOLD, MAPPED_FROM))  # musl's returns 0
        except (OSError, AttributeError):
            done = False
    _set.append(done)
    return done
