"""Quiet torch and ONNX Runtime while they load and run models: the user sees Parity's one line.

Left alone, a corrupt archive makes torch log a 13-60 line traceback before Parity's error, a
refused pickle comes after a torch UserWarning, and a failing ORT session prints its own
coloured error line. Loaders and the runner wrap their torch calls in `quiet_torch()` and
build ORT sessions at `ort_severity()`. `set_debug(True)` (the CLI's --debug) lets it all
through.

Logger levels and warning filters are process-wide, and dashboard sessions are threads: the
first thread in silences, the last one out restores (a counter under a lock), so threads
never restore each other's half-state.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

_SILENT = logging.CRITICAL + 1
ORT_ERRORS, ORT_FATAL = 3, 4

_lock = threading.Lock()
_depth = 0
_saved_levels: dict[str, int] = {}
_saved_filters: list[Any] = []
_debug = False


def set_debug(on: bool) -> None:
    """--debug: torch's and ORT's own messages are shown again."""
    global _debug
    _debug = on
    apply_ort_default_severity()


def debug() -> bool:
    return _debug


def ort_severity() -> int:
    """SessionOptions.log_severity_level: fatal only, or errors under --debug."""
    return ORT_ERRORS if _debug else ORT_FATAL


@contextmanager
def quiet_torch() -> Iterator[None]:
    """torch's loggers (torch and torch.*) and all Python warnings are silenced in the block."""
    if _debug:
        yield
        return
    _enter()
    try:
        yield
    finally:
        _exit()


def _enter() -> None:
    global _depth
    with _lock:
        _depth += 1
        if _depth > 1:
            return
        names = ["torch"] + [
            n for n in list(logging.root.manager.loggerDict) if n.startswith("torch.")
        ]
        for name in names:
            logger = logging.getLogger(name)
            if name == "torch" or logger.level != logging.NOTSET:
                _saved_levels[name] = logger.level
                logger.setLevel(_SILENT)
        _saved_filters[:] = warnings.filters[:]
        warnings.simplefilter("ignore")


def _exit() -> None:
    global _depth
    with _lock:
        _depth -= 1
        if _depth > 0:
            return
        for name, level in _saved_levels.items():
            logging.getLogger(name).setLevel(level)
        _saved_levels.clear()
        cast(list, warnings.filters)[:] = _saved_filters  # typeshed: a Sequence; it is a list
        mutated = getattr(warnings, "_filters_mutated", None)  # drops cached decisions
        if mutated is not None:
            mutated()
        _saved_filters.clear()


def apply_ort_default_severity() -> None:
    """ORT's process-wide logger (messages before a session exists) at ort_severity()."""
    try:
        import onnxruntime

        onnxruntime.set_default_logger_severity(ort_severity())
    except Exception:  # an ORT build without the call: its default is warnings
        pass
