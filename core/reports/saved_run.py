"""Saved runs: one file that reopens a validation without torch, the model or the ONNX file.

Format (``parity.run/1``), conventionally named ``NAME.parity.npz``: an uncompressed zip
that ``np.load(path, allow_pickle=False)`` can also read, holding

- ``manifest.json`` -- everything scalar: model and ONNX identity (with SHA-256 of the files
  when they existed at save time), versions, tolerances, signature, input-set metadata,
  every comparison's status and statistics, timings, provenance (kind, hashes, weights and
  reference files), an hf: run's summary and steps, and a table of members with the
  SHA-256, dtype and shape of each;
- one ``.npy`` member per array: ``inputs/S/K.npy`` (feed K of input set S), ``ref/S/K.npy``
  and ``onnx/S/K.npy`` (output K of set S on each side), ``exclude/S/K.npy`` (the
  exclusion mask of an output of set S: elements the verdict did not judge),
  ``profiles/C/KEY.npy`` (the
  re-judge profile of comparison C). User-chosen names live only in the manifest.

Why this shape: members are written by ``np.lib.format.write_array`` straight into the zip
(no second copy of a big output), stored uncompressed and 64-byte aligned, so reading maps
each big member into memory (``np.memmap`` at the member's data offset) instead of copying it.
Nothing is ever unpickled: object arrays are refused on both sides, and every member's
hash is checked against the manifest before use, so an altered file is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import struct
import zipfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

import parity.files.strict_json as sj
from parity.errors import ParityError, SavedRunError
from parity.files.atomic import atomic_output
from parity.files.hashing import file_sha256
from parity.files.safe_read import open_regular
from parity.load.specs import demo_name
from parity.results import (
    NOISE_PRECISIONS,
    CandidateInfo,
    ErrorStats,
    GenerationInfo,
    GenerationStep,
    InputSet,
    Noise,
    OutputComparison,
    OutputSet,
    Provenance,
    RunKind,
    SavedFrom,
    Status,
    ValidationRun,
)
from parity.run.budget import MemoryBudget, read_npy_header
from parity.signature import OnnxSignature, TensorSpec
from parity.tolerances import Tolerance, Tolerances
from parity.version import __version__

SCHEMA = "parity.run/1"
SUFFIX = ".parity.npz"
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
        zipfile.ZipFile(tmp, "x", zipfile.ZIP_STORED, allowZip64=True) as zf,
    ):
        writer = _MemberWriter(zf)
        manifest = _manifest(run, writer, keep_outputs=keep_outputs)
        manifest["members"] = writer.members
        data = json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8")
        zf.writestr(MANIFEST, data)
        zf.comment = _manifest_seal(data)
    return path


def _manifest_seal(manifest: bytes) -> bytes:
    """The zip comment that covers the manifest as the manifest's table covers each member."""
    return f"{SCHEMA} {MANIFEST} sha256 {hashlib.sha256(manifest).hexdigest()}".encode()


