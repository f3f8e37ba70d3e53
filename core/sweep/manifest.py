"""The sweep manifest (``parity.sweep/1``), read strictly: a bad manifest is one line, exit 2.

    {"schema": "parity.sweep/1",
     "defaults": {"args": ["--input-sets", "2"]},
     "pairs": [{"name": "resnet18", "args": ["--model", "r18.pt2", "--onnx", "r18.onnx"]}],
     "sha256": {"r18.onnx": "9f2c..."}}

`args` are `parity validate`'s arguments; the defaults come first. Paths in them are relative
to the manifest's folder (pairs run there), or URIs (s3://, gs://, https://, file://) read
where the pair runs: fetched whole into the pair's folder (parity.sweep.delivery), but for a
flag whose URI validate opens itself (--data: an object or a prefix of many, read a sample at a
time, as `parity validate` reads it; PathFlags.uris_in_place), which the pair is given as it
is. `sha256` pins a file's or a fetched URI's contents: a local file that differs stops the
sweep before it starts, a URI that differs fails its pair.
Every pair writes only inside its own folder DIR/NAME: the sweep gives `--json` itself, and
every other flag that writes (`--html`, `--save-run`, `--repro`, ...: those validate's parser
marks with parity.path_flags.writes) takes a plain name placed in that folder. Which flags read and
write is read from validate's real parser (`PathFlags`), never listed here. Everything is
checked before the first pair starts, so a typo does not surface an hour into a sweep.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import parity.files.strict_json as strict_json
from parity.errors import UsageError
from parity.files.json_budget import check_json_budget
from parity.files.kinds import not_a_regular_file
from parity.files.safe_read import read_bytes
from parity.files.uris import is_uri, redacted_uri
from parity.load.specs import HF_PREFIX, demo_name, is_hf_spec
from parity.path_flags import PathFlags
from parity.sweep import SCHEMA

MAX_MANIFEST_BYTES = 64 << 20
SHA256_RE = re.compile(r"[0-9a-f]{64}")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RESERVED_NAMES = frozenset({"summary.json", "index.html"})
"""Files the sweep writes next to the pair folders."""
SWEEP_FILES = frozenset({"report.json", "pair.json", "log.txt"})
"""Files the sweep writes in each pair's folder (a pair's flags may not name them)."""

MODEL_FLAG = "--model"
"""The read flag whose value is a model spec (a file, a folder, or nothing on disk)."""
OWNED_FLAGS = ("--json",)
"""validate flags the sweep sets itself."""


@dataclass(frozen=True)
class PairSpec:
    name: str
    args: tuple[str, ...]
    """The defaults' args, then the pair's own."""
    flags: PathFlags
    """Which of validate's flags read and which write (from its parser)."""


@dataclass(frozen=True)
class Manifest:
    path: Path
    root: Path
    """The manifest's folder: relative paths in args resolve here, and pairs run here."""
    pairs: tuple[PairSpec, ...]
    sha256: Mapping[str, str] = field(default_factory=dict)
    """Path or URI as the args write it -> the SHA-256 its contents must have."""


@dataclass(frozen=True)
class FlagValue:
    index: int
    """Position in args of the value (for `--flag=value`, of the whole token)."""
    flag: str
    value: str
    inline: bool


def load_manifest(
    path: str | Path,
    *,
    flags: PathFlags,
    check_args: Callable[[tuple[str, ...]], str | None] | None = None,
) -> Manifest:
    """Read and check a manifest; UsageError (one line naming the place) when it is wrong.

    `flags`: what validate's flags do with paths (PathFlags.of(validate's parser)).
    `check_args(args)` returns what is wrong with a pair's validate arguments, or None
    (the CLI passes validate's own parser, so a typo in a flag stops the sweep before it starts).
    """
    path = Path(path)
    shown = str(path)
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"cannot read manifest {shown}: no such file")
    raw = read_bytes(path, what="manifest", limit=MAX_MANIFEST_BYTES, error=UsageError)
    check_json_budget(raw, f"manifest {shown}")
    try:
        data = strict_json.loads(raw)
    except strict_json.FieldError as exc:
        raise UsageError(f"{shown}: {exc}") from exc
    root = path.resolve().parent
    pairs = _parse(data, shown, flags)
    pins = _pins(data.get("sha256"), shown)
    for pair in pairs:
        _check_args(pair, root, shown, pins)
        problem = check_args(pair.args) if check_args is not None else None
        if problem:
            raise UsageError(f"{shown}: pair {pair.name!r}: {problem}")
    return Manifest(path=path, root=root, pairs=pairs, sha256=pins)


