"""What a path is, in words, when a regular file was expected (never following a link blind).

Contract:
not_a_regular_file(path) -> str   '' for a regular file (or a link to one), else e.g.
    "missing", "a folder", "a character device", "a symlink to /dev/zero (a character device)"
kind_of(st_mode) -> str           "a folder", "a named pipe", ... ("not a regular file")
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_regular_file(path: str | os.PathLike[str]) -> str:
    """'' when `path` is a regular file (directly or through links), else what it is."""
    p = Path(path)
    try:
        own = p.lstat()
    except OSError:
        return "missing"
    if stat.S_ISLNK(own.st_mode):
        try:
            target = os.readlink(p)
        except OSError:
            target = "?"
        try:
            mode = p.stat().st_mode
        except OSError:
            return f"a symlink to {target}, which does not exist"
        return "" if stat.S_ISREG(mode) else f"a symlink to {target} ({kind_of(mode)})"
    return "" if stat.S_ISREG(own.st_mode) else kind_of(own.st_mode)


def kind_of(mode: int) -> str:
    """What a stat mode is, in words, when it is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")