class _HashingWriter:
    """File-like that hashes what passes through, so hashing costs no second read."""

    def __init__(self, raw: BinaryIO) -> None:
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

    def add(self, name: str, array: np.ndarray, *, what: str) -> str:
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
    input_sets = []
    for s, input_set in enumerate(run.input_sets):
        feeds = []
        for k, (name, array) in enumerate(input_set.feeds.items()):
            what = f"input {name!r} of set {input_set.index}"
            feeds.append(
                {"name": name, "member": writer.add(f"inputs/{s}/{k}.npy", array, what=what)}
            )
        masks = run.exclusions[s] if s < len(run.exclusions) else {}
        exclude = [
            {
                "name": name,
                "member": writer.add(
                    f"exclude/{s}/{k}.npy",
                    np.asarray(mask, dtype=bool),
                    what=f"exclusion mask of output {name!r} of set {input_set.index}",
                ),
            }
            for k, (name, mask) in enumerate(masks.items())
        ]
        input_sets.append(
            {"index": input_set.index, "label": input_set.label, "feeds": feeds, "exclude": exclude}
        )

    def output_sets(side: str, sets: tuple[OutputSet, ...]) -> list[dict[str, Any]]:
        result = []
        for s, output_set in enumerate(sets):
            arrays = []
            for k, (name, array) in enumerate(output_set.arrays.items()):
                what = f"{side} output {name!r} of set {s}"
                arrays.append(
                    {"name": name, "member": writer.add(f"{side}/{s}/{k}.npy", array, what=what)}
                )
            notes = [str(n) for n in output_set.notes]
            result.append({"seconds": _num(output_set.seconds), "arrays": arrays, "notes": notes})
        return result

    comparisons = []
    for c, comparison in enumerate(run.comparisons):
        entry = _comparison_json(comparison)
        if comparison.profile is not None:
            entry["profile"] = {
                key: writer.add(
                    f"profiles/{c}/{i}.npy",
                    np.asarray(value),
                    what=f"profile {key!r} of output {comparison.name!r}",
                )
                for i, (key, value) in enumerate(comparison.profile.to_arrays().items())
            }
        comparisons.append(entry)

    return {
        "schema": SCHEMA,
        "saved_by": {
            "parity": __version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "model": run.model,
        "onnx": run.onnx,
        "identity": _identity(run),
        "environment": {str(k): str(v) for k, v in run.environment.items()},
        "signature": _signature_json(run.signature),
        "tolerances": run.tolerances.to_json(),
        "input_sets": input_sets,
        "comparisons": comparisons,
        "ref_outputs": output_sets("ref", run.ref_outputs) if keep_outputs else [],
        "onnx_outputs": output_sets("onnx", run.onnx_outputs) if keep_outputs else [],
        "outputs_kept": bool(keep_outputs and (run.ref_outputs or run.onnx_outputs)),
        "timings": {str(k): _num(v) for k, v in run.timings.items()},
        "provenance": _provenance_json(run.provenance),
        "generation": None if run.generation is None else _generation_json(run.generation),
        "layers": _layers_json(run, writer),
        "candidates": [_candidate_json(info) for info in run.candidates],
    }


def _candidate_json(info: CandidateInfo) -> dict[str, Any]:
    data = {f.name: getattr(info, f.name) for f in fields(CandidateInfo)}
    data["notes"] = [str(n) for n in info.notes]
    data["seconds"] = _num(info.seconds)
    return data


_CANDIDATE_TEXTS = ("onnx", "provider", "ort_opt_level")
_CANDIDATE_OPTIONAL = ("onnx_sha256", "error", "error_kind")


def _candidates_from_json(raw: Any) -> tuple[CandidateInfo, ...]:
    """The candidates of a run (absent in runs saved before there were several: ())."""
    result = []
    for i, entry in enumerate(sj.array(raw or [], "candidates")):
        at = f"candidates[{i}]"
        entry = sj.obj(entry, at)
        values: dict[str, Any] = {"index": sj.integer(sj.field(entry, "index", at), f"{at}.index")}
        for key in _CANDIDATE_TEXTS:
            values[key] = sj.string(sj.field(entry, key, at), f"{at}.{key}")
        for key in _CANDIDATE_OPTIONAL:
            values[key] = sj.optional(sj.string, entry.get(key), f"{at}.{key}")
        notes = sj.array(entry.get("notes", []), f"{at}.notes")
        values["notes"] = tuple(sj.string(n, f"{at}.notes[{j}]") for j, n in enumerate(notes))
        values["seconds"] = _unnum(entry.get("seconds"), f"{at}.seconds") or 0.0
        result.append(CandidateInfo(**values))
    return tuple(result)


def _provenance_json(p: Provenance) -> dict[str, Any]:
    return {f.name: getattr(p, f.name) for f in fields(Provenance)}


_PROVENANCE_INTS = ("opset", "seed")


def _provenance_from_json(raw: Mapping[str, Any]) -> Provenance:
    known = {f.name for f in fields(Provenance)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known or key == "kind":
            continue
        if key == "config":  # the run's settings (parity.run.config_json); absent before
            values[key] = sj.optional(sj.obj, value, "provenance.config")
            continue
        check = sj.integer if key in _PROVENANCE_INTS else sj.string
        values[key] = sj.optional(check, value, f"provenance.{key}")
    kind = sj.optional(sj.string, raw.get("kind"), "provenance.kind") or RunKind.TORCH
    if kind not in {k.value for k in RunKind}:
        raise sj.FieldError(f"provenance.kind: unknown kind {kind!r}")
    return Provenance(kind=RunKind(kind), **values)


def _generation_json(g: GenerationInfo) -> dict[str, Any]:
    from parity.hf.generation_report import generation_json

    return {
        "summary": _jsonable(g.summary),
        "steps": [{f.name: getattr(s, f.name) for f in fields(GenerationStep)} for s in g.steps],
        **_jsonable(generation_json(g)),  # free-running generation: "prompts", "note"
    }


def _generation_from_json(raw: Mapping[str, Any] | None) -> GenerationInfo | None:
    if raw is None:
        return None
    steps = []
    for i, step in enumerate(sj.array(sj.field(raw, "steps", "generation"), "generation.steps")):
        at = f"generation.steps[{i}]"
        step = sj.obj(step, at)
        values = {}
        for f in fields(GenerationStep):
            check = sj.string if f.name in ("phase", "label") else sj.integer
            values[f.name] = check(sj.field(step, f.name, at), f"{at}.{f.name}")
        steps.append(GenerationStep(**values))
    summary = sj.obj(sj.field(raw, "summary", "generation"), "generation.summary")
    from parity.hf.generation_report import prompts_from_json

    return GenerationInfo(
        summary=dict(summary),
        steps=tuple(steps),
        prompts=prompts_from_json(raw.get("prompts")),  # none in runs saved before it
        free_run_note=sj.string(raw.get("note", ""), "generation.note"),
    )


def _from_extra(extra: Mapping[str, Any]) -> tuple[Provenance, GenerationInfo | None]:
    """Provenance and generation info of a run saved before they had types ("extra")."""
    provenance = _provenance_from_json(extra)
    if extra.get("kind") != RunKind.HF_GENERATE:
        return provenance, None
    keys = [f.name for f in fields(GenerationStep)]
    steps = [{k: step.get(k, 0) for k in keys} for step in extra.get("steps") or []]
    return provenance, _generation_from_json(
        {"summary": extra.get("summary") or {}, "steps": steps}
    )


def _layers_json(run: ValidationRun, writer: _MemberWriter) -> dict[str, Any] | None:
    """The layers block (parity.layers) and its kept arrays as members layers/K/{ref,onnx}."""
    if run.layers is None:
        return None
    data = run.layers.to_json()
    data["kept"] = [
        {
            "order": k.order,
            "input_set": k.input_set,
            "onnx_value": k.onnx_value,
            "ref": writer.add(f"layers/{i}/ref.npy", k.ref, what=f"layer value {k.onnx_value!r}"),
            "onnx": writer.add(
                f"layers/{i}/onnx.npy", k.onnx, what=f"layer value {k.onnx_value!r}"
            ),
        }
        for i, k in enumerate(run.layers.kept)
    ]
    return data


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


def _comparison_json(c: OutputComparison) -> dict[str, Any]:
    return {
        "input_set": c.input_set,
        "name": c.name,
        "status": c.status.value,
        "tolerance": c.tolerance.to_json(),
        "ref_shape": _shape(c.ref_shape),
        "onnx_shape": _shape(c.onnx_shape),
        "ref_dtype": c.ref_dtype,
        "onnx_dtype": c.onnx_dtype,
        "n_elements": int(c.n_elements),
        "stats": None if c.stats is None else _stats_json(c.stats),
        "n_mismatch": None if c.n_mismatch is None else int(c.n_mismatch),
        "message": c.message,
        "n_excluded": int(c.n_excluded),
        "excluded_max_abs": _num(c.excluded_max_abs),
        "candidate": int(c.candidate),
        "notes": list(c.notes),
        "noise": None if c.noise is None else c.noise.to_json(),
        "profile": None,
    }


_COUNTS = ("n_nan_mismatch", "n_inf_mismatch")


def _stats_json(stats: ErrorStats) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(ErrorStats):
        value = getattr(stats, f.name)
        if f.name == "worst_index":
            out[f.name] = None if value is None else [int(i) for i in value]
        else:
            out[f.name] = int(value) if f.name in _COUNTS else _num(value)
    return out


def _stats_from_json(raw: dict[str, Any], at: str) -> ErrorStats:
    values: dict[str, Any] = {}
    for f in fields(ErrorStats):
        value, where = sj.field(raw, f.name, at), f"{at}.{f.name}"
        if f.name == "worst_index":
            values[f.name] = sj.optional(sj.shape, value, where)
        elif f.name in _COUNTS:
            values[f.name] = sj.integer(value, where)
        else:
            values[f.name] = _unnum(value, where)
    return ErrorStats(**values)


def _signature_json(signature: OnnxSignature | None) -> dict[str, Any] | None:
    if signature is None:
        return None

    def spec(t: TensorSpec) -> dict[str, Any]:
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}

    return {
        "inputs": [spec(t) for t in signature.inputs],
        "outputs": [spec(t) for t in signature.outputs],
        "opset": signature.opset,
        "producer": signature.producer,
        "ir_version": signature.ir_version,
    }


def _shape(shape: tuple[int, ...] | None) -> list[int] | None:
    return None if shape is None else [int(d) for d in shape]


def _num(value: Any) -> Any:
    """A float for strict JSON: non-finite values become the strings 'nan', 'inf', '-inf'."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _unnum(value: Any, where: str = "number") -> float | None:
    """A number written by `_num`: finite, null, or one of the strings 'nan', 'inf', '-inf'."""
    if value is None:
        return None
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return sj.number(value, where)


def _jsonable(value: Any) -> Any:
    """Free-form JSON (an hf: summary) made strict-JSON safe (non-finite -> None,
    unknown -> str)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, np.ndarray):
        return f"<array {value.dtype} {list(value.shape)}>"
    return str(value)


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
        manifest = _read_manifest(zf, path)
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
            return _read_array(fh, members[name], path)

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


