"""The local engine: up to N pairs at once on this machine, each in its own process.

The pairs are the processes; a thread per slot only waits on one. Stopping the sweep (Ctrl-C)
kills the pairs still running.

Ctrl-C sets a stop flag instead of raising KeyboardInterrupt wherever the main thread happens
to be: raised inside the executor's lock handling (as_completed acquires every future's lock
in turn), it can leave a future's lock held, and the worker reporting that pair then waits
forever (a sweep once did not end within 60 s of Ctrl-C under a loaded full test run). The
main loop checks the flag between short waits, the workers kill their pairs' processes within
a poll, and only then is the interrupt raised.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import replace

from parity.sweep.execute import Attempt, Interrupted, PairOutput, node_name, run_pair
from parity.sweep.plan import PairJob

_WAIT_S = 0.2


def run_local(
    jobs: Sequence[PairJob], on_result: Callable[[PairOutput], None], *, workers: int
) -> None:
    stop = threading.Event()
    with (
        _stop_on_interrupt(stop),
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="parity-sweep") as pool,
    ):
        pending = {pool.submit(_one, job, stop.is_set) for job in jobs}
        try:
            while pending and not stop.is_set():
                done, pending = wait(pending, timeout=_WAIT_S, return_when=FIRST_COMPLETED)
                for future in done:
                    try:
                        result = future.result()
                    except Interrupted:  # stopped by the flag this very moment: not a result
                        continue
                    on_result(result)
        except BaseException:
            stop.set()
            raise
        finally:
            if stop.is_set():
                for future in pending:
                    future.cancel()
    # the pool has waited for its workers: every pair's process is gone
    if stop.is_set():
        raise KeyboardInterrupt


def _one(job: PairJob, should_stop: Callable[[], bool]) -> PairOutput:
    """The pair, its attempt recorded (this machine, its verdict, its seconds) after the
    storage reads it retried."""
    node = node_name()
    out = run_pair(job, should_stop, node=node)
    attempt = Attempt(node, str(out.result.verdict), out.result.seconds)
    return replace(out, result=replace(out.result, attempts=(*out.result.attempts, attempt)))


@contextmanager
def _stop_on_interrupt(stop: threading.Event) -> Iterator[None]:
    """SIGINT sets `stop` (a second one interrupts at once); outside the main thread, where
    no handler can be installed, Ctrl-C behaves as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
