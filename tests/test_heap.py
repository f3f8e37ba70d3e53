"""Big arrays freed are given back (parity.limits.heap): --layers allocates and frees a batch
of intermediate values after another, and glibc's moving mmap threshold kept each batch's
freed arrays in the heap, so a run peaked hundreds of MB past its --layers-memory (issue 54).
Each case runs in a fresh process: the threshold is the process's, set once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from parity.limits.heap import map_big_blocks
    fixed = sys.argv[1] == "fixed" and map_big_blocks()
    page = os.sysconf("SC_PAGE_SIZE")
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page
    first = np.ones(8 << 20, np.uint8)
    del first  # glibc raises its mmap threshold to this block's size when it is freed
    base = rss()
    big, small = [], []
    for _ in range(16):  # a batch of 8 MiB values, with small objects kept between them
        big.append(np.ones(8 << 20, np.uint8))
        small.append(np.ones(64 << 10, np.uint8))
    del big
    print(int(fixed), (rss() - base) >> 20)
    """
)


def _kept_mib(mode: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return bool(int(out[0])), int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_batch_of_big_arrays_freed_is_given_back() -> None:
    fixed, kept = _kept_mib("fixed")
    assert fixed and kept < 16  # of the 128 MiB the batch held
    moving, kept_before = _kept_mib("dynamic")  # what a run kept before: the whole batch
    assert not moving and kept_before >= 96
