"""Files a Ray task needs, where it runs, with no filesystem shared with the driver: the
driver reads each file and puts each distinct content into Ray's object store once
(`Shipper`, keyed by SHA-256); the task gets the references and writes the files into a
private folder (`unpack`) at their relative paths, so a factory still imports its neighbours
(`beside_factory`) and an ONNX file finds its external data (`external_data`). Used by a
sweep's pairs (parity.sweep.delivery) and by a data run on Ray (parity.sources.data_ray).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from parity.errors import UsageError
from parity.files.safe_read import read_bytes

MAX_FILE = 32 << 30
"""One input file shipped or fetched: past this, it is not a model file."""
MAX_FOLDER_FILES = 10_000
"""Files in one shipped folder (hf:DIR) or beside one factory file."""
BESIDE_LIMIT = 256 << 20
"""A file beside a factory larger than this is not shipped with it (name it with a flag)."""
NOT_BESIDE = frozenset({".onnx", ".onnx_data", ".data"})


@dataclass(frozen=True)
class Shipped:
    """One file a task writes into its folder: `content` is an object reference."""

    rel: str
    sha256: str
    size: int
    content: Any


@dataclass(frozen=True)
class Bundle:
    files: tuple[Shipped, ...]
    moved: tuple[tuple[int, str], ...]
    """args index -> the input's path in the task's folder (a sweep's pair)."""

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class ContentStore:
    """Each distinct content put once per run, a sweep or a data run (the driver owns the
    objects, so they outlive a lost worker node and serve a retry); `put` is ray.put."""

    def __init__(self, put: Callable[[bytes], Any]) -> None:
        self.put = put
        self.refs: dict[str, Any] = {}
        self.bytes_put = 0
        self.files_put = 0

    def ship(self, source: Path, rel: str, pin: str | None = None) -> Shipped:
        """`source` as the file `rel` of the task's folder (UsageError: unreadable, or not
        its `pin`)."""
        data = read_bytes(source, what="input file", limit=MAX_FILE, error=UsageError)
        digest = hashlib.sha256(data).hexdigest()
        if pin and digest != pin:
            raise UsageError(f"{source}: its SHA-256 is {digest}, the manifest pins {pin}")
        if digest not in self.refs:
            self.refs[digest] = self.put(data)
            self.bytes_put += len(data)
            self.files_put += 1
        return Shipped(rel, digest, len(data), self.refs[digest])


def beside_factory(path: Path) -> list[Path]:
    """What a factory file may import or open beside itself: the files in its folder (ONNX
    files and files over BESIDE_LIMIT left: ONNX files travel as --onnx), and the .py files
    of the packages there (sub-folders with an __init__.py)."""
    folder = path.parent
    found = [
        p
        for p in sorted(folder.iterdir())
        if p != path and p.is_file() and not p.is_symlink()
        and p.suffix not in NOT_BESIDE and p.stat().st_size <= BESIDE_LIMIT
    ]  # fmt: skip
    for init in sorted(folder.glob("*/**/__init__.py")):
        found += [p for p in sorted(init.parent.glob("*.py")) if p.is_file() and not p.is_symlink()]
    bounded(found, folder)
    return list(dict.fromkeys(found))


def bounded(found: list[Path], where: Path) -> None:
    if len(found) > MAX_FOLDER_FILES:
        raise UsageError(f"{where}: more than {MAX_FOLDER_FILES} files to ship to a Ray worker")


def external_data(path: Path) -> list[str]:
    """The external-data files an ONNX file names beside itself (the loader refuses others)."""
    import onnx
    from onnx import external_data_helper as edh

    from parity.files.safe_read import open_regular

    try:
        with open_regular(path, what="ONNX file", limit=2 << 30, error=UsageError) as fh:
            proto = onnx.load(fh, load_external_data=False)
    except UsageError:
        raise
    except Exception:  # not an ONNX file: the pair's own run says so, in its report
        return []
    found: dict[str, None] = {}
    for tensor in edh._get_all_tensors(proto):
        if edh.uses_external_data(tensor):
            loc = next((e.value for e in tensor.external_data if e.key == "location"), "")
            where = PurePosixPath(loc.replace("\\", "/"))
            inside = loc and not where.is_absolute() and ".." not in where.parts
            if inside and (path.parent / loc).is_file():
                found[str(where)] = None
    return list(found)


def unpack(bundle: Bundle, folder: Path, get: Callable[[Any], bytes]) -> dict[int, str]:
    """Write the bundle's files into `folder`; args index -> path, relative to `folder`."""
    for shipped in bundle.files:
        target = folder / shipped.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(get(shipped.content))
    return dict(bundle.moved)
