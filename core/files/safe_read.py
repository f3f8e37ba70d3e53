"""Reading a file Parity did not create: a regular file only, its size bounded, read bounded.

A path from a user, a URL parameter, a sweep folder or a saved run can name `/dev/zero` (read
forever), a FIFO (`open()` waits forever for a writer), a socket or a folder, directly or
through a link. Every such reader goes through here: the file is opened with O_NONBLOCK (a
FIFO cannot hang the open), the *opened* descriptor is checked to be a regular file (no race
between a check and the open), its size is checked against the reader's limit before a byte
is read, and the reads themselves stop at the limit even if the file grows or its size lies
(/proc files say 0).

Contract (`error`: the ParityError subclass the caller's users know, e.g. SavedRunError):
open_regular(path, *, what, limit, error) -> context manager yielding a seekable binary file
    that never reads past `limit` bytes (None: the size at open)
read_bytes(path, *, what, limit, error) -> bytes     more than `limit` bytes is refused
read_text(path, *, what, limit, error) -> str        UTF-8
check_regular(path, *, what, error) -> int           the size; for libraries that take a path
    (onnx.checker, torch.jit.load): the check is the same, the library's own open follows it
problem(path) -> str    '' or "/dev/zero is a character device, not a file" (no error raised)
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from parity.errors import ParityError
from parity.files.kinds import kind_of, not_a_regular_file

TEXT_LIMIT = 64 << 20
"""64 MiB: the most a JSON or text file Parity reads (a summary, a report, a config) may hold."""


def _not_a_file(path: str | os.PathLike[str], mode: int | None) -> str:
    """'X is a character device, not a file' (through a link: what the link points to)."""
    kind = not_a_regular_file(path)
    if not kind or kind == "missing":  # swapped since the open: say what was opened
        kind = kind_of(mode) if mode is not None else "not a regular file"
    return f"{os.fspath(path)} is {kind}, not a file"


def problem(path: str | os.PathLike[str]) -> str:
    """'' for a regular file (or a link to one) or a missing path, else the one line."""
    kind = not_a_regular_file(path)
    return "" if kind in ("", "missing") else f"{os.fspath(path)} is {kind}, not a file"


def _say(what: str, text: str) -> str:
    return f"{what} {text}" if what else text


def _open_fd(path: str | os.PathLike[str], what: str, error: type[ParityError]) -> int:
    """A descriptor on a regular file (O_NONBLOCK at open, cleared after), or `error`."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise error(_say(what, f"{os.fspath(path)}: no such file")) from exc
    except OSError as exc:  # a socket (ENXIO), a folder we may not open, a loop of links
        reason = problem(path)
        if reason:
            raise error(_say(what, reason)) from exc
        raise error(_say(what, f"{os.fspath(path)}: {exc.strerror or exc}")) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(_say(what, _not_a_file(path, mode)))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Bounded(io.RawIOBase):
    """A raw file on `fd` that ends at `limit` bytes, whatever the file holds past it."""

    def __init__(self, fd: int, limit: int) -> None:
        self._fd = fd
        self._limit = limit
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self._limit - self._pos))
        if n == 0:
            return 0
        data = os.pread(self._fd, n, self._pos)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = min(os.fstat(self._fd).st_size, self._limit) + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise OSError(22, "negative seek position")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def _too_big(path: str | os.PathLike[str], size: int, limit: int, what: str) -> str:
    from parity.limits.budget import format_size

    return _say(
        what,
        f"{os.fspath(path)} is {format_size(size)}, more than the {format_size(limit)} "
        "such a file may hold",
    )


@contextmanager
def open_regular(
    path: str | os.PathLike[str],
    *,
    what: str,
    limit: int | None,
    error: type[ParityError],
) -> Iterator[io.BufferedReader[Any]]:
    """A buffered, seekable reader on the regular file `path`, bounded by `limit` bytes (None:
    by its size when opened). A bigger file is refused before anything is read."""
    fd = _open_fd(path, what, error)
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise error(_too_big(path, size, limit, what))
    except BaseException:
        os.close(fd)
        raise
    raw = _Bounded(fd, size if limit is None else limit)
    with io.BufferedReader(raw) as fh:
        yield fh


def read_bytes(
    path: str | os.PathLike[str], *, what: str, limit: int, error: type[ParityError]
) -> bytes:
    """The whole of a regular file of at most `limit` bytes (one more byte is refused)."""
    fd = _open_fd(path, what, error)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise error(_too_big(path, size, limit, what))
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise error(_say(what, f"{os.fspath(path)}: {exc.strerror or exc}")) from exc
    finally:
        os.close(fd)
    if total > limit:  # it grew, or its size lied
        raise error(_too_big(path, total, limit, what))
    return b"".join(chunks)


def read_text(
    path: str | os.PathLike[str],
    *,
    what: str,
    limit: int = TEXT_LIMIT,
    error: type[ParityError],
) -> str:
    """A regular UTF-8 text file of at most `limit` bytes."""
    data = read_bytes(path, what=what, limit=limit, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(_say(what, f"{os.fspath(path)} is not UTF-8 text ({exc.reason})")) from exc


def check_regular(path: str | os.PathLike[str], *, what: str, error: type[ParityError]) -> int:
    """Refuse anything but a regular file (through links) before a library opens `path`
    itself; returns its size. Opening is how it is checked, so a FIFO cannot hang here."""
    fd = _open_fd(Path(path), what, error)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)
