"""Uploaded files on disk: private to one session, written once per upload, gone with it.

Loaders take paths (a file's suffix says what it is), so an upload is written to disk. The
folder is made per session by tempfile (mode 0700, unpredictable name), a TemporaryDirectory
held in a session-scoped `st.cache_resource`: Streamlit releases it (and it is removed) when
the session disconnects, with no wait for a garbage collection, and its finalizer removes it
at exit. A session that reconnects gets a fresh folder; its uploads are written again on the
next rerun from the bytes Streamlit still holds. Each upload gets a fresh folder inside it,
keyed by the upload's file_id, so the bytes are written once per upload (never re-read or
hashed on a rerun), and nothing planted by another user, and no link, can stand in for a file.

Files uploaded together (an ONNX model and its external-data files, or a .zip of them) go
side by side into one fresh folder per set of file_ids (`upload_group`): written once,
re-used on reruns, removed when the widget's files change. A .zip is unpacked there by
`parity.load.unzip` (flat, bounded by the upload limit, no links); the zip itself is not stored.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from parity.dashboard import state
from parity.errors import InputError
from parity.files.atomic import write_bytes
from parity.load.unzip import extract_flat

PREFIX = "parity-uploads-"


@dataclass
class _SessionUploads:
    """This session's folder and, per widget slot, its uploads' paths by file_id."""

    folder: tempfile.TemporaryDirectory
    paths: dict[str, dict[str, Path]] = field(default_factory=dict)
    groups: dict[str, _Group] = field(default_factory=dict)


@dataclass(frozen=True)
class _Group:
    """Files uploaded together: their file_ids, their folder, its files, or why they failed."""

    file_ids: frozenset[str]
    folder: Path | None
    paths: tuple[Path, ...] = ()
    error: str | None = None


def _release(box: _SessionUploads) -> None:
    box.folder.cleanup()


@st.cache_resource(scope="session", on_release=_release, show_spinner=False)
def _session_box() -> _SessionUploads:
    return _SessionUploads(tempfile.TemporaryDirectory(prefix=PREFIX))


def _session_uploads() -> _SessionUploads:
    state.put(state.UPLOADS, True)
    return _session_box()


def upload_paths(slot: str, uploads: Iterable) -> tuple[Path, ...]:
    """Paths of the files now in one upload widget (`slot` names it); files the widget no
    longer holds are removed."""
    uploads = list(uploads)
    if not uploads and not state.get(state.UPLOADS):
        return ()  # the session's folder is made on its first upload
    box = _session_uploads()
    before = box.paths.get(slot, {})
    now: dict[str, Path] = {}
    for upload in uploads:
        path = before.pop(upload.file_id, None)
        now[upload.file_id] = path if path is not None and path.is_file() else _write(box, upload)
    for path in before.values():
        shutil.rmtree(path.parent, ignore_errors=True)
    box.paths[slot] = now
    return tuple(now.values())


def upload_path(slot: str, upload) -> Path | None:
    """`upload_paths` for a single-file widget (None when it is empty)."""
    paths = upload_paths(slot, [] if upload is None else [upload])
    return paths[0] if paths else None


def _write(box: _SessionUploads, upload) -> Path:
    folder = Path(tempfile.mkdtemp(dir=box.folder.name))  # 0700, fresh for this upload
    # exclusive, no-follow create of a temp file beside it, renamed into place
    return write_bytes(folder / _file_name(upload), upload.getbuffer())


def _file_name(upload) -> str:
    name = Path(str(upload.name).replace("\\", "/")).name
    return "upload" if name in ("", ".", "..") else name


def upload_group(slot: str, uploads: Iterable, *, max_bytes: int) -> tuple[Path, ...]:
    """The files now in one multi-file widget, side by side in one private folder, each
    .zip among them unpacked there (flat; at most `max_bytes` unpacked per zip).

    The same set of files (by file_id) gives the same folder on every rerun, nothing
    re-read; when the set changes the old folder is removed. Raises InputError (one line,
    remembered for the set: a bad zip is read once) when the files cannot be placed.
    """
    uploads = list(uploads)
    if not uploads and not state.get(state.UPLOADS):
        return ()
    box = _session_uploads()
    ids = frozenset(upload.file_id for upload in uploads)
    group = box.groups.get(slot)
    if group is None or group.file_ids != ids or _gone(group):
        if group is not None and group.folder is not None:
            shutil.rmtree(group.folder, ignore_errors=True)
        group = _place(box, ids, uploads, max_bytes) if uploads else _Group(ids, None)
        box.groups[slot] = group
    if group.error is not None:
        raise InputError(group.error)
    return group.paths


def _gone(group: _Group) -> bool:
    return group.folder is not None and not all(p.is_file() for p in group.paths)


def _place(box: _SessionUploads, ids: frozenset[str], uploads: list, max_bytes: int) -> _Group:
    folder = Path(tempfile.mkdtemp(dir=box.folder.name))  # 0700, fresh for this set
    zips = [u for u in uploads if _file_name(u).lower().endswith(".zip")]
    try:
        paths: list[Path] = []
        for upload in uploads:
            if upload in zips:
                continue
            name = _file_name(upload)
            if (folder / name).exists():
                raise InputError(f"two uploaded files are named {name!r}: upload one of them")
            try:
                paths.append(write_bytes(folder / name, upload.getbuffer()))
            except OSError as exc:
                raise InputError(f"cannot store the upload {name!r}: {exc.strerror}") from exc
        for upload in zips:
            upload.seek(0)
            paths += extract_flat(upload, folder, max_bytes=max_bytes, shown=_file_name(upload))
    except (InputError, OSError) as exc:  # OSError: a full disk while unpacking
        shutil.rmtree(folder, ignore_errors=True)
        why = exc.message if isinstance(exc, InputError) else f"cannot store the uploads: {exc}"
        return _Group(ids, None, error=why)
    return _Group(ids, folder, tuple(paths))


def upload_onnx(slot: str, uploads: Iterable, *, max_bytes: int) -> Path | None:
    """The one .onnx file among files uploaded together (`upload_group`), its external-data
    files beside it; None when the widget is empty. Raises InputError (one line) when there
    is no .onnx among them, or more than one."""
    uploads = list(uploads)
    paths = upload_group(slot, uploads, max_bytes=max_bytes)
    if not uploads:
        return None
    models = [p for p in paths if p.suffix.lower() == ".onnx"]
    if len(models) == 1:
        return models[0]
    if not models:
        said = _names([_file_name(u) for u in uploads])
        if any(p.name not in {_file_name(u) for u in uploads} for p in paths):
            said += f"; unpacked: {_names([p.name for p in paths])}"
        raise InputError(f"no .onnx file among the uploaded files: {said}")
    raise InputError(
        f"{len(models)} .onnx files among the uploaded files ({_names([p.name for p in models])}): "
        "upload one model (and its data files); compare several with the uploader below"
    )


def _names(names: list[str], *, most: int = 8) -> str:
    shown = ", ".join(names[:most]) or "nothing"
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def shown_path(path: str) -> str:
    """How a page names a file: an upload by its file name (its private folder is of no use
    to the user), any other path or spec (demo:cnn, hf:DIR) as it is."""
    uploaded = bool(state.get(state.UPLOADS) and path)
    if uploaded and Path(path).is_relative_to(_session_box().folder.name):
        return Path(path).name
    return path
