"""Reading a data set one sample at a time: a `.npy` / `.npz` of arrays with a leading sample
axis, a folder of `.npy` / `.npz` samples (or any files through `--preprocess` or the model's
own processor), the same in the ImageFolder layout (`CLASS/FILE`, class folders sorted give
the label numbers, as torchvision does), or a table (`.parquet`, `.jsonl`, `.arrow`, a
`datasets.save_to_disk` folder) whose columns are named as the inputs, or whose text / image
column goes through the model's own processor (`Processor`: an hf: folder's tokenizer or
image processor, parity.hf.data_source).

Each is read where it lies: a path on this machine or an object-storage URI (s3://, gs://,
...; parity.data.storage), by the same code, so a Ray worker reading its shard from a bucket
gives the samples, ids and skip reasons a local run gives.

A sample that cannot be read is yielded with its reason, never raised: the batcher skips it by
name (parity.data.batches). Nothing here holds more than one sample, but a `.npz` file, whose
members numpy reads whole (their sizes checked against the memory budget first, from their
headers, nothing inflated).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from parity.data.options import DataOptions
from parity.data.storage import Storage
from parity.data.tables import TABLES, check_columns, jsonl_names, reason, table_reader
from parity.errors import InputError, UsageError
from parity.files.zip_bounds import check_zip_directory
from parity.limits.budget import MemoryBudget, describe_largest, npz_headers, read_npy_header

SAMPLE_FILES = (".npy", ".npz")
TABLE_FORMATS = ("table", "dataset")  # a table file, a datasets.save_to_disk folder
_NPZ_ENTRIES = 4096  # members an .npz of inputs may list (one array per input)


@dataclass(frozen=True)
class Sample:
    """One sample: its number in the data set's order, its id (a path relative to the folder,
    a row, an index), its input arrays without the sample axis (None: unreadable, `reason`
    says why) and its label (None: none)."""

    index: int
    id: str
    arrays: Mapping[str, Any] | None
    label: int | None = None
    reason: str = ""
    text: str = ""  # the text a tokenizer read ("": not a text), what the pages show of it


@dataclass(frozen=True)
class Processor:
    """A model's own preprocessing of raw samples (an hf: folder's tokenizer or image
    processor): `file(path)` and `value(cell)` give a dict of input arrays without the sample
    axis. `kind`: "text" or "image", the table column and the files it reads; `pad`: inputs
    of varying length (token ids) padded at their end to a batch's longest, by pad value."""

    kind: str
    name: str  # in words, e.g. "BertTokenizerFast (padded to each batch's longest, ...)"
    file: Callable[[str], Mapping[str, Any]]
    value: Callable[[Any], Mapping[str, Any]]
    pad: Mapping[str, int] = field(default_factory=dict)


# a table's text / image column, by the names data sets give it (else its only other column)
COLUMN_NAMES = {
    "text": ("text", "sentence", "content", "review", "document", "question"),
    "image": ("image", "img", "picture", "photo"),
}


@dataclass(frozen=True)
class DataSet:
    """A data set opened: `count` its number of samples where known up front (after
    --limit), `classes` an ImageFolder's class names, `samples()` reads them in order."""

    source: str
    format: str
    count: int | None
    samples: Callable[[], Iterator[Sample]]
    classes: tuple[str, ...] = ()
    labels: str | None = None  # where the labels come from, in words
    processor: str = ""  # the model's own processor the samples went through ("": none)
    # the samples from number `start` on, those before it not read (None: a format read
    # from its start; `samples_from` skips): a shard of a data run on Ray
    starting_at: Callable[[int], Iterator[Sample]] | None = None
    # a first pass counting the samples where `count` is None (a .jsonl's lines)
    counted: Callable[[], int] | None = None

    def samples_from(self, start: int) -> Iterator[Sample]:
        """The samples numbered `start` and after, in order."""
        if self.starting_at is not None:
            return self.starting_at(start)
        return (s for s in self.samples() if s.index >= start)

    def size(self) -> int | None:
        """The number of samples: known up front, else counted by a first pass."""
        if self.count is not None or self.counted is None:
            return self.count
        return self.counted()