def _open_file(path: Path) -> AbstractContextManager[BinaryIO]:
    """The saved run's file, if it is a regular one: a URL's `?run=/dev/zero` or a FIFO is
    refused in one line (parity.files.safe_read)."""
    if not os.path.lexists(path):
        raise SavedRunError(f"saved run {path} not found")
    return open_regular(path, what="saved run", limit=None, error=SavedRunError)


def _open_zip(fh: BinaryIO, path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(fh)
    except OSError as exc:
        raise SavedRunError(f"cannot read saved run {path}: {exc.strerror or exc}") from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError) as exc:
        raise SavedRunError(
            f"{path} is not a Parity saved run (not a readable zip: {exc})"
        ) from exc


def _read_manifest(zf: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    try:
        info = zf.getinfo(MANIFEST)
    except KeyError as exc:
        raise SavedRunError(f"{path} is not a Parity saved run (no {MANIFEST} inside)") from exc
    if info.file_size > _MAX_MANIFEST:
        raise SavedRunError(f"{path}: {MANIFEST} is implausibly large ({info.file_size} bytes)")
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
    zf: zipfile.ZipFile, fh: BinaryIO, manifest: dict[str, Any], path: Path
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


def _verify(fh: BinaryIO, member: _Member, expected: str, path: Path) -> None:
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


def _read_array(fh: BinaryIO, member: _Member, path: Path) -> np.ndarray:
    """One .npy member, without pickle: mapped when big, read when small."""
    fh.seek(member.data_start)
    try:
        shape, fortran, dtype = read_npy_header(fh)
    except ValueError as exc:
        raise SavedRunError(
            f"{path}: member {member.name!r} is not a valid .npy array ({exc})"
        ) from exc
    if dtype.hasobject:
        raise SavedRunError(
            f"{path}: member {member.name!r} holds Python objects ({dtype}) that would need "
            "pickle to load; refusing it (saved runs hold plain arrays only)"
        )
    data_start = fh.tell()
    n_bytes = math.prod(shape) * dtype.itemsize
    if data_start + n_bytes != member.data_start + member.size:
        raise SavedRunError(
            f"{path}: member {member.name!r} holds {member.size} bytes, "
            f"but its header describes {dtype} {list(shape)}"
        )
    order = "F" if fortran else "C"
    if n_bytes < _SMALL_MEMBER:
        data = fh.read(n_bytes)
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape, order=order)
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=data_start, shape=shape, order=order)
    return np.asarray(mapped)


