"""Saved runs edited the way a forger edits them: the manifest changed and its hash in the zip
comment recomputed, so what a test exercises is the checks behind the hash
(tests/test_security_terminal.py, tests/test_security_forgeries.py)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

from parity.reports.saved_run import MANIFEST, SCHEMA


def rewrite(path: Path, out: Path, change: Callable[[dict], None], *, member=None) -> Path:
    """A copy of saved run `path` at `out`, its manifest `change`d in place and resealed;
    `member`: (name, bytes) to put in place of one array member (its listed hash updated)."""
    with zipfile.ZipFile(path) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
    manifest = json.loads(next(data for info, data in items if info.filename == MANIFEST))
    change(manifest)
    if member is not None:
        name, data = member
        manifest["members"][name]["sha256"] = hashlib.sha256(data).hexdigest()
        items = [(info, data if info.filename == name else d) for info, d in items]
    raw = json.dumps(manifest).encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for info, data in items:
            zf.writestr(info, raw if info.filename == MANIFEST else data)
        zf.comment = f"{SCHEMA} {MANIFEST} sha256 {hashlib.sha256(raw).hexdigest()}".encode()
    return out