def open_data(
    options: DataOptions,
    input_names: Sequence[str],
    processor: Processor | None = None,
    budget: MemoryBudget | None = None,
) -> DataSet:
    """The data set `options.path` names (a path or a URI), checked up front (UsageError /
    InputError / StorageError: one line naming --data); samples are read only when
    `samples()` is iterated. `processor`: the model's own (an hf: folder's), for files and
    columns that are not input arrays; --preprocess, the user's code, goes first.
    `budget`: what an .npz's arrays, read whole, may take (default: the default budget)."""
    store = Storage.of(options.path)
    if not store.exists():
        raise InputError(f"--data {store.shown}: no such file or folder")
    preprocess = load_preprocess(options.preprocess) if options.preprocess else None
    if preprocess is not None:
        processor = None
    folder = store.is_dir()
    if folder and store.is_file("dataset_dict.json"):  # a DatasetDict: its splits
        splits = [] if store.remote else sorted(
            d.name for d in Path(store.given).iterdir() if _saved_dataset(Storage(str(d)))
        )  # fmt: skip
        raise UsageError(
            f"--data {store.shown}: a datasets DatasetDict; give one split's folder"
            + "".join(f", {Path(store.given) / s}" for s in splits[:4])
        )
    if folder and _saved_dataset(store):
        data = _table(store, options, input_names, processor)
    elif folder:
        data = _folder(store, options, input_names, preprocess, processor)
    elif store.suffix in TABLES:
        data = _table(store, options, input_names, processor)
    elif store.suffix in SAMPLE_FILES:
        data = _arrays(store, input_names, budget or MemoryBudget())
    else:
        raise UsageError(
            f"--data {store.shown}: give a .npy or .npz of arrays, a .parquet, .jsonl or "
            ".arrow table, a datasets.save_to_disk folder, or a folder of samples "
            "(ImageFolder layout: CLASS/FILE)"
        )
    if options.labels and (data.format not in TABLE_FORMATS or _is_label_file(options.labels)):
        data = _with_label_file(data, options.labels, budget or MemoryBudget())
    return _limited(data, options.limit)


def _limited(data: DataSet, limit: int | None) -> DataSet:
    if limit is None:
        return data
    count = limit if data.count is None else min(limit, data.count)

    def until_limit(samples: Iterator[Sample]) -> Iterator[Sample]:
        for sample in samples:
            if sample.index >= limit:
                return
            yield sample

    return replace(
        data,
        count=count,
        samples=lambda: until_limit(data.samples()),
        starting_at=lambda start: until_limit(data.samples_from(start)),
        counted=None,
    )


# --- arrays: one .npy (one input) or one .npz (one array per input) ---------------------------


def _arrays(store: Storage, input_names: Sequence[str], budget: MemoryBudget) -> DataSet:
    if store.suffix == ".npy":
        if len(input_names) != 1:
            raise UsageError(
                f"--data {store.shown}: a .npy holds one input; the model takes "
                f"{len(input_names)} ({', '.join(input_names)}): give a .npz with one array per "
                "input"
            )
        return _npy(store, input_names[0])
    with store.open() as fh:
        shapes = _npz_shapes(fh, store, input_names, budget)
    lengths = {n: shape[0] if shape else 0 for n, shape in shapes.items()}
    if len(set(lengths.values())) != 1 or not all(lengths.values()):
        raise InputError(
            f"--data {store.shown}: every array needs the same leading (sample) axis, got "
            + ", ".join(f"{n} {list(shape)}" for n, shape in shapes.items())
        )
    n = next(iter(lengths.values()))
    arrays: dict[str, np.ndarray] = {}  # read at the first sample: a Ray driver never does

    def samples(start: int = 0) -> Iterator[Sample]:
        if not arrays:
            with store.open() as fh, np.load(fh, allow_pickle=False) as z:
                arrays.update({name: z[name] for name in input_names})
        for i in range(start, n):
            yield Sample(i, str(i), {name: np.asarray(a[i]) for name, a in arrays.items()})

    return DataSet(store.shown, "npz", n, samples, starting_at=samples)


