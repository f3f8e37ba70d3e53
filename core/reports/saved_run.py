"""Saved runs: one file that reopens a validation without torch, the model or the ONNX file.

This module is the container; what the manifest says of the run is parity.reports.codec's.

Format (``parity.run/1``), conventionally named ``NAME.parity.npz``: an uncompressed zip
that ``np.load(path, allow_pickle=False)`` can also read, holding

- ``manifest.json`` -- everything scalar: model and ONNX identity (with SHA-256 of the files
  when they existed at save time), versions, tolerances, signature, input-set metadata,
  each candidate with its comparisons' status and statistics, timings, provenance (kind,
  hashes, weights and reference files), an hf: run's summary and steps, and a table of
  members with the SHA-256, dtype and shape of each;
- one ``.npy`` member per array: ``inputs/S/K.npy`` (feed K of input set S), ``ref/S/K.npy``
  and ``onnx/S/K.npy`` (output K of set S on each side), ``exclude/S/K.npy`` (the
  exclusion mask of an output of set S: elements the verdict did not judge),
  ``profiles/C/K.npy`` (the re-judge profile of comparison C), ``layers/K/{ref,onnx}.npy``
  and ``layers/cN/K/...`` (kept layer values, the run's and candidate N's). User-chosen names
  live only in the manifest.

Why this shape: members are written by ``np.lib.format.write_array`` straight into the zip
(no second copy of a big output), stored uncompressed and 64-byte aligned, so reading maps
each big member into memory (``np.memmap`` at the member's data offset) instead of copying it.
Nothing is ever unpickled: object arrays are refused on both sides, and every member's
hash is checked against the manifest before use, so an altered file is refused.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import platform
import struct
import zipfile
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

import parity.files.strict_json as sj
from parity.errors import ParityError, SavedRunError
from parity.files.atomic import atomic_output
from parity.files.hashing import file_sha256
from parity.files.json_output import dumps
from parity.files.safe_read import open_regular
from parity.files.zip_bounds import check_zip_directory
from parity.limits.budget import MemoryBudget, read_npy_header
from parity.load.specs import demo_name
from parity.reports.codec import ArrayGet, run_from_json, run_to_json
from parity.results import SavedFrom, ValidationRun
from parity.version import __version__

SCHEMA = "parity.run/1"
MANIFEST = "manifest.json"

_ALIGN = 64  # npy data starts 64-byte aligned inside the file, as in a plain .npy
_ZIP64_EXTRA = 20  # zipfile appends this many bytes of zip64 extra when force_zip64=True
_PAD_ID = 0xD935  # extra-field id zipalign uses for padding; readers skip unknown ids
_MAX_MANIFEST = 64 << 20
_SMALL_MEMBER = 1 << 20  # below this a member is read into memory rather than mapped
_CHUNK = 4 << 20


# ---------------------------------------------------------------------------------------
# saving


def save_run(
    run: ValidationRun,
    path: str | Path,
    *,
    keep_outputs: bool = True,
) -> Path:
    """Write `run` to `path` (atomically: a half-written file never replaces a good one).

    `keep_outputs=False` leaves out the raw outputs (small file; no heatmaps on reopening).
    """
    path = Path(path)
    with (
        atomic_output(path, "saved run") as tmp,
        zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf,
    ):
        writer = _MemberWriter(zf)
        manifest = _manifest(run, writer, keep_outputs=keep_outputs)
        manifest["members"] = writer.members
        data = dumps(manifest, indent=1).encode("utf-8")
        zf.writestr(MANIFEST, data)
        zf.comment = _manifest_seal(data)
    return path


def _manifest_seal(manifest: bytes) -> bytes:
    """The zip comment that covers the manifest as the manifest's table covers each member."""
    return f"{SCHEMA} {MANIFEST} sha256 {hashlib.sha256(manifest).hexdigest()}".encode()


