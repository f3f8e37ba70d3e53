"""Uploaded files on disk: private to one session, written once per upload, gone with it.

Loaders take paths (a file's suffix says what it is), so an upload is written to disk. The
folder is made per session by tempfile (mode 0700, unpredictable name) and held in
st.session_state as a TemporaryDirectory: its finalizer removes it when Streamlit drops the
session, and at exit. Each upload gets a fresh folder inside it, keyed by the upload's
file_id, so the bytes are written once per upload (never re-read or hashed on a rerun), and
nothing planted by another user, and no link, can stand in for a file.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from core.atomic import write_bytes

SESSION_KEY = "parity_uploads"
PREFIX = "parity-uploads-"


@dataclass
class _SessionUploads:
    """This session's folder and, per widget slot, its uploads' paths by file_id."""

    folder: tempfile.TemporaryDirectory
    paths: dict[str, dict[str, Path]] = field(default_factory=dict)


def _session_uploads() -> _SessionUploads:
    box = st.session_state.get(SESSION_KEY)
    if box is None:
        box = _SessionUploads(tempfile.TemporaryDirectory(prefix=PREFIX))
        st.session_state[SESSION_KEY] = box
    return box


def upload_paths(slot: str, uploads: Iterable) -> tuple[Path, ...]:
    """Paths of the files now in one upload widget (`slot` names it); files the widget no
    longer holds are removed."""
    uploads = list(uploads)
    if not uploads and not st.session_state.get(SESSION_KEY):
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
    name = Path(upload.name).name
    if name in ("", ".", ".."):
        name = "upload"
    # exclusive, no-follow create of a temp file beside it, renamed into place
    return write_bytes(folder / name, upload.getbuffer())
