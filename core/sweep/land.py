"""The driver writes a finished pair's files into DIR/NAME: the only writer of --out.

DIR/NAME is made a real folder first: a symbolic link or a file there is replaced, never
written through (`real_folder`). What an earlier run of the pair left there is removed first
(its report, record and log, the files its flags wrote then and those they write now, its
--repro folder), so nothing in the folder can be mistaken for this sweep's result; then
every returned file is written atomically (parity.files.atomic), the report last but the
record, which `--resume` trusts, is written by the driver after this. Returned names are
checked: a name with a folder in it lands only under an output folder the pair's flags asked
for (--repro DIR), never outside DIR/NAME.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from parity.errors import UsageError
from parity.files import strict_json
from parity.files.atomic import write_bytes
from parity.files.safe_read import read_bytes
from parity.sweep.execute import LOG, RECORD
from parity.sweep.plan import REPORT, PairJob

_MAX_RECORD = 1 << 20


def land(job: PairJob, files: Mapping[str, bytes]) -> Path:
    """Replace the pair's folder contents with `files`; OSError when the disk refuses."""
    folder = real_folder(Path(job.out_dir))
    remove_previous(job)
    allowed = {name for _, name in job.written} | {REPORT, LOG}
    for name in sorted(files, key=lambda n: n == REPORT):  # the report last
        target = _inside(folder, name, allowed)
        if target is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(target, files[name])
    return folder


def real_folder(folder: Path) -> Path:
    """`folder` as a real directory: a symbolic link there (to a folder or not) or any other
    non-folder is removed (the link itself, never what it points to) and a folder made in
    its place, so nothing is written through it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    folder.mkdir(exist_ok=True)
    if folder.is_symlink() or not folder.is_dir():  # swapped meanwhile: refuse
        raise UsageError(f"{folder}: not a folder the sweep made (replaced while it wrote?)")
    return folder


def _inside(folder: Path, name: str, allowed: set[str]) -> Path | None:
    """folder/name when `name` is one of the pair's outputs or lies in an output folder."""
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or pure.parts[0] not in allowed:
        return None
    return folder.joinpath(*pure.parts)


def remove_previous(job: PairJob) -> None:
    """Files an earlier run of this pair left: a crash now must not show the old report."""
    folder = Path(job.out_dir)
    names = {REPORT, RECORD, LOG} | {name for _, name in job.written}
    names |= set(_recorded(folder / RECORD))
    for name in names:
        _remove(folder / name)


def _recorded(record: Path) -> Iterable[str]:
    """The --html / --save-run names an earlier record of the pair lists."""
    try:
        raw = read_bytes(record, what="pair record", limit=_MAX_RECORD, error=UsageError)
        result = strict_json.loads(raw).get("result", {})
    except (UsageError, OSError, ValueError, AttributeError):
        return []
    found = [result.get(key) for key in ("html", "saved_run")] if isinstance(result, dict) else []
    return [n for n in found if isinstance(n, str) and n and PurePosixPath(n).name == n != ".."]


def _remove(path: Path) -> None:
    """A file or link is unlinked; a real folder (an old --repro DIR) is removed whole."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path)
    elif path.exists():  # a FIFO or socket where an output goes
        path.unlink(missing_ok=True)