def _npz_shapes(
    fh: Any, store: Storage, input_names: Sequence[str], budget: MemoryBudget
) -> dict[str, tuple[int, ...]]:
    """The shapes of the inputs' arrays in an .npz, from their headers: its directory
    bounded, and the arrays (read whole when samples are read) checked against `budget`
    before any is inflated."""
    try:
        check_zip_directory(fh, what="--data", path=store.shown, max_entries=_NPZ_ENTRIES,
                            error=InputError)  # fmt: skip
        fh.seek(0)
        headers = {h.key: h for h in npz_headers(fh)}
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile's and numpy's words name what is wrong
        raise InputError(f"--data {store.shown}: not a readable .npz ({reason(exc)})") from None
    missing = [n for n in input_names if n not in headers]
    if missing:
        raise UsageError(
            f"--data {store.shown}: no array named {', '.join(missing)} (it holds "
            f"{', '.join(headers) or 'nothing'}; name one array per input)"
        )
    wanted = [headers[n] for n in input_names]
    budget.check(
        sum(h.n_bytes for h in wanted),
        f"--data {store.shown} ({describe_largest(wanted)})",
        proceed="an .npz is read whole: give a .npy, a table or a folder (read a sample at a time)",
    )
    return {n: headers[n].shape for n in input_names}


def _npy(store: Storage, name: str) -> DataSet:
    """A .npy read a sample at a time by offset (os.pread on this machine, a ranged read of
    an object): its pages go through the page cache, never into this process's memory, so a
    run's peak memory does not grow with the file (a memory map's pages count in the process
    as they are read). A Fortran-ordered file, whose samples are not contiguous, is
    memory-mapped (on this machine only)."""
    with store.open() as f:
        try:
            shape, fortran, dtype = read_npy_header(f)
        except ValueError as exc:
            raise InputError(f"--data {store.shown}: not a .npy file ({exc})") from None
        offset = f.tell()
    if not shape:
        raise InputError(f"--data {store.shown}: every array needs a leading (sample) axis, got []")
    if dtype.hasobject:
        raise InputError(f"--data {store.shown}: {dtype} values (objects) cannot be read")
    n, per = shape[0], tuple(shape[1:])
    if not n:
        raise InputError(f"--data {store.shown}: no samples (its shape is {list(shape)})")
    if fortran and store.remote:
        raise UsageError(
            f"--data {store.shown}: a Fortran-ordered .npy is read from a path on this machine "
            "(its samples are not contiguous); save it in C order (np.ascontiguousarray)"
        )
    size = int(np.prod(per, dtype=np.int64)) * dtype.itemsize
    mapped = np.load(store.given, mmap_mode="r", allow_pickle=False) if fortran else None

    def samples(start: int = 0) -> Iterator[Sample]:
        with store.open() as f:
            for i in range(start, n):
                if mapped is not None:
                    value = np.array(mapped[i])
                else:
                    raw = _read_at(f, offset + i * size, size, store)
                    if len(raw) < size:
                        yield Sample(i, str(i), None, None, "the file ends before this sample")
                        continue
                    value = np.frombuffer(raw, dtype=dtype).reshape(per)
                yield Sample(i, str(i), {name: value})

    return DataSet(store.shown, "npy", n, samples, starting_at=samples)


def _read_at(f: Any, offset: int, size: int, store: Storage) -> bytes:
    """`size` bytes at `offset` (fewer at the end): os.pread on a file of this machine, a
    ranged read of an object (what the storage raises: one line naming it)."""
    if not store.remote:
        return os.pread(f.fileno(), size, offset)
    with store.said():
        f.seek(offset)
        return bytes(f.read(size))


# --- folders: samples as files, flat or in class folders --------------------------------------


