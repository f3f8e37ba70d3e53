"""File hashing for identities and caches: SHA-256 read in chunks, so memory stays bounded
whatever the file's size."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

__all__ = ["file_sha256", "update_with_file"]

_CHUNK = 1 << 20


def update_with_file(digest: Any, path: str | Path) -> None:
    """Feed a file's bytes to ``digest`` (a hashlib object), chunk by chunk."""
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, hex."""
    digest = hashlib.sha256()
    update_with_file(digest, path)
    return digest.hexdigest()
