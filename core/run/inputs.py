"""Make input sets from the ONNX signature, or read the user's own feeds.

Generated values (deterministic: input ``k`` of set ``i`` draws from
``np.random.default_rng([seed, i, k])``, so one input's size or range never shifts another's):

- floating inputs: standard normal, drawn in float32 and cast (float16, bfloat16, float64);
  ``float_ranges={"name": (low, high)}`` or ``float_range=(low, high)`` (every float input)
  draws uniformly in [low, high] instead; a graph input of a quantized file (one its
  QuantizeLinear reads, ``signature.calibrated``) is drawn uniformly in that calibrated range
  unless the user set one or the range holds [-2.5, 2.5] (standard normal fits: kept), so almost
  nothing generated is clipped there (the set's label says so);
- integer inputs: uniform in ``DEFAULT_INT_RANGE`` = [0, 100), half-open, clipped to what the
  dtype holds; one that indexes a constant table with fewer rows (a Gather's indices, read
  from the graph: ``signature.index_limits``) in [0, rows), said in the set's label;
  ``int_ranges={"name": (low, high)}`` sets another half-open range;
- bool inputs: True or False with equal odds;
- inputs whose name contains "mask" (any case): all ones, unless ``int_ranges`` names them.

Sizes of dims that are not fixed numbers:

- a symbolic dim takes its size from ``dims`` by name, else a default by name
  (``default_dim_size``): batch-like names -> 2, sequence-like -> 16, height/width-like -> 32,
  anything else -> 8; an unnamed (unknown) dim -> 8, or ``dims["INPUT:AXIS"]`` (the CLI's
  ``--dim INPUT:AXIS=N``: files such as silero-vad's leave dynamic dims unnamed). One name
  means one size everywhere.
- set 0 uses these sizes. Set ``k`` grows each one by ``k * step`` where ``step`` is the largest
  power of two dividing the set-0 size, capped at 32 (``grown_dim_size``): divisibility that
  models often rely on is kept (224 -> 256 -> 288; 2 -> 4 -> 6; 16 -> 32 -> 48; 3 -> 4 -> 5),
  and every later set runs the dynamic axes at sizes other than the export's.
- fixed dims never change.

Contract:
DEFAULT_INT_RANGE = (0, 100) ... documented rule for integer inputs; mask-like names -> ones
    (is_mask_input(name)).
make_input_sets(signature, *, dims={}, n_sets=1, seed=0, int_ranges={}, float_ranges={},
    float_range=None, budget=None) -> tuple[InputSet, ...]: set 0 at the chosen sizes;
    later sets change each symbolic dim by a documented rule. iter_input_sets(...) makes
    the same sets one at a time.
    Both refuse (BudgetError) before allocating when all sets would exceed the budget.
load_input_files(paths, signature, *, budget=None) -> tuple[InputSet, ...]   one set per
    .npz (no pickle), sizes read from .npy headers first; iter_input_files: one at a time.
given_input_sets(mappings, signature, *, first=0, budget=None) -> Iterator[InputSet]   one set
    per mapping of input name -> array or tensor (the Python API), checked like a file's
    feeds; their copied sizes checked against the budget first.
with_clipping_notes(sets, calibrated) -> Iterator[InputSet]   given sets, each labelled with
    how many elements of a quantized input its QuantizeLinear clips
parse_float_range(text, where) -> (low, high)     "LO:HI", UsageError about `where` (a Setting)
check_feeds(feeds, signature, *, where) -> None    InputError naming the input
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from parity.errors import InputError, UsageError, first_line
from parity.files.safe_read import open_regular
from parity.files.zip_bounds import check_zip_directory
from parity.limits.budget import MemoryBudget, NpyHeader, array_bytes, describe_largest, npz_headers
from parity.load.dtypes import FLOAT_NAMES, INT_NAMES, numpy_dtype
from parity.results import InputSet
from parity.settings import Mention, Setting
from parity.signature import Dim, OnnxSignature, TensorSpec
from parity.text import percent_text

DEFAULT_INT_RANGE: tuple[int, int] = (0, 100)
"""Half-open [low, high) range for generated integer inputs (token ids, indices, ...)."""

BATCH_SIZE, SEQUENCE_SIZE, SPATIAL_SIZE, OTHER_SIZE = 2, 16, 32, 8
MAX_GROWTH_STEP = 32
MAX_INPUT_SETS = 100_000  # more is refused (each set's size is estimated before the run)

_BATCH_RE = re.compile(r"batch|^(n|b|bs|bsz|num_samples)$", re.IGNORECASE)
_SEQUENCE_RE = re.compile(r"seq|len|time|token|step|^(t|s|l)$", re.IGNORECASE)
_SPATIAL_RE = re.compile(r"height|width|^(h|w|img|image)$", re.IGNORECASE)


def default_dim_size(name: str | None) -> int:
    """Set-0 size of a symbolic dim nobody sized: by what its name looks like."""
    if name is None:
        return OTHER_SIZE
    if _BATCH_RE.search(name):
        return BATCH_SIZE
    if _SEQUENCE_RE.search(name):
        return SEQUENCE_SIZE
    if _SPATIAL_RE.search(name):
        return SPATIAL_SIZE
    return OTHER_SIZE


DYNAMIC_DEFAULT_SETS = 2  # a file with dynamic axes: its default sizes and one grown size


def has_dynamic_axes(signature: OnnxSignature) -> bool:
    """Some input axis is a symbolic dim or an unnamed dynamic one."""
    return any(isinstance(d, str) or d is None for spec in signature.inputs for d in spec.shape)


def set_count(n_sets: int | None, signature: OnnxSignature) -> int:
    """Generated input sets: the user's number, else two for a file with dynamic axes (the
    second grows every dynamic dim: an export frozen at one size breaks at the other, as
    BackgroundMattingV2 validates at 1080p and 720p) and one for a static file."""
    if n_sets is not None:
        return n_sets
    return DYNAMIC_DEFAULT_SETS if has_dynamic_axes(signature) else 1


def grown_dim_size(base: int, set_index: int) -> int:
    """Size of a dim in set ``set_index``: base + index * (largest power of 2 dividing base)."""
    step = min(base & -base, MAX_GROWTH_STEP)
    return base + set_index * step


def make_input_sets(
    signature: OnnxSignature,
    *,
    dims: Mapping[str, int] | None = None,
    n_sets: int = 1,
    seed: int = 0,
    int_ranges: Mapping[str, tuple[int, int]] | None = None,
    float_ranges: Mapping[str, tuple[float, float]] | None = None,
    float_range: tuple[float, float] | None = None,
    budget: MemoryBudget | None = None,
) -> tuple[InputSet, ...]:
    """``n_sets`` deterministic input sets; set 0 at the chosen sizes, later sets grown."""
    return tuple(
        iter_input_sets(
            signature,
            dims=dims,
            n_sets=n_sets,
            seed=seed,
            int_ranges=int_ranges,
            float_ranges=float_ranges,
            float_range=float_range,
            budget=budget,
        )  # fmt: skip
    )


def iter_input_sets(
    signature: OnnxSignature,
    *,
    dims: Mapping[str, int] | None = None,
    n_sets: int = 1,
    seed: int = 0,
    int_ranges: Mapping[str, tuple[int, int]] | None = None,
    float_ranges: Mapping[str, tuple[float, float]] | None = None,
    float_range: tuple[float, float] | None = None,
    budget: MemoryBudget | None = None,
) -> Iterator[InputSet]:
    """The same sets as `make_input_sets`, made one at a time as the run asks for them.

    Options are checked and the bytes of all ``n_sets`` sets (a run keeps them) estimated
    against `budget` when this is called, before the first array is allocated.
    """
    dims = dict(dims or {})
    int_ranges = dict(int_ranges or {})
    axes = check_input_options(
        signature, dims=dims, n_sets=n_sets, seed=seed, int_ranges=int_ranges
    )
    named = {name: size for name, size in dims.items() if name not in axes}
    ranges = _float_ranges(signature, dict(float_ranges or {}), float_range)
    base = {name: named.get(name, default_dim_size(name)) for name in signature.symbolic_dims}
    base.update(axes)  # "INPUT:AXIS" keys: the unnamed dims sized one by one
    _check_budget(signature, base, n_sets, budget or MemoryBudget())
    return _generate_sets(signature, base, n_sets, seed, int_ranges, ranges)


def check_input_options(
    signature: OnnxSignature,
    *,
    dims: Mapping[str, int],
    n_sets: int = 1,
    seed: int = 0,
    int_ranges: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, int]:
    """Every dim name, ``INPUT:AXIS`` and input name the options give, checked against the
    signature (UsageError naming the setting); the ``INPUT:AXIS`` sizes. Cheap: the run asks
    it before torch and the model load (parity.run.early_check), and again when it draws."""
    axes = _axis_dims(signature, dims)
    named = {name: size for name, size in dims.items() if name not in axes}
    _check_options(signature, dims=named, n_sets=n_sets, seed=seed, int_ranges=int_ranges or {})
    return axes


def unnamed_dims(signature: OnnxSignature) -> tuple[str, ...]:
    """``INPUT:AXIS`` of every dynamic dim the ONNX file leaves unnamed (``--dim`` sizes them
    by these keys)."""
    return tuple(
        f"{spec.name}:{axis}"
        for spec in signature.inputs
        for axis, dim in enumerate(spec.shape)
        if dim is None
    )


def _axis_dims(signature: OnnxSignature, dims: Mapping[str, int]) -> dict[str, int]:
    """The ``INPUT:AXIS`` entries of `dims` (a symbolic dim's own name wins), checked: the
    axis exists and is unnamed and dynamic; UsageError naming the flag otherwise."""
    axes: dict[str, int] = {}
    by_name = {spec.name: spec for spec in signature.inputs}
    for key, size in dims.items():
        name, sep, axis_text = key.rpartition(":")
        if key in signature.symbolic_dims or not sep or name not in by_name:
            continue
        spec = by_name[name]
        if not axis_text.isdigit() or int(axis_text) >= spec.rank:
            raise UsageError(
                f"input {name!r} has axes 0 to {spec.rank - 1} (shape {spec.shape_text()})",
                setting=Setting("dims", key),
            )
        dim = spec.shape[int(axis_text)]
        if isinstance(dim, str):
            raise UsageError(
                (f"that axis is the symbolic dim {dim!r}; give ", Mention("dims", f"{dim}=N")),
                setting=Setting("dims", key),
            )
        if isinstance(dim, int):
            raise UsageError(
                f"that axis is fixed at {dim} in the ONNX file", setting=Setting("dims", str(key))
            )
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise UsageError(
                "a size must be an integer >= 1", setting=Setting("dims", f"{key}={size}")
            )
        axes[f"{name}:{int(axis_text)}"] = size
    return axes


def _set_shapes(
    signature: OnnxSignature, base: Mapping[str, int], index: int
) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """(dim sizes, shape of every input) of set `index`; `base` holds the symbolic dims'
    sizes and those of unnamed dims given by ``INPUT:AXIS``."""
    sizes = {name: grown_dim_size(size, index) for name, size in base.items()}
    unknown = grown_dim_size(default_dim_size(None), index)
    shapes = {
        spec.name: tuple(
            sizes.get(f"{spec.name}:{axis}", unknown) if d is None else _size(d, sizes, unknown)
            for axis, d in enumerate(spec.shape)
        )
        for spec in signature.inputs
    }
    return sizes, shapes


def _check_budget(
    signature: OnnxSignature, base: Mapping[str, int], n_sets: int, budget: MemoryBudget
) -> None:
    """Bytes of every set (a run keeps them all) plus the largest draw's scratch copy."""
    dtypes = {spec.name: spec.dtype for spec in signature.inputs}
    total = scratch = 0
    largest: tuple[int, str, list[int], int] = (-1, "", [], 0)
    for index in range(n_sets):
        _, shapes = _set_shapes(signature, base, index)
        for name, shape in shapes.items():
            n_bytes = array_bytes(shape, numpy_dtype(dtypes[name]))
            total += n_bytes
            # floats are drawn in float32 and integers in int64, then cast (a second copy)
            if _draw_dtype(dtypes[name]) != dtypes[name]:
                scratch = max(scratch, array_bytes(shape, _draw_dtype(dtypes[name])))
            if n_bytes > largest[0]:
                largest = (n_bytes, name, list(shape), index)
    _, name, largest_shape, index = largest
    sets = f"{n_sets} input sets" if n_sets > 1 else "the input set"
    where = f" in set {index}" if n_sets > 1 else ""
    budget.check(
        total + scratch,
        f"generating {sets} (largest: input {name!r} {dtypes.get(name)} {largest_shape}{where})",
        proceed=("use smaller ", Mention("dims"), " sizes or fewer ", Mention("n_input_sets")),
    )


def _generate_sets(
    signature: OnnxSignature,
    base: Mapping[str, int],
    n_sets: int,
    seed: int,
    int_ranges: Mapping[str, tuple[int, int]],
    float_ranges: Mapping[str, _FloatRange],
) -> Iterator[InputSet]:
    graph = _graph_int_ranges(signature, int_ranges)
    int_ranges = {**graph, **int_ranges}
    ranged = "; ".join(
        [
            *(
                f"{name} uniform in [{r.low:.4g}, {r.high:.4g}] ({r.why})"
                for name, r in float_ranges.items()
            ),
            *(
                f"{limit.name} in {limit.text()}"
                for limit in getattr(signature, "index_limits", ())
                if limit.name in graph
            ),
        ]
    )
    for index in range(n_sets):
        sizes, shapes = _set_shapes(signature, base, index)
        feeds = {
            spec.name: _generate(
                spec,
                shape=shapes[spec.name],
                rng=np.random.default_rng([seed, index, position]),
                int_range=int_ranges.get(spec.name),
                float_range=float_ranges.get(spec.name),
            )
            for position, spec in enumerate(signature.inputs)
        }
        described = ", ".join(f"{n}={s}" for n, s in sizes.items()) or "fixed shapes"
        label = f"set {index}: {described}" + (f"; {ranged}" if ranged else "")
        yield InputSet(index=index, feeds=feeds, label=label)


def _graph_int_ranges(
    signature: OnnxSignature, given: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """[0, rows) for an integer input that indexes a constant table with fewer rows than the
    default range reaches (signature.index_limits), unless the user gave its range."""
    specs = {s.name: s for s in signature.inputs}
    out = {}
    for limit in getattr(signature, "index_limits", ()):
        spec = specs.get(limit.name)
        if spec is None or limit.name in given or spec.dtype not in INT_NAMES:
            continue
        if is_mask_input(limit.name) or limit.size >= DEFAULT_INT_RANGE[1]:
            continue
        out[limit.name] = (0, limit.size)
    return out


@dataclass(frozen=True)
class _FloatRange:
    low: float
    high: float
    why: str  # "--float-range", or the calibrated range of the input's QuantizeLinear


def _float_ranges(
    signature: OnnxSignature,
    given: Mapping[str, tuple[float, float]],
    every: tuple[float, float] | None,
) -> dict[str, _FloatRange]:
    """The float inputs drawn uniformly, and from what: the user's range for that input,
    else the user's range for every float input, else the calibrated range of a quantized
    file's input (standard normal would be clipped there), else none (standard normal)."""
    floats = {spec.name: spec for spec in signature.inputs if spec.dtype in FLOAT_NAMES}
    for name, bounds in given.items():
        if name not in floats:
            kinds = {spec.name: spec.dtype for spec in signature.inputs}
            raise UsageError(
                f"input {name!r} is {kinds[name]}, not a float"
                if name in kinds
                else f"the ONNX model has no input {name!r}; float inputs: "
                f"{', '.join(floats) or '(none)'}",
                setting=Setting("float_range", name),
            )
        _check_float_range(bounds, Setting("float_range", name))
    if every is not None:
        _check_float_range(every, Setting("float_range"))
    calibrated = {c.name: c for c in getattr(signature, "calibrated", ())}
    ranges: dict[str, _FloatRange] = {}
    for name in floats:
        if name in given:
            ranges[name] = _float_range(given[name], "--float-range")
        elif every is not None:
            ranges[name] = _float_range(every, "--float-range")
        elif name in calibrated and not _normal_fits(calibrated[name]):
            c = calibrated[name]
            ranges[name] = _FloatRange(c.low, c.high, "the calibrated range of its QuantizeLinear")
    return ranges


def _float_range(bounds: Any, why: str) -> _FloatRange:
    """Two checked numbers LO, HI (_check_float_range) as a range."""
    low, high = (float(b) for b in bounds)
    return _FloatRange(low, high, why)


NORMAL_FITS = 2.5  # a calibrated range holding [-2.5, 2.5] holds 98.8 % of a standard normal


def _normal_fits(calibrated: Any) -> bool:
    """A quantized input calibrated on data like the default's (its range holds +-2.5 sigma
    of a standard normal) keeps standard normal inputs, its tails clipped there counted:
    uniform over a range that wide would triple their variance and saturate what the
    calibration never saw."""
    return calibrated.low <= -NORMAL_FITS and calibrated.high >= NORMAL_FITS


def _check_float_range(bounds: Any, where: Setting) -> None:
    try:
        low, high = (float(b) for b in bounds)
    except (TypeError, ValueError) as exc:
        raise UsageError(_said(where, "expected two numbers LO:HI"), setting=where) from exc
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise UsageError(_said(where, f"need finite LO < HI, got {low:g}:{high:g}"), setting=where)
    top = float(np.finfo(np.float32).max)
    if high - low > top or max(abs(low), abs(high)) > top:
        raise UsageError(  # drawn in float32: past its range the inputs would be inf
            _said(where, f"{low:g}:{high:g} is beyond float32's range (HI - LO at most {top:.4g})"),
            setting=where,
        )


def _said(where: Setting, body: str) -> str:
    """The body after "--float-range NAME: " or after "--float-range: " (no input named)."""
    return body if where.item else f": {body}"


def parse_float_range(text: str, where: Setting) -> tuple[float, float]:
    """``"LO:HI"`` as (low, high): finite numbers with LO < HI (UsageError naming `where`)."""
    low, sep, high = text.partition(":")
    try:
        bounds = (float(low), float(high))
    except ValueError:
        bounds = None
    if not sep or bounds is None:
        raise UsageError(_said(where, f"expected numbers LO:HI, got {text!r}"), setting=where)
    _check_float_range(bounds, where)
    return bounds


def _draw_dtype(dtype: str) -> str:
    if dtype in FLOAT_NAMES:
        return "float32"
    if dtype in INT_NAMES:
        return "int64"
    return "float64" if dtype == "bool" else "uint8"


def load_input_files(
    paths: Iterable[str | os.PathLike[str]],
    signature: OnnxSignature,
    *,
    budget: MemoryBudget | None = None,
) -> tuple[InputSet, ...]:
    """One input set per ``.npz`` file (arrays keyed by ONNX input name), checked."""
    return tuple(iter_input_files(paths, signature, budget=budget))


def iter_input_files(
    paths: Iterable[str | os.PathLike[str]],
    signature: OnnxSignature,
    *,
    budget: MemoryBudget | None = None,
) -> Iterator[InputSet]:
    """`load_input_files` one file at a time; every file's size (from its .npy headers,
    nothing inflated) is checked against `budget` when this is called."""
    paths = _budgeted(paths, budget)
    return _read_input_files(paths, signature)


def iter_feed_files(
    paths: Iterable[str | os.PathLike[str]], *, budget: MemoryBudget | None = None
) -> Iterator[dict[str, np.ndarray]]:
    """Each .npz's feeds, checked against the budget first but against no signature: an
    hf: model's forward takes them by name before any ONNX file is known."""
    paths = _budgeted(paths, budget)
    return (_read_npz(path, where=f"inputs file {path}") for path in paths)


def _budgeted(paths: Iterable[str | os.PathLike[str]], budget: MemoryBudget | None) -> list[Path]:
    """The paths, once their sizes (from the .npy headers) fit the budget together."""
    checked = [Path(raw) for raw in paths]
    budget = budget or MemoryBudget()
    total = 0
    for path in checked:
        headers = _npz_headers(path, where=f"inputs file {path}")
        total += sum(h.n_bytes for h in headers)
        budget.check(
            total,
            f"inputs file {path} ({describe_largest(headers)})"
            if len(checked) == 1
            else (
                "the ",
                Mention("input_files"),
                f" files up to {path} ({describe_largest(headers)})",
            ),
            proceed="feed smaller arrays",
        )
    return checked


def read_feeds_file(
    path: str | os.PathLike[str], *, budget: MemoryBudget | None = None
) -> dict[str, np.ndarray]:
    """One ``.npz`` of named arrays, its size checked from the .npy headers first; not checked
    against a signature (the caller maps the names, e.g. an encoder-decoder's encoder inputs)."""
    path = Path(path)
    where = f"inputs file {path}"
    headers = _npz_headers(path, where=where)
    (budget or MemoryBudget()).check(
        sum(h.n_bytes for h in headers),
        f"{where} ({describe_largest(headers)})",
        proceed="feed smaller arrays",
    )
    return _read_npz(path, where=where)


def _read_input_files(paths: list[Path], signature: OnnxSignature) -> Iterator[InputSet]:
    for index, path in enumerate(paths):
        where = f"inputs file {path}"
        feeds = _read_npz(path, where=where)
        check_feeds(feeds, signature, where=where)
        yield InputSet(index=index, feeds=feeds, label=f"set {index}: {path.name}")


def _npz_headers(path: Path, *, where: str) -> tuple[NpyHeader, ...]:
    with _open_npz(path, where) as fh:
        try:
            return npz_headers(fh)
        except Exception as exc:
            raise InputError(f"{where}: unreadable .npz ({first_line(exc)})") from exc


NPZ_MAX_MEMBERS = 100_000
"""The most arrays an .npz (feeds, reference outputs) may list: its directory is bounded
before zipfile parses it (parity.files.zip_bounds)."""


@contextmanager
def _open_npz(path: Path, where: str) -> Iterator[BinaryIO]:
    """The .npz, if a regular file (a FIFO or /dev/zero named in one line) and a zip."""
    with open_regular(path, what="inputs file", limit=None, error=InputError) as fh:
        if not zipfile.is_zipfile(fh):
            raise InputError(f"{where}: not an .npz archive (save feeds with numpy.savez)")
        check_zip_directory(
            fh, what="inputs file", path=path, max_entries=NPZ_MAX_MEMBERS, error=InputError
        )
        fh.seek(0)
        yield fh


def given_input_sets(
    given: Iterable[Mapping[str, object]],
    signature: OnnxSignature,
    *,
    first: int = 0,
    budget: MemoryBudget | None = None,
) -> Iterable[InputSet]:
    """One input set per mapping of input name -> array (numpy, or anything with
    ``.numpy()`` such as a CPU torch tensor), checked like a file's feeds. Each array's
    size once copied (its shape times its itemsize: a zero-stride `broadcast_to` view holds
    little but is copied whole) is checked against `budget`, all sets together, first."""
    budget = budget or MemoryBudget()
    total = 0
    for index, mapping in enumerate(given, start=first):
        where = f"inputs[{index - first}]"
        if not isinstance(mapping, Mapping):
            raise InputError(f"{where}: expected a mapping of input name -> array")
        for name, value in mapping.items():
            shape: Any = getattr(value, "shape", None)
            dtype = getattr(value, "dtype", None)
            try:  # shape None: not an array (tuple(None) raises)
                n_bytes = array_bytes(tuple(shape), numpy_dtype(str(dtype).removeprefix("torch.")))
            except Exception:  # not an array: _as_array says what it is
                continue
            total += n_bytes
            budget.check(
                total,
                f"{where}[{str(name)!r}] ({dtype} {list(shape)}, once copied)",
                proceed="give smaller arrays",
            )
        feeds = {
            str(name): _as_array(value, f"{where}[{name!r}]") for name, value in mapping.items()
        }
        check_feeds(feeds, signature, where=where)
        yield InputSet(index=index, feeds=feeds, label=f"set {index}: given")


def with_clipping_notes(sets: Iterable[InputSet], calibrated: Iterable[Any]) -> Iterator[InputSet]:
    """Given sets (files, arrays), each labelled with how many elements of a quantized input
    lie outside the range its QuantizeLinear keeps (parity.load.calibration): it clips them,
    so an error there is the input's range, not the file's arithmetic."""
    ranges = {c.name: c for c in calibrated}
    for input_set in sets:
        clauses = []
        for name, c in ranges.items():
            array = input_set.feeds.get(name)
            if array is None:
                continue
            n = clipped_count(np.asarray(array), c.low - c.scale / 2, c.high + c.scale / 2)
            if n:
                size = np.asarray(array).size
                clauses.append(
                    f"{name}: {n:,} of {size:,} elements ({percent_text(n / size)}) outside its "
                    f"calibrated range {c.text()}, clipped by its first QuantizeLinear"
                )
        if clauses:
            label = f"{input_set.label}; " if input_set.label else ""
            input_set = replace(input_set, label=label + "; ".join(clauses))
        yield input_set


_CLIP_CHUNK = 1 << 20


def clipped_count(array: np.ndarray, low: float, high: float) -> int:
    """Elements below `low` or above `high` (NaN neither), counted in chunks: no full-size
    temporary."""
    flat = array.reshape(-1)
    n = 0
    for start in range(0, flat.size, _CLIP_CHUNK):
        chunk = np.asarray(flat[start : start + _CLIP_CHUNK], dtype=np.float64)
        n += int(np.count_nonzero(chunk < low) + np.count_nonzero(chunk > high))
    return n


def _as_array(value: object, where: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    to_numpy = getattr(value, "numpy", None)
    if callable(to_numpy):  # a torch tensor: detached, on the CPU
        device = getattr(getattr(value, "device", None), "type", None)
        if device == "meta":
            raise InputError(
                f"{where}: a tensor on the meta device holds no data; give a CPU tensor or "
                "a numpy array"
            )
        detach = getattr(value, "detach", None)
        value = detach() if callable(detach) else value
        cpu = getattr(value, "cpu", None)
        on_cpu: Any = cpu() if callable(cpu) else value
        return np.asarray(on_cpu.numpy())
    raise InputError(
        f"{where}: expected a numpy array or a torch tensor, got {type(value).__name__}"
    )


def check_feeds(feeds: Mapping[str, np.ndarray], signature: OnnxSignature, *, where: str) -> None:
    """Raise InputError naming the first input whose name, rank, dtype or size is wrong."""
    expected = signature.input_names
    for name in feeds:
        if name not in expected:
            raise InputError(
                f"{where}: unknown input {name!r}; the ONNX model's inputs are "
                f"{', '.join(expected) or '(none)'}"
            )
    seen: dict[str, tuple[str, int]] = {}
    for spec in signature.inputs:
        if spec.name not in feeds:
            raise InputError(f"{where}: input {spec.name!r} is missing")
        array = np.asarray(feeds[spec.name])
        if array.ndim != spec.rank:
            raise InputError(
                f"{where}: input {spec.name!r} has rank {array.ndim} (shape "
                f"{list(array.shape)}), expected rank {spec.rank} {spec.shape_text()}"
            )
        if array.dtype.name != spec.dtype:
            raise InputError(
                f"{where}: input {spec.name!r} has dtype {array.dtype.name}, expected {spec.dtype}"
            )
        for axis, (dim, size) in enumerate(zip(spec.shape, array.shape, strict=True)):
            if isinstance(dim, int) and dim != size:
                raise InputError(
                    f"{where}: input {spec.name!r} has size {size} at axis {axis}, "
                    f"expected {dim} {spec.shape_text()}"
                )
            if isinstance(dim, str):
                first = seen.setdefault(dim, (spec.name, size))
                if first[1] != size:
                    raise InputError(
                        f"{where}: input {spec.name!r} has {dim}={size} at axis {axis}, "
                        f"but input {first[0]!r} has {dim}={first[1]}"
                    )


# --- internals --------------------------------------------------------------------------


def _check_options(
    signature: OnnxSignature,
    *,
    dims: Mapping[str, int],
    n_sets: int,
    seed: int,
    int_ranges: Mapping[str, tuple[int, int]],
) -> None:
    symbolic = signature.symbolic_dims
    for name, size in dims.items():
        if name not in symbolic:
            unnamed = unnamed_dims(signature)
            raise UsageError(
                f"the ONNX inputs have no symbolic dim {name!r}; "
                f"symbolic dims: {', '.join(symbolic) or '(none)'}"
                + (f"; unnamed dynamic dims (INPUT:AXIS): {', '.join(unnamed)}" if unnamed else ""),
                setting=Setting("dims", name),
            )
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise UsageError(
                "a size must be an integer >= 1", setting=Setting("dims", f"{name}={size}")
            )
    if not isinstance(n_sets, int) or not 1 <= n_sets <= MAX_INPUT_SETS:
        raise UsageError(
            f"need at least 1 and at most {MAX_INPUT_SETS} input sets",
            setting=Setting("n_input_sets", str(n_sets)),
        )
    if not isinstance(seed, int) or seed < 0:
        raise UsageError("a seed must be an integer >= 0", setting=Setting("seed", str(seed)))
    by_name = {spec.name: spec for spec in signature.inputs}
    for name, bounds in int_ranges.items():
        if name not in by_name:
            raise UsageError(
                f"the ONNX model has no input {name!r}; inputs: {', '.join(by_name) or '(none)'}",
                setting=Setting("int_ranges", name),
            )
        low, high = bounds
        if by_name[name].dtype not in INT_NAMES:
            raise UsageError(
                f"input {name!r} is {by_name[name].dtype}, not an integer",
                setting=Setting("int_ranges", name),
            )
        info = np.iinfo(by_name[name].dtype)
        if not low < high or low < info.min or high - 1 > info.max:
            raise UsageError(
                f"need low < high within {by_name[name].dtype} ([{info.min}, {info.max}]); "
                "the range is half-open",
                setting=Setting("int_ranges", f"{name}={low}:{high}"),
            )


def _size(dim: Dim, sizes: Mapping[str, int], unknown: int) -> int:
    if isinstance(dim, int):
        return dim
    if dim is None:
        return unknown
    return sizes[dim]


def is_mask_input(name: str) -> bool:
    """A mask by its name ("mask" in any case): generated as all ones, unless `int_ranges`
    names it (so no integer range is offered for it by default)."""
    return "mask" in name.lower()


def _generate(
    spec: TensorSpec,
    *,
    shape: tuple[int, ...],
    rng: np.random.Generator,
    int_range: tuple[int, int] | None,
    float_range: _FloatRange | None = None,
) -> np.ndarray:
    dtype = spec.dtype
    if is_mask_input(spec.name) and int_range is None and float_range is None:
        return np.ones(shape, dtype=numpy_dtype(dtype))
    if dtype in FLOAT_NAMES:
        if float_range is not None:
            drawn = rng.random(shape, dtype=np.float32)
            drawn *= np.float32(float_range.high - float_range.low)
            drawn += np.float32(float_range.low)
            # float32 rounding must not step past the range (a calibrated edge)
            np.clip(drawn, float_range.low, float_range.high, out=drawn)
            return drawn.astype(numpy_dtype(dtype), copy=False)
        return rng.standard_normal(shape, dtype=np.float32).astype(numpy_dtype(dtype), copy=False)
    if dtype in INT_NAMES:
        info = np.iinfo(dtype)
        low, high = int_range or (
            max(DEFAULT_INT_RANGE[0], int(info.min)),
            min(DEFAULT_INT_RANGE[1], int(info.max) + 1),
        )
        return rng.integers(low, high, size=shape, dtype=np.int64).astype(dtype, copy=False)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    raise InputError(
        (
            f"input {spec.name!r} has dtype {dtype}, which Parity cannot generate; "
            "pass your own feeds with ",
            Mention("input_files", "FILE.npz", placeholder=True),
        )
    )


def _read_npz(path: Path, *, where: str) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    try:
        with _open_npz(path, where) as fh, np.load(fh, allow_pickle=False) as archive:
            for name in archive.files:
                try:
                    feeds[name] = archive[name]
                except ValueError as exc:
                    if "allow_pickle" in str(exc) or "Object arrays" in str(exc):
                        raise InputError(
                            f"{where}: array {name!r} holds Python objects; only numeric "
                            "arrays are read (never unpickled)"
                        ) from exc
                    raise
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"{where}: unreadable .npz ({first_line(exc)})") from exc
    return feeds
