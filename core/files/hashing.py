"""File hashing for identities and caches: SHA-256 read in chunks, so memory stays bounded
whatever the file's size."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from parity.errors import ParityError
from parity.files.safe_read import open_regular

__all__ = ["file_sha256", "update_with_file"]

_CHUNK = 1 << 20


def update_with_file(digest: Any, path: str | Path) -> None:
    """Feed a regular file's bytes to ``digest`` (a hashlib object), chunk by chunk (a FIFO or
    a device is a ParityError naming it, never read)."""
    with open_regular(path, what="", limit=None, error=ParityError) as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, hex."""
    digest = hashlib.sha256()
    update_with_file(digest, path)
    return digest.hexdigest()
