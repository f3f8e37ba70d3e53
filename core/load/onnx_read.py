"""The one way Parity re-opens an ONNX file it already loaded (the layers, the precision
look-ups, a repro's README): through `parity.files.safe_read`, so a file swapped for a FIFO,
a device or a folder since the run began is one line (`OnnxLoadError`), never a hang.

The file is opened once, non-blocking, checked on its descriptor and read (at most protobuf's
2 GiB) from that descriptor; external data, when asked for, is read from regular files beside
it (each checked the same way before onnx opens it).

Contract: read_onnx(path, *, external_data=True) -> onnx.ModelProto;
check_external(path, proto) -> None (raises OnnxLoadError)
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import onnx

from parity.errors import OnnxLoadError, first_line
from parity.files.safe_read import check_regular, open_regular

MAX_PROTO = 2 << 30
"""Protobuf cannot parse more; weights past it live in external data."""


def read_onnx(path: str | os.PathLike[str], *, external_data: bool = True) -> onnx.ModelProto:
    """The ONNX file at `path` (a regular file, or a link to one), its external data loaded
    from beside it when `external_data`."""
    p = Path(path)
    try:
        with open_regular(p, what="ONNX file", limit=MAX_PROTO, error=OnnxLoadError) as fh:
            proto = onnx.load(fh, load_external_data=False)
    except OnnxLoadError:
        raise
    except Exception as exc:  # protobuf DecodeError, OSError: the file changed under the run
        message = f"ONNX file {p}: not a readable ONNX protobuf ({first_line(exc)})"
        raise OnnxLoadError(message) from exc
    if external_data and _external_locations(proto):
        check_external(p, proto)
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(proto, str(p.parent))
    return proto


def check_external(path: str | os.PathLike[str], proto: onnx.ModelProto) -> None:
    """Every external-data file `proto` names beside `path` is a regular file (a FIFO or a
    device swapped in is one OnnxLoadError) before anything opens it by path (onnx, or ONNX
    Runtime building a session on a changed graph)."""
    folder = Path(path).parent
    for location in _external_locations(proto):
        where = PurePosixPath(location.replace("\\", "/"))
        if not where.is_absolute() and ".." not in where.parts:
            check_regular(folder / location, what="ONNX external data", error=OnnxLoadError)


def _external_locations(proto: onnx.ModelProto) -> list[str]:
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    found: dict[str, None] = {}
    for tensor in _get_all_tensors(proto):
        if uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if location:
                found[location] = None
    return list(found)
