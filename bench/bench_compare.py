"""Benchmark: Parity's full comparison against the usual ways of comparing two outputs.

Not a test. On the same float32 arrays (10M and 100M elements by default) it times:

* ``core``       -- ``parity.judge.compare.compare_outputs``: every statistic, exact p99, the
                    re-judge profile, chunked (what ``parity validate`` runs per output);
* ``bare numpy`` -- ``np.max(np.abs(a - b))``, the floor everything is measured against;
* ``np.allclose``;
* ``polygraphy`` -- Polygraphy's comparator (``CompareFunc.simple`` over two
                    ``IterationResult``\\ s, as ``polygraphy run`` compares runners);
* ``torch.testing.assert_close`` (its AssertionError, when raised, is part of the time).

Prints the best of ``--repeat`` wall and CPU times (CPU: this process, all threads; torch
may use several), each one's ratio to the bare numpy line, and the core's peak extra
memory (tracemalloc: numpy reports every buffer it allocates). The machine's load average
is printed too: on a shared machine, compare ratios, not seconds.

The core's loop is compiled by numba (``parity.judge.compare_kernel``): the first comparison
in a process loads it from numba's on-disk cache (or compiles it, a few seconds per dtype
pair, the first time after an install or a change); that first call is timed and printed
apart, and the lines above are warm.

    python bench/bench_compare.py                 # 10M and 100M elements
    python bench/bench_compare.py --sizes 1e6 1e7 --repeat 5
    python bench/bench_compare.py --sizes 1e7 --errors relu --skip polygraphy torch allclose
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import logging
import os
import time
import tracemalloc
import warnings
from collections.abc import Callable

import numpy as np

from parity.judge.compare import DEFAULT_CHUNK_ELEMENTS, compare_outputs
from parity.tolerances import Tolerance

TOL = Tolerance(atol=1e-5, rtol=0.0)


ERRORS = ("noise", "relative", "relu", "ulp", "zero")


def _arrays(n: int, errors: str = "noise", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two float32 outputs: errors independent of the value (noise), proportional to it
    (relative), ReLU outputs (half the reference exactly 0, most of those exact), a few
    float32 ulps (ulp: -2..2 ulps of each value, few distinct errors) or none (zero: equal)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n, dtype=np.float32)
    noise = rng.standard_normal(n, dtype=np.float32)
    if errors == "relative":
        return a, a * (np.float32(1) + noise * np.float32(1e-4))
    if errors == "ulp":
        k = rng.integers(-2, 3, size=n).astype(np.float32)
        return a, a + k * np.spacing(np.abs(a))
    if errors == "zero":
        return a, a.copy()
    if errors == "relu":
        return np.maximum(a, 0), np.maximum(a + noise * np.float32(3e-6), 0)
    return a, a + noise * np.float32(3e-6)


def _core(a: np.ndarray, b: np.ndarray, chunk: int) -> None:
    compare_outputs(a, b, name="y", input_set=0, tolerance=TOL, chunk_elements=chunk)


def _bare(a: np.ndarray, b: np.ndarray) -> None:
    np.max(np.abs(a - b))


def _allclose(a: np.ndarray, b: np.ndarray) -> None:
    np.allclose(a, b, rtol=TOL.rtol, atol=TOL.atol)


def _polygraphy() -> Callable[[np.ndarray, np.ndarray], None] | None:
    try:
        from polygraphy.comparator import CompareFunc
        from polygraphy.comparator.struct import IterationResult
        from polygraphy.logger import G_LOGGER
    except ImportError:
        return None
    G_LOGGER.severity = G_LOGGER.CRITICAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        func = CompareFunc.simple(atol=TOL.atol, rtol=TOL.rtol)

    def run(a: np.ndarray, b: np.ndarray) -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # its report is printed, not returned
            func(
                IterationResult(outputs={"y": a}, runner_name="torch"),
                IterationResult(outputs={"y": b}, runner_name="onnx"),
            )

    return run


def _torch() -> Callable[[np.ndarray, np.ndarray], None] | None:
    try:
        import torch
    except ImportError:
        return None

    def run(a: np.ndarray, b: np.ndarray) -> None:
        with contextlib.suppress(AssertionError):
            torch.testing.assert_close(
                torch.from_numpy(b), torch.from_numpy(a), rtol=TOL.rtol, atol=TOL.atol
            )

    return run


def _best(fn: Callable[[], None], repeat: int) -> tuple[float, float]:
    """Best wall time and best CPU time (this process, all threads) over `repeat` runs."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu = min(cpu, time.process_time() - start_cpu)
        wall = min(wall, time.perf_counter() - start)
    return wall, cpu


def _peak_extra_mib(fn: Callable[[], None]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


def first_call() -> None:
    """Time the first comparison in this process (numba's cache load, or its compile)."""
    small = np.ones(1000, dtype=np.float32)
    start, start_cpu = time.perf_counter(), time.process_time()
    _core(small, small + 1, DEFAULT_CHUNK_ELEMENTS)
    print(
        f"first comparison in this process (the compiled loop loaded or compiled): "
        f"{time.perf_counter() - start:.2f} s wall, {time.process_time() - start_cpu:.2f} s CPU"
    )


def bench(n: int, repeat: int, chunk: int, skip: set[str], errors: str = "noise") -> None:
    a, b = _arrays(n, errors)
    print(
        f"\n{n:,} float32 elements per side ({a.nbytes / 2**20:.0f} MiB each), {errors} errors, "
        f"best of {repeat}, load average {os.getloadavg()[0]:.2f}"
    )
    rows: list[tuple[str, tuple[float, float] | None, str]] = []
    bare = _best(lambda: _bare(a, b), repeat)
    core_mem = _peak_extra_mib(lambda: _core(a, b, chunk))
    core = _best(lambda: _core(a, b, chunk), repeat)
    rows.append(("core compare_outputs", core, f"peak extra memory {core_mem:.1f} MiB"))
    rows.append(("bare np.max(np.abs(a - b))", bare, ""))
    if "allclose" not in skip:
        rows.append(("np.allclose", _best(lambda: _allclose(a, b), repeat), ""))
    others = {"polygraphy": _polygraphy(), "torch": _torch()}
    labels = {"polygraphy": "polygraphy CompareFunc.simple", "torch": "torch.testing.assert_close"}
    for key, fn in others.items():
        if key in skip:
            continue
        if fn is None:
            rows.append((labels[key], None, "not installed"))
            continue
        rows.append((labels[key], _best(lambda fn=fn: fn(a, b), repeat), ""))
    print(f"{'method':<31} {'wall s':>8} {'x bare':>7} {'cpu s':>8} {'x bare':>7}  notes")
    for label, times, note in rows:
        if times is None:
            print(f"{label:<31} {'-':>8} {'-':>7} {'-':>8} {'-':>7}  {note}")
        else:
            wall, cpu = times
            print(
                f"{label:<31} {wall:8.4f} {wall / bare[0]:7.2f} {cpu:8.4f} {cpu / bare[1]:7.2f}"
                f"  {note}"
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=float,
        default=[1e7, 1e8],
        help="element counts (default: 1e7 1e8)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per method (best kept)")
    parser.add_argument(
        "--chunk", type=int, default=DEFAULT_CHUNK_ELEMENTS, help="core chunk size in elements"
    )
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["allclose", "polygraphy", "torch"],
        help="methods to leave out",
    )
    parser.add_argument(
        "--errors", choices=ERRORS, default="noise", help="the errors' shape (default: noise)"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    first_call()
    for size in args.sizes:
        bench(int(size), args.repeat, args.chunk, set(args.skip), args.errors)


if __name__ == "__main__":
    main()
