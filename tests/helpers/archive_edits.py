"""Edits of real `torch.export.save` archives, member by member, for the attack tests
(tests/test_security_models.py, tests/test_security_bounds.py)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

ZERO_MIB = b"\0" * (1 << 20)
"""One MiB of zeros, written again and again to stream a large member."""


def rewrite_zip(
    src: Path,
    dst: Path,
    edits: dict[str, Callable[[bytes], bytes]],
    *,
    zeros: dict[str, int] | None = None,
) -> Path:
    """Copy a zip, passing the members whose names end with a key through its function;
    `zeros`: members (by suffix) replaced by that many zero bytes, deflated and streamed."""
    zeros = zeros or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            size = next((n for s, n in zeros.items() if info.filename.endswith(s)), None)
            if size is not None:
                target = zipfile.ZipInfo(info.filename)
                target.compress_type = zipfile.ZIP_DEFLATED
                with zout.open(target, "w") as member:
                    for _ in range(size // len(ZERO_MIB)):
                        member.write(ZERO_MIB)
                continue
            data = zin.read(info.filename)
            for suffix, edit in edits.items():
                if info.filename.endswith(suffix):
                    data = edit(data)
            zout.writestr(info.filename, data)
    return dst


def json_edit(change: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    """An edit for rewrite_zip: the member read as JSON, `change`d in place, written back."""

    def edit(data: bytes) -> bytes:
        document = json.loads(data)
        change(document)
        return json.dumps(document).encode()

    return edit


def first_expr(document: object) -> dict:
    """The first object holding an `expr_str` (a symbolic expression) in a JSON document."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "expr_str" in item:
                return item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    raise AssertionError("no expression in the archive")