class _HashingWriter:
    """File-like that hashes what passes through, so hashing costs no second read."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._raw.write(data)


class _MemberWriter:
    def __init__(self, zf: zipfile.ZipFile) -> None:
        self._zf = zf
        self.members: dict[str, dict[str, Any]] = {}

    def add(self, name: str, array: np.ndarray, what: str) -> str:
        """Write `array` as member `name` (parity.reports.codec's ArrayPut)."""
        array = np.asanyarray(array)
        if array.dtype.hasobject or not getattr(type(array.dtype), "_legacy", True):
            raise SavedRunError(
                f"cannot save {what}: dtype {array.dtype} would need pickle; "
                "saved runs hold plain numeric arrays only"
            )
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        info.extra = self._padding(name)
        with self._zf.open(info, "w", force_zip64=True) as raw:
            out = _HashingWriter(raw)
            np.lib.format.write_array(out, array, allow_pickle=False)
        self.members[name] = {
            "sha256": out.sha256.hexdigest(),
            "dtype": np.lib.format.dtype_to_descr(array.dtype),
            "shape": [int(d) for d in array.shape],
            "bytes": out.size,
        }
        return name

    def _padding(self, name: str) -> bytes:
        """Extra field that puts the member's first byte on a 64-byte boundary."""
        start = self._zf.start_dir + 30 + len(name.encode()) + _ZIP64_EXTRA
        pad = (-(start + 4)) % _ALIGN
        return struct.pack("<HH", _PAD_ID, pad) + b"\0" * pad


def _manifest(run: ValidationRun, writer: _MemberWriter, *, keep_outputs: bool) -> dict[str, Any]:
    """The container's own fields around the run's JSON (parity.reports.codec)."""
    body = run_to_json(run, writer.add, keep_outputs=keep_outputs)
    return {
        "schema": SCHEMA,
        "saved_by": {
            "parity": __version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "identity": _identity(run),
        **body,
    }


def _identity(run: ValidationRun) -> dict[str, Any]:
    """What the run was made from, with content hashes of the files still on disk."""
    previous = run.saved.identity if run.saved is not None else None
    identity: dict[str, Any] = {}
    if isinstance(previous, Mapping) and (previous.get("model"), previous.get("onnx")) == (
        run.model,
        run.onnx,
    ):
        identity.update(previous)  # re-saving a reopened run keeps what was hashed then
    identity.update(model=run.model, onnx=run.onnx)
    onnx_file = Path(run.onnx) if run.onnx else None
    if onnx_file is not None and onnx_file.is_file():
        identity["onnx_sha256"] = _known_hash(run.provenance.onnx_sha256) or file_sha256(onnx_file)
        identity["onnx_bytes"] = onnx_file.stat().st_size
    model_file = _model_file(run.model)
    if model_file is not None:
        identity["model_file"] = str(model_file)
        identity["model_sha256"] = _known_hash(run.provenance.model_sha256) or file_sha256(
            model_file
        )
    provenance = run.provenance
    files = {"weights": provenance.weights_file, "reference_file": provenance.reference_file}
    for key, value in files.items():
        if value and Path(value).is_file():
            identity[key] = value
            identity[f"{key}_sha256"] = file_sha256(Path(value))
    return identity


def _known_hash(value: str | None) -> str | None:
    """A hash the run already computed while loading (saves re-reading a big file)."""
    return value if isinstance(value, str) and len(value) == 64 else None


def _model_file(spec: str) -> Path | None:
    if not spec or demo_name(spec) is not None:
        return None
    candidate = Path(spec)
    if candidate.is_file():
        return candidate
    head, sep, _ = spec.rpartition(":")
    if sep and head.endswith(".py") and Path(head).is_file():
        return Path(head)
    return None


# ---------------------------------------------------------------------------------------
# loading


@dataclass(frozen=True)
class _Member:
    name: str
    data_start: int  # first byte of the .npy member
    size: int


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest alone (cheap: no array is read or checked)."""
    path = Path(path)
    with _open_file(path) as fh, _open_zip(fh, path) as zf:
        return _read_manifest(zf, path)


def load_run(
    path: str | Path, *, verify: bool = True, budget: MemoryBudget | None = None
) -> ValidationRun:
    """Reopen a saved run. Big arrays come back memory-mapped (read-only), not copied.

    Every member's SHA-256 is checked against the manifest first (about 1 s per GB);
    `verify=False` skips that, for a file this process has just written. The members read
    into memory (the small ones) are checked against `budget` before any is read.
    """
    path = Path(path)
    with _open_file(path) as fh, _open_zip(fh, path) as zf:
        manifest = _read_manifest(zf, path, budget or MemoryBudget())
        members = _locate_members(zf, fh, manifest, path)
        (budget or MemoryBudget()).check(
            sum(m.size for m in members.values() if m.size < _SMALL_MEMBER),
            f"saved run {path} ({len(members)} arrays read into memory)",
            proceed="open a smaller run",
        )
        if verify:
            for member in members.values():
                _verify(fh, member, manifest["members"][member.name]["sha256"], path)

        def array(name: Any, where: str) -> np.ndarray:
            if not isinstance(name, str) or name not in members:
                raise sj.FieldError(f"{where}: {name!r} is not a member listed in the manifest")
            return _read_array(fh, members[name], path, manifest["members"][name])

        try:
            return _build_run(manifest, array, path)
        except sj.FieldError as exc:
            raise SavedRunError(f"{path}: malformed {MANIFEST}: {exc}") from exc
        except SavedRunError:
            raise
        except ParityError as exc:  # e.g. tolerances refused by their own strict parser
            raise SavedRunError(f"{path}: malformed {MANIFEST}: {exc.message}") from exc
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise SavedRunError(f"{path}: malformed {MANIFEST} ({exc!r})") from exc


def _open_file(path: Path) -> AbstractContextManager[io.BufferedReader]:
    """The saved run's file, if it is a regular one: a URL's `?run=/dev/zero` or a FIFO is
    refused in one line (parity.files.safe_read)."""
    if not os.path.lexists(path):
        raise SavedRunError(f"saved run {path} not found")
    return open_regular(path, what="saved run", limit=None, error=SavedRunError)


SAVED_RUN_MAX_MEMBERS = 200_000
"""The most arrays a saved run may list; its zip directory is bounded before it is parsed."""
MANIFEST_PARSE_FACTOR = 50
"""Bytes Python's json takes per byte of manifest it parses (a 63 MB manifest took 3.2 GB):
the manifest's size times this is checked against the memory budget before it is parsed."""


def _open_zip(fh: io.BufferedReader, path: Path) -> zipfile.ZipFile:
    try:
        check_zip_directory(
            fh, what="saved run", path=path, max_entries=SAVED_RUN_MAX_MEMBERS, error=SavedRunError
        )
        fh.seek(0)
        return zipfile.ZipFile(fh)
    except OSError as exc:
        raise SavedRunError(f"cannot read saved run {path}: {exc.strerror or exc}") from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError) as exc:
        raise SavedRunError(
            f"{path} is not a Parity saved run (not a readable zip: {exc})"
        ) from exc


def _read_manifest(
    zf: zipfile.ZipFile, path: Path, budget: MemoryBudget | None = None
) -> dict[str, Any]:
    try:
        info = zf.getinfo(MANIFEST)
    except KeyError as exc:
        raise SavedRunError(f"{path} is not a Parity saved run (no {MANIFEST} inside)") from exc
    if info.file_size > _MAX_MANIFEST:
        raise SavedRunError(f"{path}: {MANIFEST} is implausibly large ({info.file_size} bytes)")
    (budget or MemoryBudget()).check(  # parsing JSON takes ~50x its size: bounded first
        info.file_size * MANIFEST_PARSE_FACTOR,
        f"saved run {path} (parsing its {info.file_size:,}-byte {MANIFEST})",
        proceed="open a smaller run",
    )
    try:
        raw = zf.read(info)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise SavedRunError(f"{path}: {MANIFEST} cannot be read ({exc})") from exc
    if zf.comment != _manifest_seal(raw):
        _refuse_other_schema(raw, path)  # a newer Parity may seal its runs otherwise
        what = "has no manifest hash" if not zf.comment else "does not match its manifest hash"
        raise SavedRunError(
            f"{path}: {MANIFEST} {what} (the file was altered, damaged, or saved by an older "
            "Parity); refusing to open it"
        )
    try:
        manifest = sj.loads(raw)
    except sj.FieldError as exc:
        raise SavedRunError(f"{path}: {MANIFEST}: {exc}") from exc
    if not isinstance(manifest, dict) or "schema" not in manifest:
        raise SavedRunError(f"{path}: {MANIFEST} has no 'schema'; not a Parity saved run")
    if manifest["schema"] != SCHEMA:
        raise SavedRunError(
            f"{path}: saved-run schema {manifest['schema']!r} is not supported "
            f"(this Parity reads {SCHEMA})"
        )
    if not isinstance(manifest.get("members"), dict):
        raise SavedRunError(f"{path}: {MANIFEST} has no member table")
    return manifest


def _refuse_other_schema(raw: bytes, path: Path) -> None:
    """A manifest that names another saved-run schema is said to be that, not damage."""
    try:
        schema = sj.loads(raw).get("schema")
    except (sj.FieldError, AttributeError):
        return
    if isinstance(schema, str) and schema != SCHEMA and schema.startswith("parity.run/"):
        raise SavedRunError(
            f"{path}: saved-run schema {schema[:40]!r} is not supported (this Parity reads "
            f"{SCHEMA}; open it with the Parity that saved it, or a newer one)"
        )


def _locate_members(
    zf: zipfile.ZipFile, fh: io.BufferedReader, manifest: dict[str, Any], path: Path
) -> dict[str, _Member]:
    """Find each listed member's bytes in the file; refuse anything we would have to inflate."""
    file_size = os.fstat(fh.fileno()).st_size
    located = {}
    for name, meta in manifest["members"].items():
        if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str):
            raise SavedRunError(f"{path}: member {name!r} has no recorded hash in {MANIFEST}")
        try:
            info = zf.getinfo(name)
        except KeyError as exc:
            raise SavedRunError(f"{path}: member {name!r} listed in {MANIFEST} is missing") from exc
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            raise SavedRunError(
                f"{path}: member {name!r} is compressed or encrypted; saved runs store arrays "
                "uncompressed (was the file re-zipped?)"
            )
        fh.seek(info.header_offset)
        header = fh.read(30)
        if len(header) != 30 or header[:4] != b"PK\x03\x04":
            raise SavedRunError(f"{path}: member {name!r} has a damaged zip header")
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        if start + info.compress_size > file_size:
            raise SavedRunError(
                f"{path}: member {name!r} runs past the end of the file (truncated?)"
            )
        located[name] = _Member(name=name, data_start=start, size=info.compress_size)
    return located


