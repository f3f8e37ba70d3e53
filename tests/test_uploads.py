"""parity.dashboard.uploads' groups: files uploaded together, side by side, once per set, gone with
it.

Streamlit's session state in bare mode (no server), where a session-scoped cache cannot be
read: each test's session folder is made once by the test (its release when a session
disconnects is tested in a real browser, test_browser_security.py). The uploads are BytesIO
objects with a name and a file_id, as Streamlit's UploadedFile is.
"""

from __future__ import annotations

import functools
import io
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st

from parity.dashboard import uploads
from parity.dashboard.state import UPLOADS as SESSION_KEY
from parity.dashboard.uploads import shown_path, upload_group, upload_onnx
from parity.errors import InputError

MB = 1 << 20


class Upload(io.BytesIO):
    def __init__(self, name: str, data: bytes, file_id: str | None = None) -> None:
        super().__init__(data)
        self.name = name
        self.file_id = file_id or f"id-{name}"
        self.reads = 0

    def getbuffer(self):
        self.reads += 1
        return super().getbuffer()

    def seek(self, *args):
        self.reads += 1
        return super().seek(*args)


def zipped(name: str, members: dict[str, bytes]) -> Upload:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
    return Upload(name, buffer.getvalue())


@pytest.fixture(autouse=True)
def session(tmp_path, monkeypatch) -> Iterator[Path]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    box = functools.cache(uploads._session_box.__wrapped__)
    monkeypatch.setattr(uploads, "_session_box", box)
    st.session_state.pop(SESSION_KEY, None)
    yield tmp_path
    if st.session_state.pop(SESSION_KEY, None):
        box().folder.cleanup()


def test_files_uploaded_together_sit_side_by_side_once_per_set(session):
    model, data = Upload("model.onnx", b"graph"), Upload("model.onnx.data", b"weights")
    first = upload_group("onnx", [model, data], max_bytes=MB)
    assert [p.name for p in first] == ["model.onnx", "model.onnx.data"]
    folder = first[0].parent
    assert first[1].parent == folder and folder.parent.name.startswith(uploads.PREFIX)
    assert folder.stat().st_mode & 0o777 == 0o700
    stamp = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in first]
    reads = model.reads + data.reads

    again = upload_group("onnx", [data, model], max_bytes=MB)  # a rerun: same set of ids
    assert again == first
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in again] == stamp
    assert model.reads + data.reads == reads  # not read again

    other = Upload("model.onnx", b"graph 2", file_id="id-2")
    now = upload_group("onnx", [other, data], max_bytes=MB)
    assert now[0].parent != folder and not folder.exists()  # the old set's folder is gone
    assert now[0].read_bytes() == b"graph 2"
    assert upload_group("onnx", [], max_bytes=MB) == ()
    assert not now[0].parent.exists()


def test_a_zip_is_unpacked_flat_and_its_error_is_said_once(session):
    archive = zipped("export.zip", {"export/model.onnx": b"g", "export/model.onnx.data": b"w"})
    path = upload_onnx("onnx", [archive], max_bytes=MB)
    assert path is not None and path.name == "model.onnx"
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert shown_path(str(path)) == "model.onnx" and shown_path("/x/y.onnx") == "/x/y.onnx"

    bad = zipped("bad.zip", {"a/x.data": b"1", "b/x.data": b"2"})
    reads = []
    for _ in range(2):
        with pytest.raises(InputError, match="bad.zip: members 'a/x.data' and 'b/x.data'"):
            upload_group("onnx", [bad], max_bytes=MB)
        reads.append(bad.reads)
    assert reads[0] > 0 and reads[1] == reads[0]  # remembered for this set, not re-read
    assert not path.parent.exists()
    (session_folder,) = session.glob(f"{uploads.PREFIX}*")
    assert list(session_folder.iterdir()) == []  # nothing left of the refused zip


def test_exactly_one_onnx_file_is_wanted(session):
    with pytest.raises(InputError) as info:
        upload_onnx("onnx", [Upload("model.onnx.data", b"w")], max_bytes=MB)
    assert str(info.value) == "no .onnx file among the uploaded files: model.onnx.data"
    with pytest.raises(InputError) as info:
        upload_onnx("onnx", [zipped("w.zip", {"w/a.data": b"1"})], max_bytes=MB)
    assert str(info.value) == "no .onnx file among the uploaded files: w.zip; unpacked: a.data"
    with pytest.raises(InputError) as info:
        upload_onnx("onnx", [Upload("a.onnx", b"1"), Upload("b.onnx", b"2")], max_bytes=MB)
    assert str(info.value).startswith(
        "2 .onnx files among the uploaded files (a.onnx, b.onnx): upload one model (and its "
        "data files)"
    )
    assert upload_onnx("onnx", [], max_bytes=MB) is None
