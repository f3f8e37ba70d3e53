"""Atomic file writes: every file Parity writes goes through here.

A report, saved run or cache file is written to a hidden temp file in the same folder (same
filesystem, so the final `os.replace` is atomic) and renamed into place only when complete:
a killed process, a full disk or a size limit leaves the previous file whole. Temp files a
killed writer left behind are removed by the next write to the same path.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

_TMP_SUFFIX = ".parity-tmp"


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}{_TMP_SUFFIX}")


def _remove_stale(path: Path) -> None:
    """Temp files of earlier writes to `path` that were killed before their rename."""
    try:
        siblings = list(path.parent.glob(f".{path.name}.*{_TMP_SUFFIX}"))
    except OSError:
        return
    for stale in siblings:
        with suppress(OSError):
            stale.unlink()


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path next to `path`; on normal exit it replaces `path` atomically.

    The caller creates the temp file (any writer that takes a path: zipfile, numpy, ...).
    On an exception the temp file is removed and `path` is untouched. OSError propagates:
    callers turn it into their one-line error.
    """
    path = Path(path)
    _remove_stale(path)
    tmp = _tmp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with suppress(FileNotFoundError):
            tmp.unlink()


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically (exclusive create of the temp file, fsync'd)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return write_bytes(path, text.encode("utf-8"))
