"""File hashing for identities and caches: SHA-256 read in chunks, so memory stays bounded
whatever the file's size."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from parity.errors import ParityError
from parity.files.safe_read import open_regular

__all__ = ["file_sha256", "update_with_file", "update_with_range"]

_CHUNK = 1 << 20


def update_with_file(digest: Any, path: str | Path) -> None:
    """Feed a regular file's bytes to ``digest`` (a hashlib object), chunk by chunk (a FIFO or
    a device is a ParityError naming it, never read)."""
    with open_regular(path, what="", limit=None, error=ParityError) as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)


def update_with_range(
    digest: Any, path: str | Path, offset: int, length: int, *, exact: bool = True
) -> None:
    """Feed `length` bytes of a regular file from `offset` to ``digest``, chunk by chunk: what
    one tensor's external data uses, never the rest of its file (a 1 TiB sparse file of which
    1 KiB is used costs 1 KiB). A range past the file's end is a ParityError saying so
    (`exact=False`: cut at the end instead)."""
    with open_regular(path, what="", limit=None, error=ParityError) as fh:
        size = fh.seek(0, 2)
        if not exact:
            length = max(0, min(length, size - offset))
        if offset < 0 or length < 0 or offset + length > size:
            raise ParityError(
                f"{Path(path).name}: bytes {offset} to {offset + length} lie past its end "
                f"({size} bytes)"
            )
        fh.seek(offset)
        left = length
        while left and (chunk := fh.read(min(_CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, hex."""
    digest = hashlib.sha256()
    update_with_file(digest, path)
    return digest.hexdigest()