def _build_run(
    manifest: dict[str, Any], array: Callable[[Any, str], np.ndarray], path: Path
) -> ValidationRun:
    """The run, every field type-checked (sj.FieldError names the first bad one)."""
    m = manifest
    input_sets, exclusions = [], []
    for i, entry in enumerate(sj.array(sj.field(m, "input_sets", "manifest"), "input_sets")):
        at = f"input_sets[{i}]"
        entry = sj.obj(entry, at)
        feeds = _named_arrays(sj.field(entry, "feeds", at), f"{at}.feeds", array)
        exclusions.append(_named_arrays(entry.get("exclude", []), f"{at}.exclude", array))
        input_sets.append(
            InputSet(
                index=sj.integer(sj.field(entry, "index", at), f"{at}.index"),
                feeds=feeds,
                label=sj.string(sj.field(entry, "label", at), f"{at}.label"),
            )
        )

    def output_sets(key: str) -> tuple[OutputSet, ...]:
        result = []
        for i, entry in enumerate(sj.array(sj.field(m, key, "manifest"), key)):
            at = f"{key}[{i}]"
            entry = sj.obj(entry, at)
            notes = sj.array(entry.get("notes", []), f"{at}.notes")
            result.append(
                OutputSet(
                    arrays=_named_arrays(sj.field(entry, "arrays", at), f"{at}.arrays", array),
                    seconds=_unnum(sj.field(entry, "seconds", at), f"{at}.seconds") or 0.0,
                    notes=tuple(sj.string(n, f"{at}.notes[{j}]") for j, n in enumerate(notes)),
                )
            )
        return tuple(result)

    comparisons = [
        _comparison_from_json(sj.obj(entry, f"comparisons[{c}]"), f"comparisons[{c}]", array)
        for c, entry in enumerate(sj.array(sj.field(m, "comparisons", "manifest"), "comparisons"))
    ]
    if "provenance" in m:
        provenance = _provenance_from_json(sj.obj(m["provenance"], "provenance"))
        generation = _generation_from_json(
            sj.optional(sj.obj, sj.field(m, "generation", "manifest"), "generation")
        )
    else:
        provenance, generation = _from_extra(sj.optional(sj.obj, m.get("extra"), "extra") or {})
    timings = {
        k: _unnum(v, f"timings.{k}")
        for k, v in sj.obj(sj.field(m, "timings", "manifest"), "timings").items()
    }
    environment = {
        k: sj.string(v, f"environment.{k}")
        for k, v in sj.obj(sj.field(m, "environment", "manifest"), "environment").items()
    }
    return ValidationRun(
        model=sj.string(sj.field(m, "model", "manifest"), "model"),
        onnx=sj.string(sj.field(m, "onnx", "manifest"), "onnx"),
        signature=_signature_from_json(sj.field(m, "signature", "manifest")),
        tolerances=Tolerances.from_json(sj.field(m, "tolerances", "manifest"), source="tolerances"),
        environment=environment,
        input_sets=tuple(input_sets),
        comparisons=tuple(comparisons),
        ref_outputs=output_sets("ref_outputs"),
        onnx_outputs=output_sets("onnx_outputs"),
        exclusions=tuple(exclusions),
        timings=timings,
        provenance=provenance,
        generation=generation,
        saved=SavedFrom(
            path=str(path),
            identity=sj.obj(sj.field(m, "identity", "manifest"), "identity"),
            saved_by=sj.obj(sj.field(m, "saved_by", "manifest"), "saved_by"),
            outputs_kept=sj.boolean(sj.field(m, "outputs_kept", "manifest"), "outputs_kept"),
        ),
        layers=_layers_from_json(m.get("layers"), array),
        candidates=_candidates_from_json(m.get("candidates")),
    )


