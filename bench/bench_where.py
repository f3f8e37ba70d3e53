"""Benchmark: the "where" pass (parity.judge.where) against the comparison it follows.

Not a test. On a float32 image-like output (batch, channels, height, width) whose mismatches
lie on a border (the demo:broken pattern), it times ``parity.judge.compare.compare_outputs`` (what
``parity validate`` runs for every output) and ``parity.judge.where.where_profile`` (what it adds
for
a failing output), best of ``--repeat``, and the where pass's peak extra memory (tracemalloc).
The machine's load average is printed: on a shared machine, compare ratios, not seconds.

    python bench/bench_where.py                    # 4 x 3 x 1024 x 1024 (12.6M elements)
    python bench/bench_where.py --shape 8 3 2048 2048 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np

from parity.judge.compare import compare_outputs
from parity.judge.where import where_profile
from parity.tolerances import Tolerance

TOL = Tolerance(atol=1e-5, rtol=0.0)


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs="+", default=[4, 3, 1024, 1024])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shape = tuple(args.shape)
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(shape, dtype=np.float32)
    onnx = ref + rng.standard_normal(shape, dtype=np.float32) * np.float32(1e-7)
    onnx[..., [0, -1], :] += 0.1
    onnx[..., :, [0, -1]] += 0.1
    names = ("batch", None, "height", "width")[-len(shape) :]

    compare = _best(lambda: compare_outputs(ref, onnx, name="y", input_set=0, tolerance=TOL),
                    args.repeat)  # fmt: skip
    where = _best(lambda: where_profile(ref, onnx, TOL, names=names), args.repeat)
    tracemalloc.start()
    profile = where_profile(ref, onnx, TOL, names=names)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"shape {shape} ({ref.size / 1e6:.1f}M elements), load average {os.getloadavg()[0]:.1f}")
    print(f"compare_outputs  {compare:7.3f} s")
    print(f"where_profile    {where:7.3f} s  ({where / compare:.2f}x the comparison)")
    size = ref.nbytes / 2**20
    print(f"where peak extra memory {peak / 2**20:.1f} MiB (outputs {size:.0f} MiB each)")
    print(f"summary: {profile.summary}")


if __name__ == "__main__":
    main()
