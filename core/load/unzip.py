"""Unpack an uploaded .zip flat into one folder, safely: a zip is untrusted input.

Members are placed side by side under their base names (a zip of a folder is fine), so no
member path can reach outside the folder. Refused, before anything is written: a symbolic
link or other non-regular member, two members with the same base name (or one named like a
file already in the folder), more than `max_members` members, encrypted members, compression
other than stored or deflated, declared sizes over `max_bytes`, and a central directory too
large for that many members (the zip's headers are parsed into memory). Then each member is
streamed (never read whole into memory) through its own decompressor while its real size is
counted: a member that yields more than its header says, or more than `max_bytes` in all, is
refused as it is read, so a lying header cannot make it larger. Each file is created with an
exclusive, no-follow open of a temp file beside it, renamed into place when complete, and
its CRC checked. On any error every file this call wrote is removed: nothing half-written.
macOS's `__MACOSX/` resource-fork members are skipped.

Every refusal is one `InputError` line, what and where: ``upload.zip: member 'a/x.data' is a
symbolic link``.

Contract:
extract_flat(archive, dest, *, max_bytes, max_members=MAX_MEMBERS, shown=None) -> list[Path]
    archive: a path or a seekable binary file; dest: an existing folder; `shown` names the
    archive in messages (default: its file name). Returns the written paths, in zip order.
"""

from __future__ import annotations

import os
import stat
import struct
import zipfile
import zlib
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from parity.errors import InputError, first_line
from parity.files.atomic import atomic_path, open_temp

MAX_MEMBERS = 1000
_CD_BYTES_PER_MEMBER = 1024  # a generous central-directory entry: 46 bytes + name + extras
_CHUNK = 1 << 20
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zipfile's local file header, 30 bytes
_LOCAL_MAGIC = b"PK\x03\x04"
_SKIPPED_PREFIX = "__MACOSX/"


def extract_flat(
    archive: str | os.PathLike[str] | BinaryIO,
    dest: str | os.PathLike[str],
    *,
    max_bytes: int,
    max_members: int = MAX_MEMBERS,
    shown: str | None = None,
) -> list[Path]:
    """Unpack `archive`'s files side by side into `dest` (see the module docstring)."""
    if isinstance(archive, (str, os.PathLike)):
        shown = shown or Path(archive).name
        from parity.files.safe_read import open_regular

        try:
            with open_regular(archive, what="", limit=None, error=InputError) as fp:
                return _extract(fp, Path(dest), max_bytes, max_members, shown)
        except OSError as exc:
            raise InputError(f"{shown}: cannot read it ({exc.strerror or exc})") from exc
    return _extract(archive, Path(dest), max_bytes, max_members, shown or "upload.zip")


def _extract(fp: BinaryIO, dest: Path, max_bytes: int, max_members: int, shown: str) -> list[Path]:
    _check_directory_size(fp, max_members, shown)
    try:
        with zipfile.ZipFile(fp) as zf:
            members = _plan(zf.infolist(), dest, max_bytes, max_members, shown)
    except (zipfile.BadZipFile, ValueError, EOFError, struct.error) as exc:  # damaged headers
        raise InputError(f"{shown}: not a readable zip file ({first_line(exc)})") from exc
    written: list[Path] = []
    budget = [max_bytes, max_bytes]  # bytes left, the cap
    try:
        for info, name in members:
            target = dest / name
            with atomic_path(target, mode=0o600) as tmp:
                _write_member(fp, info, tmp, budget, shown)
            written.append(target)
    except BaseException:
        for path in written:
            with suppress(OSError):
                path.unlink()
        raise
    return written


def _check_directory_size(fp: BinaryIO, max_members: int, shown: str) -> None:
    """Refuse, before zipfile parses the central directory into memory, one too big to hold
    `max_members` entries (its size and count are read from the end record)."""
    try:
        end = zipfile._EndRecData(fp)  # type: ignore[attr-defined]  # handles zip64 too
    except (AttributeError, OSError):  # another Python's zipfile: it refuses what it can
        return
    if end is None:
        raise InputError(f"{shown}: not a zip file (no end-of-archive record)")
    count, size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]  # type: ignore[attr-defined]
    if count > max_members or size > max_members * _CD_BYTES_PER_MEMBER:
        raise InputError(f"{shown}: more than {max_members:,} members; upload fewer files")