def _named_arrays(
    value: Any, at: str, array: Callable[[Any, str], np.ndarray]
) -> dict[str, np.ndarray]:
    """A list of {"name": NAME, "member": MEMBER} as {NAME: array}."""
    result = {}
    for k, item in enumerate(sj.array(value, at)):
        item = sj.obj(item, f"{at}[{k}]")
        name = sj.string(sj.field(item, "name", f"{at}[{k}]"), f"{at}[{k}].name")
        result[name] = array(sj.field(item, "member", f"{at}[{k}]"), f"{at}[{k}].member")
    return result


def _comparison_from_json(
    entry: dict[str, Any], at: str, array: Callable[[Any, str], np.ndarray]
) -> OutputComparison:
    def get(key: str) -> Any:
        return sj.field(entry, key, at)

    status = sj.string(get("status"), f"{at}.status")
    if status not in {s.value for s in Status}:
        raise sj.FieldError(f"{at}.status: unknown status {status!r}")
    tolerance = sj.obj(get("tolerance"), f"{at}.tolerance")
    if set(tolerance) != {"atol", "rtol"}:
        raise sj.FieldError(f'{at}.tolerance: expected {{"atol": number, "rtol": number}}')
    profile = None
    raw_profile = sj.optional(sj.obj, get("profile"), f"{at}.profile")
    if raw_profile is not None:
        from parity.judge.error_profile import (
            ErrorProfile,  # imported only when a profile is stored
        )

        profile = ErrorProfile.from_arrays(
            {str(key): array(member, f"{at}.profile.{key}") for key, member in raw_profile.items()}
        )
    raw_stats = sj.optional(sj.obj, get("stats"), f"{at}.stats")
    return OutputComparison(
        input_set=sj.integer(get("input_set"), f"{at}.input_set"),
        name=sj.string(get("name"), f"{at}.name"),
        status=Status(status),
        tolerance=Tolerance(
            atol=sj.number(tolerance["atol"], f"{at}.tolerance.atol", minimum=0),
            rtol=sj.number(tolerance["rtol"], f"{at}.tolerance.rtol", minimum=0),
        ),
        ref_shape=sj.optional(sj.shape, get("ref_shape"), f"{at}.ref_shape"),
        onnx_shape=sj.optional(sj.shape, get("onnx_shape"), f"{at}.onnx_shape"),
        ref_dtype=sj.optional(sj.string, get("ref_dtype"), f"{at}.ref_dtype"),
        onnx_dtype=sj.optional(sj.string, get("onnx_dtype"), f"{at}.onnx_dtype"),
        n_elements=sj.integer(get("n_elements"), f"{at}.n_elements"),
        stats=None if raw_stats is None else _stats_from_json(raw_stats, f"{at}.stats"),
        profile=profile,
        n_mismatch=sj.optional(sj.integer, get("n_mismatch"), f"{at}.n_mismatch"),
        message=sj.string(get("message"), f"{at}.message"),
        n_excluded=sj.integer(entry.get("n_excluded", 0), f"{at}.n_excluded"),
        excluded_max_abs=_unnum(entry.get("excluded_max_abs"), f"{at}.excluded_max_abs"),
        candidate=sj.integer(entry.get("candidate", 0), f"{at}.candidate"),
        notes=tuple(
            sj.string(n, f"{at}.notes[{j}]")
            for j, n in enumerate(sj.array(entry.get("notes", []), f"{at}.notes"))
        ),
        noise=_noise_from_json(entry.get("noise"), f"{at}.noise"),
    )


