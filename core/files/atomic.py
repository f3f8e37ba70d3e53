"""Atomic file writes: every file Parity writes goes through here.

Only a regular file (or nothing) is ever replaced: a device, FIFO, socket or folder at the
path, or a link to one, is refused in one line (`refuse_special`), up front by
`check_writable` and again at the write.

A report, saved run or cache file is written to a hidden temp file in the same folder (same
filesystem, so the final `os.replace` is atomic) and renamed into place only when complete:
a killed process, a full disk or a size limit leaves the previous file whole. Temp files a
killed writer left behind are removed by the next write to the same path; a live writer's
are not: each writer holds a lock on its temp file (flock, released when it ends, however it
ends), so concurrent writers of one path each finish and the last complete file wins.
"""

from __future__ import annotations

import glob
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from parity.errors import WriteError
from parity.files.kinds import not_a_regular_file

_TMP_SUFFIX = ".parity-tmp"


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}{_TMP_SUFFIX}")


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _lock(fd: int, *, wait: bool) -> bool:
    """flock `fd` exclusively; False when another process (or descriptor) holds it."""
    if fcntl is None:  # no flock (Windows): every temp file counts as live
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        return False
    return True


def _remove_stale(path: Path) -> None:
    """Temp files of earlier writes to `path` whose writer has ended before its rename (its
    lock is gone); a live writer's temp file is left alone."""
    try:
        siblings = list(path.parent.glob(f".{glob.escape(path.name)}.*{_TMP_SUFFIX}"))
    except OSError:
        return
    for stale in siblings:
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
        except OSError:
            continue
        try:
            if _lock(fd, wait=False):
                with suppress(OSError):
                    stale.unlink()
        finally:
            os.close(fd)


def open_temp(tmp: str | os.PathLike[str]) -> int:
    """A write descriptor on the temp file `atomic_path` made (truncated, never through a
    link): for writers that want a descriptor rather than a path."""
    return os.open(tmp, os.O_WRONLY | os.O_TRUNC | _NOFOLLOW)


def replaceable(path: str | os.PathLike[str]) -> str:
    """'' when a write may replace `path` (nothing there, a regular file, a link to one, a
    dangling link), else what is there: a device, FIFO, socket or folder, or a link to one.
    `os.replace` would swap a regular file in for the node (as root, `--json /dev/null`
    would destroy the system's /dev/null)."""
    kind = not_a_regular_file(path)
    if kind in ("", "missing") or kind.endswith("which does not exist"):
        return ""
    return kind


def refuse_special(path: str | os.PathLike[str], what: str = "") -> None:
    """WriteError unless `path` is replaceable (see `replaceable`)."""
    kind = replaceable(path)
    if kind:
        shown = f"{what} {os.fspath(path)}" if what else os.fspath(path)
        raise WriteError(
            f"cannot write {shown}: it is {kind}; Parity replaces only a regular file",
            path=os.fspath(path),
        )


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, mode: int = 0o666) -> Iterator[Path]:
    """Yield a temp path next to `path`; on normal exit it replaces `path` atomically.

    The temp file exists, empty (created exclusively, `mode` before the umask) and locked
    for as long as the block runs; the caller writes it by its path (any writer that takes
    a path: zipfile, numpy, ...) or through `open_temp`. On an exception the temp file is
    removed and `path` is untouched. OSError propagates: callers turn it into their one-line
    error. A device, FIFO, socket or folder at `path` (or a link to one) is a WriteError,
    before and again just before the rename.
    """
    path = Path(path)
    refuse_special(path)
    _remove_stale(path)
    tmp = _tmp_name(path)
    held = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
    try:
        _lock(held, wait=True)
        yield tmp
        refuse_special(path)
        os.replace(tmp, path)
    finally:
        with suppress(FileNotFoundError):
            tmp.unlink()
        os.close(held)


def _create(tmp: Path, data: bytes) -> None:
    with os.fdopen(open_temp(tmp), "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically (exclusive create of the temp file, fsync'd)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        _create(tmp, data)
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def _cause(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


@contextmanager
def atomic_output(path: str | os.PathLike[str], what: str) -> Iterator[Path]:
    """`atomic_path` for a user-named output: an OSError becomes one `WriteError` line."""
    refuse_special(path, what)
    try:
        with atomic_path(path) as tmp:
            yield tmp
    except OSError as exc:
        raise WriteError(f"cannot write {what} {path}: {_cause(exc)}", path=str(path)) from exc


def write_output(path: str | os.PathLike[str], data: bytes | str, *, what: str) -> Path:
    """Write a report (text as UTF-8) atomically; failures are a `WriteError` naming `what`."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_output(path, what) as tmp:
        _create(tmp, data)
    return Path(path)


def _no_folder(folder: Path) -> str:
    """Why `folder` is not one: the nearest existing ancestor that is a file (or a device),
    or that it does not exist."""
    for ancestor in (folder, *folder.parents):
        if ancestor.is_dir():
            break
        kind = not_a_regular_file(ancestor)
        if kind != "missing":
            return f"{ancestor} is {kind or 'a file'}, not a folder"
    return f"folder {folder} does not exist"


def check_writable(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, before any work, an output path whose folder is missing or not writable.

    Probes by creating (and removing) a temp file beside `path`: permission bits alone do
    not tell (root ignores them; read-only mounts and /sys refuse root too).
    """
    if "\0" in os.fspath(path):
        raise WriteError(
            f"cannot write {what} {os.fspath(path)!r}: the name holds a NUL byte",
            path=os.fspath(path),
        )
    path = Path(path)
    if path.is_dir():
        raise WriteError(f"cannot write {what} {path}: it is a directory", path=str(path))
    refuse_special(path, what)
    if not path.parent.is_dir():
        raise WriteError(f"cannot write {what} {path}: {_no_folder(path.parent)}", path=str(path))
    probe = _tmp_name(path)
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise WriteError(f"cannot write {what} {path}: {_cause(exc)}", path=str(path)) from exc
    os.close(fd)
    with suppress(OSError):
        probe.unlink()


def check_folder_writable(folder: str | os.PathLike[str], what: str) -> None:
    """Refuse, before any work, an output folder (`--repro DIR`) that is empty text, a file
    or a device, or that cannot be made or written to."""
    if not os.fspath(folder).strip():
        raise WriteError(f"{what}: give a folder name, not an empty one", path="")
    path = Path(folder)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            kind = not_a_regular_file(path) or "a file"
            raise WriteError(
                f"cannot write {what} {path}: it is {kind}, not a folder", path=str(path)
            )
        check_writable(path / "repro.parity-probe", what)
        return
    for ancestor in path.parents:
        if ancestor.is_dir():
            check_writable(ancestor / f"{path.name}.parity-probe", what)
            return
        kind = not_a_regular_file(ancestor)
        if kind != "missing":
            raise WriteError(
                f"cannot write {what} {path}: {ancestor} is {kind or 'a file'}, not a folder",
                path=str(path),
            )


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (through links and `..`), existing or not."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)
