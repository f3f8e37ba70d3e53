"""Stored reference outputs (``REF.npz``): validate an ONNX file when the torch model is absent.

Layout of ``REF.npz`` (a plain ``np.savez`` file; read with ``allow_pickle=False``):

- one input set: one array per output, keyed by the ONNX output name (``"logits"``);
- several input sets: keys ``"set{i}/NAME"`` for i = 0..N-1 (``"set0/logits"``,
  ``"set1/logits"``), one group per ``--inputs`` file, in the same order.

Every ONNX output must have a reference in every set; keys that name no ONNX output are
kept as reference-only outputs (reported as missing on the ONNX side, as in a live run
where torch returns more than the export). `save_reference_outputs` writes this layout from
a live run, so ``parity validate --model M --save-reference REF.npz`` followed by
``parity validate --onnx X --reference REF.npz --inputs ...`` gives the same numbers.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from parity.errors import InputError, UsageError
from parity.files.atomic import atomic_output
from parity.files.safe_read import open_regular
from parity.limits.budget import MemoryBudget, describe_largest, npz_headers
from parity.results import OutputSet, ValidationRun
from parity.settings import Mention
from parity.signature import OnnxSignature

_SET_KEY = re.compile(r"^set(\d+)/(.+)$")


def load_reference_outputs(
    path: str | Path,
    *,
    signature: OnnxSignature,
    n_sets: int,
    budget: MemoryBudget | None = None,
) -> tuple[OutputSet, ...]:
    """Reference outputs for `n_sets` input sets, checked against the ONNX output names.

    The file's size once read is estimated from its .npy headers and checked against
    `budget` before any array is read (a small compressed file can claim gigabytes)."""
    path = Path(path)
    arrays = _read_npz(path, budget or MemoryBudget())
    outputs = set(signature.output_names)
    grouped = _group(arrays, outputs, path)
    if len(grouped) != n_sets:
        holds = f"{len(grouped)} input set" + ("s" if len(grouped) != 1 else "")
        raise UsageError(
            (
                f"reference file {path} holds {holds}, but {n_sets} input set"
                f"{'s were' if n_sets != 1 else ' was'} given (one ",
                Mention("input_files"),
                " file per set)",
            )
        )
    result = []
    for i, group in enumerate(grouped):
        missing = [name for name in signature.output_names if name not in group]
        if missing:
            where = f"set {i} of " if len(grouped) > 1 else ""
            raise InputError(
                f"reference file {path}: {where}no reference for ONNX output "
                f"{', '.join(map(repr, missing))} (found {_names(group)}; "
                f"ONNX outputs are {_names(signature.output_names)})"
            )
        order = [n for n in signature.output_names] + [n for n in group if n not in outputs]
        result.append(OutputSet(arrays={name: group[name] for name in order}))
    return tuple(result)


def save_reference_outputs(path: str | Path, run: ValidationRun) -> Path:
    """Write `run`'s reference (torch) outputs as REF.npz in the layout documented above."""
    if not run.ref_outputs:
        raise UsageError("this run kept no reference outputs to save")
    path = Path(path)
    if len(run.ref_outputs) == 1:
        arrays = dict(run.ref_outputs[0].arrays)
    else:
        arrays = {
            f"set{i}/{name}": array
            for i, output_set in enumerate(run.ref_outputs)
            for name, array in output_set.arrays.items()
        }
    _write_npz(path, arrays, what="reference outputs")
    return path


def save_input_feeds(
    directory: str | Path, run: ValidationRun, *, stem: str = "feeds"
) -> tuple[Path, ...]:
    """Write each input set's feeds as ``{stem}{i}.npz`` (what ``--inputs`` reads)."""
    directory = Path(directory)
    paths = []
    for i, input_set in enumerate(run.input_sets):
        target = directory / f"{stem}{i}.npz"
        _write_npz(target, dict(input_set.feeds), what=f"feeds of input set {input_set.index}")
        paths.append(target)
    return tuple(paths)


