"""Progress events of a run and the versions that decide its numbers.

A leaf: every step (sources, export, the loop) reports through it, and importing it
imports no step, so no module needs parity.pipeline to say how far it got.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a run, for a progress bar: `fraction` is overall progress in [0, 1]."""

    step: str
    message: str
    fraction: float | None
    elapsed: float


ProgressCallback = Callable[[ProgressEvent], None]

# the step of an event that is said even off a terminal: what an analysis is about to cost
NOTICE = "notice"


_crumbs: int | None = None  # a pipe to the supervising parent (parity.cli.supervise)


def leave_crumbs(fd: int | None) -> None:
    """Every progress step is also written to `fd` (a pipe the parent reads), so a native
    crash (SIGSEGV, SIGABRT) that kills this process is said with the step it died in."""
    global _crumbs
    _crumbs = fd


def _leave_crumb(step: str, message: str) -> None:
    import os

    line = f"{step}\t{' '.join(message.split())}"[:500] + "\n"
    try:
        os.write(_crumbs, line.encode("utf-8", "replace"))  # type: ignore[arg-type]
    except OSError:
        leave_crumbs(None)  # the parent is gone: nobody to tell


ENDED = b"\x00\n"
"""The line a supervised child writes when it ends having said how (a verdict, or the one line
of an error): a child that exits without it (a model's `os._exit(0)`) ended without a result."""


def say_ended() -> None:
    """Tell the supervising parent (if any) that this process has said how it ends."""
    import os

    if _crumbs is not None:
        try:
            os.write(_crumbs, ENDED)
        except OSError:
            leave_crumbs(None)


class ProgressReporter:
    """Calls `callback` with ProgressEvents timed from construction (None: does nothing)."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._callback = callback
        self._start = time.perf_counter()

    def __call__(self, step: str, message: str, fraction: float | None = None) -> None:
        if _crumbs is not None:  # the supervising parent names this step if the process dies
            _leave_crumb(step, message)
        if self._callback is not None:
            elapsed = time.perf_counter() - self._start
            self._callback(ProgressEvent(step, message, fraction, elapsed))


def environment(provider: str, *, also: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions that decide the numbers: torch (and the modules in `also`, e.g. what a
    source ran the reference with) read only if already imported."""
    import numpy as np
    import onnx
    import onnxruntime

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "numpy": np.__version__,
        "torch": _loaded_version("torch"),
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "provider": provider,
    }
    for module in also:
        env[module] = _loaded_version(module)
    return env


def _loaded_version(module: str) -> str:
    return str(getattr(sys.modules.get(module), "__version__", "not loaded"))