def _folder(
    store: Storage,
    options: DataOptions,
    input_names: Sequence[str],
    preprocess: Callable[[str], Any] | None,
    processor: Processor | None = None,
) -> DataSet:
    """Files as samples: .npy / .npz as arrays; any other file through --preprocess (which
    takes every file), else the model's own processor (a text file's text kept). A file in
    object storage is copied to a private path first (what --preprocess is given)."""
    files = store.files()
    if not files:
        raise InputError(f"--data {store.shown}: the folder holds no file")
    image_folder = all(len(f.parts) == 2 for f in files)
    classes = tuple(sorted({f.parts[0] for f in files})) if image_folder else ()
    label_of = {c: k for k, c in enumerate(classes)}
    if preprocess is None and processor is None:
        other = next((f for f in files if f.suffix not in SAMPLE_FILES), None)
        if other is not None:
            raise UsageError(
                f"--data {store.shown}: {other.as_posix()} is not a .npy / .npz sample; give "
                "--preprocess FILE.py:FN (a function from a path to a dict of input arrays), "
                "or an hf: model whose own processor reads it"
            )

    def read(file: PurePosixPath, copied: list[str]) -> tuple[Mapping[str, Any], str]:
        with store.local(file.as_posix()) as full:
            copied.append(full)
            if preprocess is not None:
                return _named(preprocess(full), input_names), ""
            if file.suffix == ".npy":
                return _named(np.load(full, allow_pickle=False), input_names), ""
            if file.suffix == ".npz":
                with np.load(full, allow_pickle=False) as z:
                    return {k: z[k] for k in z.files}, ""
            assert processor is not None
            if processor.kind == "text":
                text = Path(full).read_text(encoding="utf-8").rstrip("\n")
                return processor.value(text), text
            return processor.file(full), ""

    def samples(start: int = 0) -> Iterator[Sample]:
        for i, file in enumerate(files[start:], start):
            label = label_of.get(file.parts[0]) if image_folder else None
            name = file.as_posix()
            copied: list[str] = []
            try:
                arrays, text = read(file, copied)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # a copy's path named as the object it holds
                said = reason(exc)
                if store.remote and copied:
                    said = said.replace(copied[0], store.shown_of(name))
                yield Sample(i, name, None, label, said)
                continue
            yield Sample(i, name, arrays, label, text=text)

    fmt = "imagefolder" if image_folder else "folder"
    labels = "the class folders" if image_folder and not options.labels else None
    used = processor is not None and any(f.suffix not in SAMPLE_FILES for f in files)
    through = processor.name if used and processor is not None else ""
    return DataSet(
        store.shown, fmt, len(files), samples, classes, labels, through, starting_at=samples
    )


def _named(value: Any, input_names: Sequence[str]) -> Mapping[str, Any]:
    """A preprocess function's (or a .npy's) value as arrays by input name: a dict as it is,
    one array for a one-input model."""
    if isinstance(value, Mapping):
        return dict(value)
    if len(input_names) == 1:
        return {input_names[0]: value}
    raise ValueError(
        f"one array for a model of {len(input_names)} inputs; return a dict by input name"
    )