def _write_npz(path: Path, arrays: dict[str, np.ndarray], *, what: str) -> None:
    """Uncompressed npz, each array streamed into the zip (no second copy), atomically."""
    with (
        atomic_output(path, what) as tmp,
        zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf,
    ):
        for key, array in arrays.items():
            array = np.asanyarray(array)
            if array.dtype.hasobject:
                raise UsageError(f"cannot save {what}: {key!r} is an object array")
            with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


def _read_npz(path: Path, budget: MemoryBudget) -> dict[str, np.ndarray]:
    if not os.path.lexists(path):
        raise UsageError(f"reference file {path} not found")
    with open_regular(path, what="reference file", limit=None, error=InputError) as fh:
        return _read_npz_file(fh, path, budget)


def _read_npz_file(fh: BinaryIO, path: Path, budget: MemoryBudget) -> dict[str, np.ndarray]:
    try:
        magic = fh.read(6)
        fh.seek(0)
    except OSError as exc:
        raise InputError(f"cannot read reference file {path}: {exc.strerror or exc}") from exc
    if magic.startswith(np.lib.format.MAGIC_PREFIX):
        raise InputError(
            f"reference file {path} is a single .npy array; expected an .npz with one array "
            "per ONNX output"
        )
    if not magic.startswith(b"PK"):
        raise InputError(f"reference file {path} is not an .npz file (not a zip archive)")
    from parity.files.zip_bounds import check_zip_directory
    from parity.run.inputs import NPZ_MAX_MEMBERS

    try:
        check_zip_directory(
            fh, what="reference file", path=path, max_entries=NPZ_MAX_MEMBERS, error=InputError
        )
        fh.seek(0)
        headers = npz_headers(fh)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"reference file {path} is not a readable .npz ({exc})") from exc
    budget.check(
        sum(h.n_bytes for h in headers),
        f"reference file {path} ({describe_largest(headers)})",
        proceed="store fewer or smaller outputs",
    )
    try:
        fh.seek(0)
        with np.load(fh, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except ValueError as exc:
        if "pickle" in str(exc):
            raise InputError(
                f"reference file {path} holds Python objects that would need pickle; "
                "refusing it (store plain numeric arrays)"
            ) from exc
        raise InputError(f"reference file {path} is not a readable .npz ({exc})") from exc
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"reference file {path} is not a readable .npz ({exc})") from exc


def _group(
    arrays: dict[str, np.ndarray], outputs: set[str], path: Path
) -> list[dict[str, np.ndarray]]:
    """Split keys into input sets: all ``set{i}/NAME`` keys, or plain output names."""
    if not arrays:
        raise InputError(f"reference file {path} holds no arrays")
    matches = {key: _SET_KEY.match(key) for key in arrays}
    # a plain layout wins when every key is an output name (an output may be called "set0/x")
    if all(m is not None for m in matches.values()) and not set(arrays) <= outputs:
        sets: dict[int, dict[str, np.ndarray]] = {}
        for key, m in matches.items():
            assert m is not None
            sets.setdefault(int(m.group(1)), {})[m.group(2)] = arrays[key]
        expected = list(range(len(sets)))
        if sorted(sets) != expected:
            raise InputError(
                f"reference file {path}: set numbers {sorted(sets)} are not 0..{len(sets) - 1}"
            )
        return [sets[i] for i in expected]
    if any(m is not None for m in matches.values()) and not set(arrays) <= outputs:
        mixed = [key for key, m in matches.items() if m is None][:3]
        raise InputError(
            f"reference file {path} mixes 'set{{i}}/NAME' keys with plain keys "
            f"({', '.join(map(repr, mixed))}); use one layout"
        )
    return [arrays]


def _names(names) -> str:
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:8])
    return shown + (f", ... ({len(names)} in all)" if len(names) > 8 else "") if names else "none"
