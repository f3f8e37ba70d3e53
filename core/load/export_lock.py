"""One export at a time: torch.export is not thread-safe within a process.

Dashboard sessions run in threads of one server process; two of them exporting at once (two
demos on a cold cache, two ``hf:`` runs) broke each other's exports. Every export in Parity
runs under ``export_lock()``: a process-wide reentrant lock, plus, when a shared folder is
given (the demo cache), an advisory file lock on it so that processes sharing the folder
export and write its files one at a time too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:  # POSIX; elsewhere the in-process lock is all there is
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".parity-export.lock"

_PROCESS_LOCK = threading.RLock()
_held: set[Path] = set()  # folders whose file lock this process holds (under _PROCESS_LOCK)


@contextmanager
def export_lock(shared_dir: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Hold the process's export lock (and `shared_dir`'s file lock) for the block.

    The file lock is taken after the thread lock, so one process holds at most one file
    descriptor per folder and threads never contend on flock. OSError opening the lock file
    propagates: the caller could not write into that folder anyway.
    """
    with _PROCESS_LOCK:
        folder = Path(shared_dir).resolve() if shared_dir is not None else None
        if folder is None or fcntl is None or folder in _held:  # nested: flock would self-block
            yield
            return
        lock_path = folder / LOCK_NAME
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(lock_path, flags, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _held.add(folder)
            try:
                yield
            finally:
                _held.discard(folder)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
