"""A zip's directory, bounded before it is parsed.

`zipfile.ZipFile` reads the whole central directory and makes an object per entry before
anyone can count them: a crafted zip of 2 million empty entries took 1-1.6 GB and 42-140 s
before its one-line refusal. Here the end-of-directory record (and zip64's) is read first
(a few bytes at the end of the file) and a directory that lists too many entries, or is too
big, is refused in one line before zipfile sees it.

Contract: check_zip_directory(fh, *, what, path, max_entries, error, max_bytes=None) -> None
    `fh` a seekable binary file (left at an unspecified position); not a zip: nothing said
    (zipfile then names it). max_bytes defaults to 1 KiB per entry allowed.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

from parity.errors import ParityError

_END = b"PK\x05\x06"
_END64_LOCATOR = b"PK\x06\x07"
_END64 = b"PK\x06\x06"
_MAX_COMMENT = 65535


def check_zip_directory(
    fh: BinaryIO,
    *,
    what: str,
    path: str | os.PathLike[str],
    max_entries: int,
    error: type[ParityError],
    max_bytes: int | None = None,
) -> None:
    """Refuse a zip whose directory lists more than `max_entries` entries or spans more than
    `max_bytes` bytes, from its end records alone."""
    found = _directory_size(fh)
    if found is None:
        return
    entries, size = found
    limit = max_entries * 1024 if max_bytes is None else max_bytes
    if entries > max_entries:
        raise error(
            f"{what} {os.fspath(path)} lists {entries:,} files, more than the {max_entries:,} "
            "such a zip may hold"
        )
    if size > limit:
        raise error(
            f"{what} {os.fspath(path)} has a {size:,}-byte directory, more than the "
            f"{limit:,} bytes such a zip may list"
        )


def _directory_size(fh: BinaryIO) -> tuple[int, int] | None:
    """(entries, bytes) of the central directory the end records declare; None: no record."""
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    tail_len = min(size, 22 + _MAX_COMMENT)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(_END)
    if at < 0 or len(tail) - at < 22:
        return None
    n_total, cd_size = struct.unpack("<HL", tail[at + 10 : at + 16])
    if n_total != 0xFFFF and cd_size != 0xFFFFFFFF:
        return n_total, cd_size
    locator = tail[at - 20 : at] if at >= 20 else b""
    if locator[:4] != _END64_LOCATOR:
        return n_total, cd_size
    (record_at,) = struct.unpack("<Q", locator[8:16])
    if record_at > size:
        return n_total, cd_size
    fh.seek(record_at)
    record = fh.read(56)
    if len(record) < 56 or record[:4] != _END64:
        return n_total, cd_size
    n_total64, cd_size64 = struct.unpack("<QQ", record[32:48])
    return max(n_total, n_total64), max(cd_size, cd_size64)