def _noise_from_json(raw: Any, at: str) -> Noise | None:
    if raw is None:
        return None
    raw = sj.obj(raw, at)
    ratio = _unnum(raw.get("ratio"), f"{at}.ratio")
    precision = sj.string(raw.get("precision", "float32"), f"{at}.precision")
    if precision not in NOISE_PRECISIONS:
        raise sj.FieldError(f"{at}.precision: expected one of {', '.join(NOISE_PRECISIONS)}")
    quantization = raw.get("quantization")
    q = {} if quantization is None else sj.obj(quantization, f"{at}.quantization")
    return Noise(
        torch_error=_unnum(raw.get("torch_error"), f"{at}.torch_error") or 0.0,
        onnx_error=_unnum(raw.get("onnx_error"), f"{at}.onnx_error") or 0.0,
        ratio=ratio,
        precision=precision,
        scale=_unnum(q.get("scale"), f"{at}.quantization.scale"),
        tensors=sj.integer(q.get("tensors", 0), f"{at}.quantization.tensors"),
        clipped=_unnum(q.get("clipped"), f"{at}.quantization.clipped") or 0.0,
        emulated=sj.optional(sj.string, raw.get("emulated"), f"{at}.emulated") or "",
    )


def _layers_from_json(data: Any, array: Callable[[Any, str], np.ndarray]) -> Any:
    if data is None:
        return None
    from parity.layers.result import KeptValue, LayersResult

    data = sj.obj(data, "layers")
    kept = []
    for i, k in enumerate(sj.array(data.get("kept") or [], "layers.kept")):
        at = f"layers.kept[{i}]"
        k = sj.obj(k, at)
        kept.append(
            KeptValue(
                order=sj.integer(sj.field(k, "order", at), f"{at}.order"),
                input_set=sj.integer(sj.field(k, "input_set", at), f"{at}.input_set"),
                onnx_value=sj.string(sj.field(k, "onnx_value", at), f"{at}.onnx_value"),
                ref=array(sj.field(k, "ref", at), f"{at}.ref"),
                onnx=array(sj.field(k, "onnx", at), f"{at}.onnx"),
            )
        )
    return LayersResult.from_json(data, kept=tuple(kept))


def _signature_from_json(data: Any) -> OnnxSignature | None:
    if data is None:
        return None
    data = sj.obj(data, "signature")

    def specs(key: str) -> tuple[TensorSpec, ...]:
        result = []
        for i, t in enumerate(sj.array(sj.field(data, key, "signature"), f"signature.{key}")):
            at = f"signature.{key}[{i}]"
            t = sj.obj(t, at)
            result.append(
                TensorSpec(
                    name=sj.string(sj.field(t, "name", at), f"{at}.name"),
                    dtype=sj.string(sj.field(t, "dtype", at), f"{at}.dtype"),
                    shape=sj.shape(sj.field(t, "shape", at), f"{at}.shape", named=True),
                )
            )
        return tuple(result)

    return OnnxSignature(
        inputs=specs("inputs"),
        outputs=specs("outputs"),
        opset=sj.integer(sj.field(data, "opset", "signature"), "signature.opset"),
        producer=sj.string(sj.field(data, "producer", "signature"), "signature.producer"),
        ir_version=sj.integer(sj.field(data, "ir_version", "signature"), "signature.ir_version"),
    )