def _verify(fh: io.BufferedReader, member: _Member, expected: str, path: Path) -> None:
    digest = hashlib.sha256()
    buffer = bytearray(min(_CHUNK, max(member.size, 1)))
    view = memoryview(buffer)
    fh.seek(member.data_start)
    left = member.size
    while left:
        n = fh.readinto(view[: min(left, len(buffer))])
        if not n:
            raise SavedRunError(f"{path}: member {member.name!r} is truncated")
        digest.update(view[:n])
        left -= n
    if digest.hexdigest() != expected:
        raise SavedRunError(
            f"{path}: member {member.name!r} does not match the hash in its manifest "
            "(the file was altered or damaged); refusing to open it"
        )


def _read_array(
    fh: io.BufferedReader, member: _Member, path: Path, listed: Mapping[str, Any]
) -> np.ndarray:
    """One .npy member, without pickle: mapped when big, read when small; its header must say
    the dtype and shape the manifest's table lists for it (`listed`), which readers trust."""
    fh.seek(member.data_start)
    try:
        shape, fortran, dtype = read_npy_header(fh)
    except ValueError as exc:
        raise SavedRunError(
            f"{path}: member {member.name!r} is not a valid .npy array ({exc})"
        ) from exc
    if dtype.kind not in "biufc" and not dtype.hasobject:  # text, bytes, records, dates
        raise SavedRunError(
            f"{path}: member {member.name!r} holds {dtype} values, not numbers; refusing it "
            "(saved runs hold arrays of numbers only)"
        )
    if dtype.hasobject:
        raise SavedRunError(
            f"{path}: member {member.name!r} holds Python objects ({dtype}) that would need "
            "pickle to load; refusing it (saved runs hold plain arrays only)"
        )
    said = (listed.get("dtype"), listed.get("shape"))
    if said != (np.lib.format.dtype_to_descr(dtype), [int(d) for d in shape]):
        raise SavedRunError(
            f"{path}: member {member.name!r} holds {dtype} {list(shape)}, but {MANIFEST} "
            f"lists it as {str(said[0])[:40]} {str(said[1])[:80]}; refusing it"
        )
    data_start = fh.tell()
    n_bytes = math.prod(shape) * dtype.itemsize
    if data_start + n_bytes != member.data_start + member.size:
        raise SavedRunError(
            f"{path}: member {member.name!r} holds {member.size} bytes, "
            f"but its header describes {dtype} {list(shape)}"
        )
    order: Literal["C", "F"] = "F" if fortran else "C"
    if n_bytes < _SMALL_MEMBER:
        data = fh.read(n_bytes)
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape, order=order)
    # mapped from the descriptor opened (and checked, and hashed) once, never the path again:
    # a file swapped since (for a FIFO, another run) is never what is read
    mapped = np.memmap(fh, dtype=dtype, mode="r", offset=data_start, shape=shape, order=order)
    return np.asarray(mapped)


def _build_run(manifest: dict[str, Any], array: ArrayGet, path: Path) -> ValidationRun:
    """The run (parity.reports.codec), with where and by whom it was saved."""
    m = manifest
    saved = SavedFrom(
        path=str(path),
        identity=sj.obj(sj.field(m, "identity", "manifest"), "identity"),
        saved_by=sj.obj(sj.field(m, "saved_by", "manifest"), "saved_by"),
        outputs_kept=sj.boolean(sj.field(m, "outputs_kept", "manifest"), "outputs_kept"),
    )
    return run_from_json(m, array, saved)
