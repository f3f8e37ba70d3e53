"""The run's time limit (`--timeout`): one Deadline the run loop and every ORT call share.

ONNX Runtime can be stopped from another thread (`RunOptions.terminate = True`; checked
between nodes and inside Loop bodies), so an ORT call is given run options that a timer
terminates when the deadline passes; a session's setup, which cannot be stopped, is waited
for only until the deadline (`Deadline.call`, used by parity.load.sessions through
`current()`). Torch cannot be interrupted: the run loop checks the
deadline between steps, and the CLI adds a watchdog (`start_watchdog`) that ends the process
with exit 2 a grace period later. Writes are atomic, so an ended process leaves no
half-written file.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from parity.errors import RunTimeout

T = TypeVar("T")

MAX_SECONDS = 10_000_000.0
"""The longest time limit (about 115 days): more is no limit the clock can keep (a timer of
1e10 s overflows, 1e308 aborts the interpreter), so it is refused as a usage error."""
WATCHDOG_GRACE = 3.0
"""Seconds past the deadline before the CLI's watchdog ends a process stuck in torch."""


class Deadline:
    """`seconds` from construction (None: no limit). Cheap to check; thread-safe to read."""

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None and not (0 < seconds <= MAX_SECONDS):
            raise ValueError(
                f"a timeout must be a positive number of seconds up to {MAX_SECONDS:.0f}, "
                f"got {seconds}"
            )
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        return None if self._end is None else max(0.0, self._end - time.monotonic())

    @property
    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def error(self) -> RunTimeout:
        return RunTimeout(timeout_message(self.seconds or 0.0))

    def check(self) -> None:
        """Raise RunTimeout once the deadline has passed (call between steps)."""
        if self.expired:
            raise self.error()

    @contextmanager
    def active(self) -> Iterator[Deadline]:
        """Make this the deadline of the run in this context (`current()`): code that cannot
        be handed one, such as the session factory, reads it there."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def call(self, make: Callable[[], T], what: str) -> T:
        """`make()` bounded by the deadline. ONNX Runtime cannot stop a session's setup (a
        graph of 10^6 nodes takes minutes): with a limit it runs in a worker thread, and past
        the deadline the run raises RunTimeout while the worker is abandoned; it finishes,
        and its memory is freed, in the background."""
        if self._end is None:
            return make()
        self.check()
        done: dict[str, Any] = {}

        def work() -> None:
            try:
                done["value"] = make()
            except BaseException as exc:  # handed to the waiting thread
                done["error"] = exc

        worker = threading.Thread(target=work, name=f"parity {what}", daemon=True)
        worker.start()
        worker.join(self.remaining())
        if worker.is_alive():
            raise RunTimeout(
                f"{timeout_message(self.seconds or 0.0)}: {what} was abandoned (it finishes "
                "in the background, and its memory is freed then)"
            )
        if "error" in done:
            raise done["error"]
        return done["value"]

    @contextmanager
    def ort_run_options(self) -> Iterator[Any]:
        """ORT RunOptions that a timer terminates at the deadline (None without a limit).

        On leaving, an ORT failure after the deadline becomes RunTimeout.
        """
        if self._end is None:
            yield None
            return
        import onnxruntime

        self.check()
        options = onnxruntime.RunOptions()
        options.log_severity_level = 4  # the terminated run's own error line is Parity's
        timer = threading.Timer(self.remaining() or 0.0, _terminate, args=(options,))
        timer.daemon = True
        timer.start()
        try:
            yield options
        except Exception as exc:
            if self.expired:
                raise self.error() from exc
            raise
        finally:
            timer.cancel()


_CURRENT: ContextVar[Deadline | None] = ContextVar("parity_deadline", default=None)


def current() -> Deadline | None:
    """The deadline of the run in progress in this context (`Deadline.active`), if any."""
    return _CURRENT.get()


def _terminate(options: Any) -> None:
    options.terminate = True


def timeout_message(seconds: float) -> str:
    return f"timed out after {seconds:g} s"


def start_watchdog(
    seconds: float, on_timeout: Callable[[], None], *, grace: float = WATCHDOG_GRACE
) -> threading.Timer:
    """End the process with exit 2 `seconds + grace` from now, after `on_timeout()` (which
    prints the one line). For the CLI only: a server must never call this."""

    def fire() -> None:
        try:
            on_timeout()
        finally:
            os._exit(2)

    timer = threading.Timer(seconds + grace, fire)
    timer.daemon = True
    timer.start()
    return timer
