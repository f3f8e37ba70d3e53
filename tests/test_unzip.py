"""parity.load.unzip: an uploaded .zip unpacked flat, refusing what could escape, lie or overflow.

Real zips made with zipfile, some patched byte by byte where a hostile one would lie.
"""

from __future__ import annotations

import io
import stat
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from parity.errors import InputError
from parity.load.unzip import extract_flat

MB = 1 << 20


def make_zip(path: Path, members: dict[str, bytes], *, stored: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            if name.endswith("/"):
                zf.writestr(zipfile.ZipInfo(name), b"")
            else:
                kind = zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED
                zf.writestr(name, data, compress_type=kind)
    return path


def everything_in(folder: Path) -> list[str]:
    """Every entry in the folder, hidden temp files included."""
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def test_a_flat_zip_is_unpacked_side_by_side(tmp_path, dest):
    data = bytes(range(256)) * 400
    archive = make_zip(
        tmp_path / "upload.zip",
        {"model.onnx": b"graph", "model.onnx.data": data},
        stored=("model.onnx",),
    )
    paths = extract_flat(archive, dest, max_bytes=MB)
    assert [p.name for p in paths] == ["model.onnx", "model.onnx.data"]
    assert (dest / "model.onnx").read_bytes() == b"graph"
    assert (dest / "model.onnx.data").read_bytes() == data
    assert everything_in(dest) == ["model.onnx", "model.onnx.data"]
    assert stat.S_IMODE((dest / "model.onnx").stat().st_mode) & 0o077 == 0  # private


def test_a_zip_of_a_folder_is_flattened_to_base_names(tmp_path, dest):
    archive = make_zip(
        tmp_path / "export.zip",
        {
            "export/": b"",
            "export/model.onnx": b"graph",
            "export/weights/model.onnx.data": b"w" * 1000,
            "__MACOSX/export/._model.onnx": b"resource fork",
        },
    )
    with open(archive, "rb") as fp:  # a file object, as an upload is
        extract_flat(fp, dest, max_bytes=MB, shown="export.zip")
    assert everything_in(dest) == ["model.onnx", "model.onnx.data"]
    assert (dest / "model.onnx.data").read_bytes() == b"w" * 1000


def test_a_symbolic_link_member_is_refused_and_nothing_is_written(tmp_path, dest):
    archive = tmp_path / "upload.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a/model.onnx", b"graph")
        link = zipfile.ZipInfo("a/x.data")
        link.create_system = 3  # unix
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(InputError) as info:
        extract_flat(archive, dest, max_bytes=MB)
    assert str(info.value) == "upload.zip: member 'a/x.data' is a symbolic link"
    assert everything_in(dest) == []


def test_two_members_with_one_base_name_are_refused(tmp_path, dest):
    archive = make_zip(tmp_path / "upload.zip", {"a/x.data": b"1", "b/x.data": b"2"})
    with pytest.raises(InputError, match=r"members 'a/x\.data' and 'b/x\.data' have the same"):
        extract_flat(archive, dest, max_bytes=MB)
    assert everything_in(dest) == []


def test_a_member_named_like_a_file_already_uploaded_is_refused(tmp_path, dest):
    (dest / "model.onnx").write_bytes(b"the uploaded one")
    archive = make_zip(tmp_path / "upload.zip", {"model.onnx": b"another"})
    with pytest.raises(InputError, match="same name as a file uploaded with it"):
        extract_flat(archive, dest, max_bytes=MB)
    assert (dest / "model.onnx").read_bytes() == b"the uploaded one"


def test_too_many_members_are_refused(tmp_path, dest):
    archive = make_zip(tmp_path / "many.zip", {f"f{i}": b"" for i in range(1001)})
    with pytest.raises(InputError, match="many.zip: more than 1,000 members"):
        extract_flat(archive, dest, max_bytes=MB)
    small = make_zip(tmp_path / "six.zip", {f"f{i}": b"x" for i in range(6)})
    with pytest.raises(InputError, match="six.zip: more than 5 members"):
        extract_flat(small, dest, max_bytes=MB, max_members=5)
    assert everything_in(dest) == []


def test_declared_sizes_over_the_cap_are_refused_before_writing(tmp_path, dest):
    archive = make_zip(tmp_path / "upload.zip", {"a": b"x" * 600, "b": b"y" * 600})
    with pytest.raises(InputError, match="upload.zip: its files hold more than 1,000 bytes"):
        extract_flat(archive, dest, max_bytes=1000)
    assert everything_in(dest) == []


def _patch_sizes(archive: Path, *, file_size: int, crc: int) -> None:
    """Make the one member's local and central headers claim `file_size` and `crc`."""
    with zipfile.ZipFile(archive) as zf:
        (info,) = zf.infolist()
        central = zf.start_dir
    raw = bytearray(archive.read_bytes())
    assert raw[info.header_offset : info.header_offset + 4] == b"PK\x03\x04"
    assert raw[central : central + 4] == b"PK\x01\x02"
    struct.pack_into("<L", raw, info.header_offset + 14, crc)
    struct.pack_into("<L", raw, info.header_offset + 22, file_size)
    struct.pack_into("<L", raw, central + 16, crc)
    struct.pack_into("<L", raw, central + 24, file_size)
    archive.write_bytes(bytes(raw))


def test_a_member_larger_than_its_header_says_is_refused_while_read(tmp_path, dest):
    real = b"\0" * 50_000  # deflates to ~100 bytes: a small bomb
    archive = make_zip(tmp_path / "upload.zip", {"big.data": real})
    _patch_sizes(archive, file_size=100, crc=zlib.crc32(real[:100]))
    # the lie holds up for zipfile itself: it stops at the header's size, CRC and all
    with zipfile.ZipFile(archive) as zf:
        assert zf.read("big.data") == real[:100]
    with pytest.raises(InputError) as info:
        extract_flat(archive, dest, max_bytes=1000)
    assert str(info.value) == (
        "upload.zip: member 'big.data' holds more than the 100 bytes its header says"
    )
    assert everything_in(dest) == []


def test_a_damaged_member_leaves_nothing_half_written(tmp_path, dest):
    archive = make_zip(tmp_path / "upload.zip", {"model.onnx": b"graph" * 100, "z.data": b"z"})
    raw = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        second = zf.getinfo("z.data")
        central = zf.start_dir
    # the second member's CRC, in its central-directory entry (found by its name)
    entry = raw.index(b"PK\x01\x02", central + 1)
    assert raw[entry + 46 : entry + 52] == b"z.data"
    struct.pack_into("<L", raw, entry + 16, second.CRC ^ 0xFFFF)
    archive.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"member 'z\.data' is damaged \(CRC mismatch\)"):
        extract_flat(archive, dest, max_bytes=MB)
    assert everything_in(dest) == []  # the first member, written whole, is gone too


def test_not_a_zip_is_one_line(tmp_path, dest):
    bad = tmp_path / "upload.zip"
    bad.write_bytes(b"not a zip at all" * 10)
    with pytest.raises(InputError, match=r"^upload\.zip: not a zip file"):
        extract_flat(bad, dest, max_bytes=MB)


def test_a_big_member_is_streamed_not_read_whole(tmp_path, dest):
    size = 48 * MB
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        zf.open("model.onnx.data", "w") as out,
    ):
        for _ in range(size // MB):
            out.write(b"\1" * MB)
    buffer.seek(0)
    tracemalloc.start()
    try:
        extract_flat(buffer, dest, max_bytes=size)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (dest / "model.onnx.data").stat().st_size == size
    assert peak < 8 * MB, peak