def _pins(value: Any, shown: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{shown}: sha256 must be a JSON object {{path or URI: SHA-256}}")
    for key, digest in value.items():
        if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
            said = redacted_uri(key) if is_uri(key) else key
            raise UsageError(f"{shown}: sha256[{said!r}] must be 64 lowercase hexadecimal digits")
    return dict(value)


def flag_values(args: tuple[str, ...] | list[str], flags: PathFlags) -> list[FlagValue]:
    """Every value given to a flag that reads or writes a path, in order (`--flag V` and
    `--flag=V`)."""
    found: list[FlagValue] = []
    path_flags = flags.all
    i = 0
    while i < len(args):
        token = args[i]
        flag, eq, value = token.partition("=")
        if flag in path_flags:
            if eq:
                found.append(FlagValue(i, flag, value, inline=True))
            elif i + 1 < len(args):
                found.append(FlagValue(i + 1, flag, args[i + 1], inline=False))
                i += 1
            else:
                found.append(FlagValue(i, flag, "", inline=False))
        i += 1
    return found


def model_path(spec: str) -> tuple[str, str] | None:
    """("file" | "dir", path) for a --model spec that names something on disk, else None."""
    if demo_name(spec) is not None:
        return None
    if is_hf_spec(spec):
        return "dir", spec.removeprefix(HF_PREFIX)
    target, colon, attr = spec.rpartition(":")
    if colon and attr.isidentifier():
        return ("file", target) if target.endswith(".py") else None  # package.module:CALLABLE
    return "file", spec


# --------------------------------------------------------------------------- parsing


def _parse(data: Any, shown: str, flags: PathFlags) -> tuple[PairSpec, ...]:
    _object(data, {"schema", "defaults", "pairs", "sha256"}, shown, "the manifest")
    if data.get("schema") != SCHEMA:
        raise UsageError(f"{shown}: schema must be {SCHEMA!r}, got {data.get('schema')!r}")
    defaults = data.get("defaults", {})
    _object(defaults, {"args"}, shown, "defaults")
    default_args = _args(defaults.get("args", []), shown, "defaults.args")
    pairs = data.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        raise UsageError(f"{shown}: 'pairs' must be a non-empty list")
    specs: list[PairSpec] = []
    seen: dict[str, str] = {}
    for i, pair in enumerate(pairs):
        where = f"pairs[{i}]"
        _object(pair, {"name", "args"}, shown, where)
        name = pair.get("name")
        if not isinstance(name, str):
            raise UsageError(f"{shown}: {where}.name must be a string")
        _check_name(name, shown, where)
        folded = name.casefold()  # two names one case-insensitive filesystem would merge
        if folded in seen:
            raise UsageError(f"{shown}: {where}: duplicate name {name!r} (as {seen[folded]!r})")
        seen[folded] = name
        args = _args(pair.get("args"), shown, f"{where}.args")
        specs.append(PairSpec(name=name, args=default_args + args, flags=flags))
    return tuple(specs)


def _object(value: Any, allowed: set[str], shown: str, where: str) -> None:
    if not isinstance(value, dict):
        raise UsageError(f"{shown}: {where} must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise UsageError(
            f"{shown}: {where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def _args(value: Any, shown: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise UsageError(f"{shown}: {where} must be a list of strings")
    for i, arg in enumerate(value):
        if "\0" in arg:  # no process can be given it (and no file can be named with it)
            raise UsageError(f"{shown}: {where}[{i}] {arg!r} holds a NUL byte")
    return tuple(value)


def _check_name(name: str, shown: str, where: str) -> None:
    if not NAME_RE.fullmatch(name) or name.endswith("."):
        raise UsageError(
            f"{shown}: {where}: name {name!r} is not safe as a folder name "
            "(letters, digits, '.', '_', '-'; starting with a letter or digit; up to 128)"
        )
    if name.casefold() in RESERVED_NAMES:
        raise UsageError(f"{shown}: {where}: name {name!r} is reserved for the sweep's own files")


def _check_args(pair: PairSpec, root: Path, shown: str, pins: Mapping[str, str]) -> None:
    where = f"pair {pair.name!r}"
    path_flags = pair.flags.all
    for token in pair.args:
        flag = token.partition("=")[0]
        if flag.startswith("--") and flag not in path_flags:
            abbreviated = [f for f in path_flags if f.startswith(flag)]
            if abbreviated:
                raise UsageError(f"{shown}: {where}: write {abbreviated[0]} in full, not {flag}")
    placed: dict[str, str] = {}
    for fv in flag_values(pair.args, pair.flags):
        if not fv.value:
            raise UsageError(f"{shown}: {where}: {fv.flag} needs a value")
        if fv.flag in OWNED_FLAGS:
            raise UsageError(
                f"{shown}: {where}: remove {fv.flag}: the sweep writes DIR/{pair.name}/report.json"
            )
        if fv.flag in pair.flags.writes:
            if "/" in fv.value or "\\" in fv.value or fv.value in (".", ".."):
                raise UsageError(
                    f"{shown}: {where}: {fv.flag} {fv.value}: give a plain name (no folder), "
                    f"written in DIR/{pair.name}/"
                )
            if fv.value.casefold() in SWEEP_FILES:
                raise UsageError(
                    f"{shown}: {where}: {fv.flag} {fv.value}: the sweep writes that file itself"
                )
            if fv.value.casefold() in placed:
                raise UsageError(
                    f"{shown}: {where}: {fv.flag} {fv.value}: {placed[fv.value.casefold()]} "
                    "writes the same file"
                )
            placed[fv.value.casefold()] = fv.flag
            continue
        kind_path = model_path(fv.value) if fv.flag == MODEL_FLAG else ("file", fv.value)
        if kind_path is None:
            continue
        kind, value = kind_path
        if is_uri(value):
            said = redacted_uri(fv.value)
            if kind == "dir":
                raise UsageError(f"{shown}: {where}: {fv.flag} {said}: a URI names one file")
            if fv.flag in pair.flags.uris_in_place and value in pins:
                raise UsageError(
                    f"{shown}: {where}: {fv.flag} {said}: the pair reads it where it lies, "
                    "never fetched whole, so no SHA-256 is checked: remove its sha256 pin"
                )
            continue
        target = root / value
        if kind == "dir":
            what = "" if target.is_dir() else "missing"
        else:  # a FIFO, /dev/zero or a folder is said as what it is, not "no such file"
            what = not_a_regular_file(target)
        if what == "missing":
            raise UsageError(f"{shown}: {where}: {fv.flag} {fv.value}: no such {kind} ({target})")
        if what:
            raise UsageError(
                f"{shown}: {where}: {fv.flag} {fv.value}: {what}, not a regular file ({target})"
            )