def _plan(
    infos: list[zipfile.ZipInfo], dest: Path, max_bytes: int, max_members: int, shown: str
) -> list[tuple[zipfile.ZipInfo, str]]:
    """The (member, base name) pairs to write, after every check that headers allow."""
    if len(infos) > max_members:
        raise InputError(f"{shown}: more than {max_members:,} members; upload fewer files")
    by_name: dict[str, str] = {}
    members: list[tuple[zipfile.ZipInfo, str]] = []
    declared = 0
    for info in infos:
        member = info.filename
        path = member.replace("\\", "/")
        if path.startswith(_SKIPPED_PREFIX) or f"/{_SKIPPED_PREFIX}" in path:
            continue
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise InputError(f"{shown}: member {member!r} is a symbolic link")
        if info.is_dir() or path.endswith("/") or stat.S_ISDIR(mode):
            continue
        if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
            raise InputError(f"{shown}: member {member!r} is not a regular file")
        name = PurePosixPath(path).name
        if name in ("", ".", ".."):
            raise InputError(f"{shown}: member {member!r} has no file name")
        if name in by_name:
            raise InputError(
                f"{shown}: members {by_name[name]!r} and {member!r} have the same name "
                f"{name!r}; the files are placed side by side"
            )
        if os.path.lexists(dest / name):
            raise InputError(
                f"{shown}: member {member!r} has the same name as a file uploaded with it"
            )
        if info.flag_bits & 0x1:
            raise InputError(f"{shown}: member {member!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise InputError(
                f"{shown}: member {member!r} uses compression method {info.compress_type}; "
                "zip it with deflate (the usual) or no compression"
            )
        declared += info.file_size
        if declared > max_bytes:
            raise InputError(f"{shown}: its files hold more than {_mb(max_bytes)} unpacked")
        by_name[name] = member
        members.append((info, name))
    return members


def _write_member(
    fp: BinaryIO, info: zipfile.ZipInfo, tmp: Path, budget: list[int], shown: str
) -> None:
    """Stream one member into a new file at `tmp`, counting its real size against its
    header's and the archive's `budget` ([bytes left, cap]); its CRC is checked at the end."""
    member = info.filename
    fd = open_temp(tmp)  # made exclusively by atomic_path, never through a link
    size = 0
    crc = 0

    def emit(data: bytes) -> None:
        nonlocal size, crc
        if not data:
            return
        size += len(data)
        if size > info.file_size:
            raise InputError(
                f"{shown}: member {member!r} holds more than the {info.file_size:,} bytes "
                "its header says"
            )
        if len(data) > budget[0]:
            raise InputError(f"{shown}: its files hold more than {_mb(budget[1])} unpacked")
        budget[0] -= len(data)
        crc = zlib.crc32(data, crc)
        fh.write(data)

    with os.fdopen(fd, "wb") as fh:
        inflate = (
            zlib.decompressobj(-zlib.MAX_WBITS)
            if info.compress_type == zipfile.ZIP_DEFLATED
            else None
        )
        for raw in _raw_chunks(fp, info, shown):
            if inflate is None:
                emit(raw)
                continue
            pending = raw
            while pending:
                try:
                    emit(inflate.decompress(pending, _CHUNK))
                except zlib.error as exc:
                    raise InputError(f"{shown}: member {member!r} is damaged ({exc})") from exc
                pending = inflate.unconsumed_tail
        if inflate is not None:
            emit(inflate.flush())
            if not inflate.eof:
                raise InputError(f"{shown}: member {member!r} is cut short")
        if size != info.file_size:
            raise InputError(
                f"{shown}: member {member!r} holds {size:,} bytes, its header says "
                f"{info.file_size:,}"
            )
        if crc != info.CRC:
            raise InputError(f"{shown}: member {member!r} is damaged (CRC mismatch)")
        fh.flush()
        os.fsync(fh.fileno())


def _raw_chunks(fp: BinaryIO, info: zipfile.ZipInfo, shown: str):
    """The member's stored (compressed) bytes, `compress_size` of them, in chunks."""
    member = info.filename
    fp.seek(info.header_offset)
    header = fp.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_MAGIC:
        raise InputError(f"{shown}: member {member!r} has a damaged local header")
    fields = _LOCAL_HEADER.unpack(header)
    fp.seek(fields[10] + fields[11], os.SEEK_CUR)  # its name and extra field
    left = info.compress_size
    while left > 0:
        raw = fp.read(min(left, _CHUNK))
        if not raw:
            raise InputError(f"{shown}: member {member!r} is cut short")
        left -= len(raw)
        yield raw


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MB" if n >= 1 << 20 else f"{n:,} bytes"
