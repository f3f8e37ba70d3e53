"""The local engine: up to N pairs at once on this machine, each in its own process.

The pairs are the processes; a thread per slot only waits on one. Stopping the sweep (Ctrl-C)
kills the pairs still running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from core.sweep.execute import PairResult, run_pair
from core.sweep.plan import PairJob


def run_local(
    jobs: Sequence[PairJob], on_result: Callable[[PairResult], None], *, workers: int
) -> None:
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="parity-sweep") as pool:
        futures = [pool.submit(run_pair, job, stop.is_set) for job in jobs]
        try:
            for future in as_completed(futures):
                on_result(future.result())
        except BaseException:
            stop.set()
            for future in futures:
                future.cancel()
            raise