def load_preprocess(spec: str) -> Callable[[str], Any]:
    """--preprocess FILE.py:FN: the function, imported from the file the user typed (code:
    the same trust as --model FILE.py:make; the dashboard never takes one from a form)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target.endswith(".py") or not attr.isidentifier():
        raise UsageError(f"--preprocess expects FILE.py:FUNCTION, got {spec!r}")
    path = Path(target)
    if not path.is_file():
        raise UsageError(f"--preprocess {spec}: no such file {target}")
    name = "parity_preprocess_" + str(abs(hash(str(path.resolve()))))
    module_spec = importlib.util.spec_from_file_location(name, path.resolve())
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"--preprocess {spec}: not an importable Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        sys.modules.pop(name, None)
        raise InputError(f"--preprocess {spec}: importing it raised {reason(exc)}") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise UsageError(f"--preprocess {spec}: {target} has no function {attr!r}")
    return function


# --- tables: columns named as the inputs ------------------------------------------------------


def _table(
    store: Storage, options: DataOptions, input_names: Sequence[str], processor: Processor | None
) -> DataSet:
    """Rows as samples: the columns named as the inputs, else (with the model's processor)
    its text / image column through it."""
    label_column = options.labels if options.labels and not _is_label_file(options.labels) else None
    table = table_reader(store)
    column = None
    if processor is not None:
        seen = table.names if table.names is not None else jsonl_names(store)
        if seen is not None and not set(input_names) <= set(seen):
            column = _processor_column(store, seen, processor, label_column)
    wanted = [column] if column else list(input_names)
    columns = [*wanted, *([label_column] if label_column else [])]
    if table.names is not None:
        check_columns(store, table.names, columns)

    def samples(start: int = 0) -> Iterator[Sample]:
        for i, row in enumerate(table.rows(columns, start), start):
            sid = f"row {i}"
            if isinstance(row, str):
                yield Sample(i, sid, None, None, row)
                continue
            missing = [c for c in columns if row.get(c) is None]
            if missing:
                yield Sample(i, sid, None, None, f"no value in column {', '.join(missing)}")
                continue
            try:
                text = ""
                if column and processor is not None:
                    arrays = dict(processor.value(row[column]))
                    text = row[column] if processor.kind == "text" else ""
                else:
                    arrays = {n: np.asarray(row[n]) for n in input_names}
                label = int(row[label_column]) if label_column else None
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # a processor's own error: this row's reason
                yield Sample(i, sid, None, None, reason(exc))
                continue
            yield Sample(i, sid, arrays, label, text=text)

    labels = f"column {label_column}" if label_column else None
    fmt = "dataset" if store.is_dir() else "table"
    through = f"column {column} through {processor.name}" if column and processor else ""
    return DataSet(store.shown, fmt, table.count, samples, (), labels, through,
                   starting_at=samples, counted=table.counted)  # fmt: skip


def _saved_dataset(store: Storage) -> bool:
    """A folder `datasets.save_to_disk` wrote (a Dataset: state.json beside its .arrow)."""
    return store.is_file("state.json") and store.is_file("dataset_info.json")


def _processor_column(
    store: Storage, names: Sequence[str], processor: Processor, label_column: str | None
) -> str:
    """The column the model's processor reads: the one with a usual name for its kind, else
    the only column besides the labels (UsageError naming the columns otherwise)."""
    others = [n for n in names if n != label_column]
    for name in COLUMN_NAMES.get(processor.kind, ()):
        if name in others:
            return name
    if len(others) == 1:
        return others[0]
    usual = ", ".join(COLUMN_NAMES.get(processor.kind, ()))
    raise UsageError(
        f"--data {store.shown}: no column named as the inputs, and no {processor.kind} column for "
        f"{processor.name} (it has {', '.join(names)}; name it one of {usual})"
    )


# --- labels from a file -----------------------------------------------------------------------


def _is_label_file(labels: str) -> bool:
    return labels.endswith(".npy")


def _with_label_file(data: DataSet, labels: str, budget: MemoryBudget) -> DataSet:
    """The samples with labels from a .npy (one per sample, in the samples' order): on this
    machine memory-mapped, an object read whole (its size checked against `budget` from its
    header first)."""
    if not _is_label_file(labels):
        raise UsageError(
            f"--labels {labels}: a column name applies to a table; give a .npy of labels"
        )
    store = Storage.of(labels, "--labels")
    if not store.is_file():
        raise InputError(f"--labels {store.shown}: no such file")
    values = _label_values(store, budget)
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise InputError(
            f"--labels {store.shown}: expected one integer label per sample, got "
            f"{values.dtype} {list(values.shape)}"
        )
    if data.count is not None and len(values) < data.count:
        raise InputError(f"--labels {store.shown}: {len(values)} labels for {data.count} samples")

    def labelled(samples: Iterator[Sample]) -> Iterator[Sample]:
        for s in samples:
            label = int(values[s.index]) if s.index < len(values) else None
            yield replace(s, label=label)

    return replace(
        data,
        samples=lambda: labelled(data.samples()),
        starting_at=lambda start: labelled(data.samples_from(start)),
        labels=store.shown,
    )


def _label_values(store: Storage, budget: MemoryBudget) -> np.ndarray:
    if not store.remote:
        return np.load(store.given, mmap_mode="r", allow_pickle=False)
    with store.open() as fh:
        try:
            shape, _, dtype = read_npy_header(fh)
            budget.check(
                math.prod(shape) * dtype.itemsize,
                f"--labels {store.shown} ({dtype} {list(shape)})",
                proceed="give one integer label per sample",
            )
            fh.seek(0)
            return np.load(fh, allow_pickle=False)
        except ValueError as exc:
            raise InputError(f"--labels {store.shown}: not a .npy file ({exc})") from None
