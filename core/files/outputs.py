"""Every file a run writes, checked together before the run: each one is writable (a regular
file or nothing: `atomic.check_writable`), none is one of the run's inputs (`--json
model.onnx` would replace the model it judged), and no two name one file (`--json same.out
--html same.out`: one would replace the other). A `--repro DIR` counts by the files it
writes there, and a link in it that leads elsewhere is refused.

Contract:
Output(what, path, flag)         a file the run writes ("JSON report", "out.json", "--json")
Input(flag, path)                a file (or an hf: folder) the run reads
check_run_files(outputs, inputs, repro=None, repro_flag="--repro") -> None   WriteError or
    UsageError (one line) for the first problem
repro_names(folder) -> tuple[Path, ...]   the files a repro folder is made of
check_repro_folder(folder, what) -> None  writable, its fixed files replaceable, no link
clear_stale_repro(folder) -> None         test_data_set_* files a new repro does not write
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from parity.errors import UsageError, WriteError
from parity.files.atomic import (
    check_folder_writable,
    check_writable,
    refuse_special,
    same_file,
)

REPRO_MODEL, REPRO_DATA = "model.onnx", "test_data_set_0"
REPRO_FILES = (REPRO_MODEL, "repro.py", "README.md")
"""The files `parity.layers.repro` writes at the top of its folder (and REPRO_DATA/*.pb)."""


@dataclass(frozen=True)
class Output:
    what: str  # "JSON report"
    path: str
    flag: str  # "--json"


@dataclass(frozen=True)
class Input:
    flag: str  # "--onnx"
    path: str


def _inside(path: str, folder: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _clash(output: Output, source: Input) -> bool:
    """Whether writing `output` would replace what `source` names."""
    if source.flag == "--model" and source.path.startswith("hf:"):
        folder = source.path.removeprefix("hf:")  # its files: never replaced by an output
        there = os.path.exists(output.path)
        return there and os.path.isdir(folder) and _inside(output.path, folder)
    path = source.path
    if source.flag == "--model" and ":" in path and not os.path.exists(path):
        path = path.rsplit(":", 1)[0]  # FILE.py:CALLABLE: the file (demo:NAME names none)
        if not path.endswith(".py"):
            return False
    return same_file(output.path, path)


def check_run_files(
    outputs: Sequence[Output],
    inputs: Iterable[Input],
    repro: str | None = None,
    repro_flag: str = "--repro",
) -> None:
    """Refuse, before the run, outputs that cannot be written, replace an input or another
    output (a repro folder's files included)."""
    inputs = [i for i in inputs if i.path]
    for out in outputs:
        check_writable(out.path, out.what)
    if repro is not None:
        check_repro_folder(repro, "repro folder")
    written = list(outputs)
    if repro is not None:
        written += [Output("repro file", str(p), repro_flag) for p in repro_names(repro)]
    for out in written:
        for source in inputs:
            if _clash(out, source):
                raise UsageError(
                    f"{out.flag} {out.path} is also {source.flag} {source.path}: writing it "
                    "would replace a file this run reads; name another one"
                )
    for i, out in enumerate(written):
        for other in written[i + 1 :]:
            if same_file(out.path, other.path):
                raise UsageError(
                    f"{other.flag} {other.path} is also {out.flag} {out.path}: one would "
                    "replace the other; give each output its own file"
                )
    if repro is not None:
        for source in inputs:  # a file the run reads inside the repro's data folder
            if os.path.isfile(source.path) and _inside(source.path, str(Path(repro) / REPRO_DATA)):
                raise UsageError(
                    f"{repro_flag} {repro} would replace {source.flag} {source.path} (its "
                    f"{REPRO_DATA} folder is rewritten); name another folder"
                )


def repro_names(folder: str | os.PathLike[str]) -> tuple[Path, ...]:
    root = Path(folder)
    return tuple(root / name for name in REPRO_FILES)


def check_repro_folder(folder: str | os.PathLike[str], what: str) -> None:
    """`check_folder_writable`, and: its fixed files are regular files or nothing, and its
    data folder is a real folder inside it (a link to elsewhere would be written through)."""
    check_folder_writable(folder, what)
    root = Path(folder)
    for path in repro_names(root):
        refuse_special(path, what.replace("folder", "file"))
    data = root / REPRO_DATA
    if data.is_symlink():
        raise WriteError(
            f"cannot write {what} {root}: {data} is a link to {os.readlink(data)}; Parity "
            "writes only inside the folder",
            path=str(data),
        )
    if data.exists() and not data.is_dir():
        raise WriteError(f"cannot write {what} {root}: {data} is not a folder", path=str(data))
    for stale in _stale_data_dirs(root):
        if stale.is_symlink():
            raise WriteError(
                f"cannot write {what} {root}: {stale} is a link; Parity writes only inside "
                "the folder",
                path=str(stale),
            )


def _stale_data_dirs(root: Path) -> list[Path]:
    try:
        return [p for p in root.glob("test_data_set_*") if p.name != REPRO_DATA]
    except OSError:
        return []


def clear_stale_repro(folder: str | os.PathLike[str], keep: Iterable[str]) -> None:
    """Remove the `.pb` files of an earlier repro that the new one does not write (its
    `repro.py` reads every input_K.pb there), and other test_data_set_* folders' `.pb` files
    (then the folder, if empty). Nothing through a link; nothing but `.pb` files."""
    root = Path(folder)
    kept = {os.path.normpath(k) for k in keep}
    for data in [root / REPRO_DATA, *_stale_data_dirs(root)]:
        if data.is_symlink() or not data.is_dir():
            continue
        for pb in data.glob("*.pb"):
            rel = os.path.normpath(os.path.relpath(pb, root))
            if rel not in kept and not pb.is_symlink() and pb.is_file():
                with suppress(OSError):
                    pb.unlink()
        if data.name != REPRO_DATA:
            with suppress(OSError):
                data.rmdir()
