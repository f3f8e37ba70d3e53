"""One manifest pair -> the job an engine runs: its validate arguments, its inputs and outputs,
its Ray resources and its resume key.

A pair never writes where it runs: every file it writes (`--json`, and `--html`, `--save-run`,
`--repro`, ... given as plain names) goes to a private folder that `command_args` names, and
the driver lands those files in DIR/NAME (parity.sweep.land). Inputs are read where the pair
runs: the manifest's folder on the local engine, a private copy on a Ray worker
(parity.sweep.delivery), or a URI fetched where the pair runs (`InputSlot.uri`); a URI that
validate opens itself (--data's: PathFlags.uris_in_place) is left in the arguments as it is,
so a pair reads a data set in object storage as `parity validate` does (a prefix included).

The key is a SHA-256 of what decides the pair's result: its arguments (the defaults'
included), the sweep's timeout, the versions of Parity and of the packages that compute the
numbers (as installed where the sweep runs), and the contents of the files it reads (a
directory, e.g. hf:DIR, by its listing: names, sizes, modification times; a URI by its pinned
SHA-256, or its text). `--resume` skips a pair whose record holds the same key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from parity.errors import ParityError, UsageError
from parity.files.hashing import file_sha256
from parity.run.ray_cluster import GPU_PROVIDERS
from parity.sweep.manifest import (
    MODEL_FLAG,
    Manifest,
    PairSpec,
    flag_values,
    is_uri,
    model_path,
)
from parity.version import __version__

REPORT = "report.json"
DECIDING_PACKAGES = ("torch", "onnxruntime", "onnxruntime-gpu", "onnx", "numpy", "transformers")
"""Distributions whose version is part of every resume key (those not installed are left out)."""
MEMORY_FLAG = "--max-memory"


@dataclass(frozen=True)
class OutputSlot:
    """A file (or, for --repro, a folder) the pair writes: args[index] becomes its path."""

    index: int
    flag: str
    name: str
    inline: bool


@dataclass(frozen=True)
class InputSlot:
    """What args[index] reads: `prefix + path + suffix` (e.g. "" + "models.py" + ":make")."""

    index: int
    flag: str
    kind: str
    """"file", "dir" (hf:DIR) or "uri" (read where the pair runs)."""
    path: str
    prefix: str = ""
    suffix: str = ""
    inline: bool = False
    sha256: str | None = None
    """The SHA-256 the manifest pins for it, if any."""


@dataclass(frozen=True)
class PairJob:
    name: str
    args: tuple[str, ...]
    """validate's arguments as the manifest gives them, `--json report.json` last; outputs
    and moved inputs are placed by `command_args`."""
    cwd: str
    """The manifest's folder: relative input paths resolve here."""
    out_dir: str
    """DIR/NAME, written only by the driver."""
    key: str
    timeout: float | None
    gpu_provider: str | None
    """The GPU execution provider the pair asks for (Ray reserves a GPU for it), if any."""
    outputs: tuple[OutputSlot, ...] = ()
    inputs: tuple[InputSlot, ...] = ()
    memory: int | None = None
    """Bytes the pair's --max-memory gives it: what it asks Ray for."""
    num_cpus: int = 1

    @property
    def num_gpus(self) -> int:
        return 1 if self.gpu_provider else 0

    @property
    def report_path(self) -> Path:
        return Path(self.out_dir) / REPORT

    @property
    def written(self) -> tuple[tuple[str, str], ...]:
        """(flag, name in the pair's folder) of every output its flags ask for (not --json)."""
        return tuple((o.flag, o.name) for o in self.outputs if o.flag != "--json")

    def command_args(self, work: Path, moved: Mapping[int, str] | None = None) -> list[str]:
        """validate's arguments with every output in `work` and the inputs `moved` names
        (args index -> new path) at their new place."""
        args = list(self.args)
        for o in self.outputs:
            placed = str(work / o.name)
            args[o.index] = f"{o.flag}={placed}" if o.inline else placed
        for slot in self.inputs:
            if moved and slot.index in moved:
                value = f"{slot.prefix}{moved[slot.index]}{slot.suffix}"
                args[slot.index] = f"{slot.flag}={value}" if slot.inline else value
        return args


