"""One manifest pair -> the job an engine runs: its validate arguments, folder and resume key.

The key is a SHA-256 of what decides the pair's result: its arguments (the defaults'
included), the sweep's timeout, the versions of Parity and of the packages that compute the
numbers (as installed where the sweep runs), and the contents of the files it reads (a
directory, e.g. hf:DIR, by its listing: names, sizes, modification times). `--resume` skips
a pair whose record holds the same key.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from parity.errors import ParityError
from parity.files.hashing import file_sha256
from parity.sweep.manifest import (
    MODEL_FLAG,
    Manifest,
    PairSpec,
    flag_values,
    model_path,
)
from parity.version import __version__

REPORT = "report.json"
DECIDING_PACKAGES = ("torch", "onnxruntime", "onnxruntime-gpu", "onnx", "numpy", "transformers")
"""Distributions whose version is part of every resume key (those not installed are left out)."""
GPU_PROVIDERS = (
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
)
"""Execution providers that run on a GPU: Ray's "GPU" resource covers NVIDIA and AMD alike."""


@dataclass(frozen=True)
class PairJob:
    name: str
    args: tuple[str, ...]
    """validate's arguments, output files placed in out_dir, --json last."""
    cwd: str
    """The manifest's folder: relative input paths resolve here."""
    out_dir: str
    key: str
    timeout: float | None
    gpu_provider: str | None
    """The GPU execution provider the pair asks for (Ray reserves a GPU for it), if any."""
    written: tuple[tuple[str, str], ...] = ()
    """(flag, path in out_dir) of every file the pair's flags ask it to write."""

    @property
    def num_gpus(self) -> int:
        return 1 if self.gpu_provider else 0

    @property
    def report_path(self) -> Path:
        return Path(self.out_dir) / REPORT


def plan_jobs(manifest: Manifest, out: Path, *, timeout: float | None) -> tuple[PairJob, ...]:
    out = out.resolve()
    versions = installed_versions()
    return tuple(
        _plan(pair, manifest.root, out / pair.name, timeout, versions) for pair in manifest.pairs
    )


def _plan(
    pair: PairSpec, root: Path, out_dir: Path, timeout: float | None, versions: dict[str, str]
) -> PairJob:
    args = list(pair.args)
    written: list[tuple[str, str]] = []
    for fv in flag_values(pair.args, pair.flags):
        if fv.flag in pair.flags.writes:
            placed = str(out_dir / fv.value)
            args[fv.index] = f"{fv.flag}={placed}" if fv.inline else placed
            written.append((fv.flag, placed))
    args += ["--json", str(out_dir / REPORT)]
    return PairJob(
        name=pair.name,
        args=tuple(args),
        cwd=str(root),
        out_dir=str(out_dir),
        key=pair_key(pair, root, timeout, versions),
        timeout=timeout,
        gpu_provider=gpu_provider(pair.args),
        written=tuple(written),
    )


def installed_versions() -> dict[str, str]:
    """Parity's version and those of DECIDING_PACKAGES, read from metadata (nothing imported)."""
    found = {"parity": __version__}
    for dist in DECIDING_PACKAGES:
        with suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    return found


def pair_key(pair: PairSpec, root: Path, timeout: float | None, versions: dict[str, str]) -> str:
    files: list[list[str]] = []
    for fv in flag_values(pair.args, pair.flags):
        if fv.flag == MODEL_FLAG:
            if (found := model_path(fv.value)) is not None:
                files.append([fv.value, _digest(root / found[1], found[0])])
        elif fv.flag in pair.flags.reads:
            files.append([fv.value, _digest(root / fv.value, "file")])
    blob = json.dumps(
        {"args": list(pair.args), "timeout": timeout, "versions": versions, "files": files},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _digest(path: Path, kind: str) -> str:
    try:
        if kind == "dir":
            listing = sorted(
                (str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns)
                for p in path.rglob("*")
                if p.is_file()
            )
            return hashlib.sha256(json.dumps(listing).encode()).hexdigest()
        return file_sha256(path)  # a regular file only: a FIFO is not read
    except OSError as exc:  # vanished since the manifest was checked: the run will say so
        return f"unreadable: {os.strerror(exc.errno) if exc.errno else exc}"
    except ParityError as exc:
        return f"unreadable: {exc.message}"


def gpu_provider(args: tuple[str, ...]) -> str | None:
    """The first GPU provider among the --provider values (comma lists too), else None."""
    for i, token in enumerate(args):
        flag, eq, value = token.partition("=")
        if flag == "--provider":
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            for name in value.split(","):
                if name.strip() in GPU_PROVIDERS:
                    return name.strip()
    return None