def plan_jobs(manifest: Manifest, out: Path, *, timeout: float | None) -> tuple[PairJob, ...]:
    """UsageError (one line) when a file the manifest pins by SHA-256 has other contents."""
    out = out.resolve()
    versions = installed_versions()
    return tuple(
        _plan(pair, manifest, out / pair.name, timeout, versions) for pair in manifest.pairs
    )


def _plan(
    pair: PairSpec, manifest: Manifest, out_dir: Path, timeout: float | None, versions: dict
) -> PairJob:
    outputs = [
        OutputSlot(fv.index, fv.flag, fv.value, fv.inline)
        for fv in flag_values(pair.args, pair.flags)
        if fv.flag in pair.flags.writes
    ]
    inputs = read_slots(pair, manifest.sha256)
    args = (*pair.args, "--json", REPORT)
    outputs.append(OutputSlot(len(args) - 1, "--json", REPORT, inline=False))
    return PairJob(
        name=pair.name,
        args=args,
        cwd=str(manifest.root),
        out_dir=str(out_dir),
        key=pair_key(pair, manifest.root, timeout, versions, inputs),
        timeout=timeout,
        gpu_provider=gpu_provider(pair.args),
        outputs=tuple(outputs),
        inputs=tuple(inputs),
        memory=_memory(pair.args),
    )


def read_slots(pair: PairSpec, pins: Mapping[str, str] | None = None) -> list[InputSlot]:
    """What the pair's read flags name, in order (those `input_slot` finds none for left out)."""
    found = []
    for fv in flag_values(pair.args, pair.flags):
        if fv.flag in pair.flags.writes:
            continue
        in_place = fv.flag in pair.flags.uris_in_place
        slot = input_slot(fv.index, fv.flag, fv.value, fv.inline, pins, in_place)
        if slot is not None:
            found.append(slot)
    return found


def input_slot(
    index: int,
    flag: str,
    value: str,
    inline: bool,
    pins: Mapping[str, str] | None = None,
    uri_in_place: bool = False,
) -> InputSlot | None:
    """What a read flag's value names (None: nothing on disk, e.g. demo:cnn, or a URI the
    run opens itself: `uri_in_place`, its text in the key with the arguments)."""
    if flag == MODEL_FLAG:
        found = model_path(value)
        if found is None:
            return None
        kind, path = found
        start = value.find(path)
        prefix, suffix = value[:start], value[start + len(path) :]
    else:
        kind, path, prefix, suffix = "file", value, "", ""
    if is_uri(path):
        if uri_in_place:
            return None
        kind = "uri"
    pin = (pins or {}).get(path)
    return InputSlot(index, flag, kind, path, prefix, suffix, inline, pin)


def installed_versions() -> dict[str, str]:
    """Parity's version and those of DECIDING_PACKAGES, read from metadata (nothing imported)."""
    found = {"parity": __version__}
    for dist in DECIDING_PACKAGES:
        with suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    return found


def pair_key(
    pair: PairSpec,
    root: Path,
    timeout: float | None,
    versions: dict[str, str],
    inputs: tuple[InputSlot, ...] | list[InputSlot] | None = None,
) -> str:
    if inputs is None:
        inputs = read_slots(pair)
    files: list[list[str]] = []
    for slot in inputs:
        if slot.kind == "uri":
            files.append([slot.path, slot.sha256 or "uri"])
            continue
        digest = _digest(root / slot.path, slot.kind)
        if slot.sha256 and slot.kind == "file" and digest != slot.sha256:
            raise UsageError(
                f"pair {pair.name!r}: {slot.flag} {slot.path}: its SHA-256 is {digest}, "
                f"the manifest pins {slot.sha256}"
            )
        files.append([f"{slot.prefix}{slot.path}{slot.suffix}", digest])
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


def _memory(args: tuple[str, ...]) -> int | None:
    """The bytes of the last --max-memory among the args (validate checked its syntax)."""
    from parity.limits.budget import parse_size

    found = None
    for i, token in enumerate(args):
        flag, eq, value = token.partition("=")
        if flag == MEMORY_FLAG:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    if found is None:
        return None
    try:
        return parse_size(found)
    except UsageError:
        return None


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
