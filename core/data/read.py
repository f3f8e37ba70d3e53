"""Reading a data set one sample at a time: a `.npy` / `.npz` of arrays with a leading sample
axis, a folder of `.npy` / `.npz` samples (or any files through `--preprocess` or the model's
own processor), the same in the ImageFolder layout (`CLASS/FILE`, class folders sorted give
the label numbers, as torchvision does), or a table (`.parquet`, `.jsonl`, `.arrow`, a
`datasets.save_to_disk` folder) whose columns are named as the inputs, or whose text / image
column goes through the model's own processor (`Processor`: an hf: folder's tokenizer or
image processor, parity.hf.data_source).

A sample that cannot be read is yielded with its reason, never raised: the batcher skips it by
name (parity.data.batches). Nothing here holds more than one sample, but a `.npz` file, whose
members numpy reads whole.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from parity.data.options import DataOptions
from parity.errors import InputError, UsageError

TABLES = (".parquet", ".jsonl", ".arrow")
SAMPLE_FILES = (".npy", ".npz")
TABLE_FORMATS = ("table", "dataset")  # a table file, a datasets.save_to_disk folder
_TABLE_ROWS = 256  # rows a table reader decodes at once


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

    def samples_from(self, start: int) -> Iterator[Sample]:
        """The samples numbered `start` and after, in order."""
        if self.starting_at is not None:
            return self.starting_at(start)
        return (s for s in self.samples() if s.index >= start)


def open_data(
    options: DataOptions, input_names: Sequence[str], processor: Processor | None = None
) -> DataSet:
    """The data set `options.path` names, checked up front (UsageError / InputError: one line
    naming --data); samples are read only when `samples()` is iterated. `processor`: the
    model's own (an hf: folder's), for files and columns that are not input arrays;
    --preprocess, the user's code, goes first."""
    path = Path(options.path)
    if not path.exists():
        raise InputError(f"--data {options.path}: no such file or folder")
    preprocess = load_preprocess(options.preprocess) if options.preprocess else None
    if preprocess is not None:
        processor = None
    if path.is_dir() and (path / "dataset_dict.json").is_file():  # a DatasetDict: its splits
        splits = sorted(d.name for d in path.iterdir() if _saved_dataset(d))
        raise UsageError(
            f"--data {options.path}: a datasets DatasetDict; give one split's folder, "
            + ", ".join(str(path / s) for s in splits[:4])
        )
    if path.is_dir() and _saved_dataset(path):
        data = _table(path, options, input_names, processor)
    elif path.is_dir():
        data = _folder(path, options, input_names, preprocess, processor)
    elif path.suffix in TABLES:
        data = _table(path, options, input_names, processor)
    elif path.suffix in SAMPLE_FILES:
        data = _arrays(path, input_names)
    else:
        raise UsageError(
            f"--data {options.path}: give a .npy or .npz of arrays, a .parquet, .jsonl or "
            ".arrow table, a datasets.save_to_disk folder, or a folder of samples "
            "(ImageFolder layout: CLASS/FILE)"
        )
    if options.labels and (data.format not in TABLE_FORMATS or _is_label_file(options.labels)):
        data = _with_label_file(data, options.labels)
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
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# --- arrays: one .npy (one input) or one .npz (one array per input) ---------------------------


def _arrays(path: Path, input_names: Sequence[str]) -> DataSet:
    if path.suffix == ".npy":
        if len(input_names) != 1:
            raise UsageError(
                f"--data {path}: a .npy holds one input; the model takes {len(input_names)} "
                f"({', '.join(input_names)}): give a .npz with one array per input"
            )
        return _npy(path, input_names[0])
    else:
        with np.load(path, allow_pickle=False) as z:
            missing = [n for n in input_names if n not in z.files]
            if missing:
                raise UsageError(
                    f"--data {path}: no array named {', '.join(missing)} (it holds "
                    f"{', '.join(z.files) or 'nothing'}; name one array per input)"
                )
            arrays = {n: z[n] for n in input_names}
    lengths = {n: a.shape[0] if a.ndim else 0 for n, a in arrays.items()}
    if len(set(lengths.values())) != 1 or not all(lengths.values()):
        raise InputError(
            f"--data {path}: every array needs the same leading (sample) axis, got "
            + ", ".join(f"{n} {list(a.shape)}" for n, a in arrays.items())
        )
    n = next(iter(lengths.values()))

    def samples(start: int = 0) -> Iterator[Sample]:
        for i in range(start, n):
            yield Sample(i, str(i), {name: np.asarray(a[i]) for name, a in arrays.items()})

    return DataSet(str(path), "npz", n, samples, starting_at=samples)


def _npy(path: Path, name: str) -> DataSet:
    """A .npy read a sample at a time by offset (os.pread): its pages go through the page
    cache, never into this process's memory, so a run's peak memory does not grow with the
    file (a memory map's pages count in the process as they are read). A Fortran-ordered
    file, whose samples are not contiguous, is memory-mapped."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = header(f)
        except ValueError as exc:
            raise InputError(f"--data {path}: not a .npy file ({exc})") from None
        offset = f.tell()
    if not shape:
        raise InputError(f"--data {path}: every array needs a leading (sample) axis, got []")
    if dtype.hasobject:
        raise InputError(f"--data {path}: {dtype} values (objects) cannot be read")
    n, per = shape[0], tuple(shape[1:])
    if not n:
        raise InputError(f"--data {path}: no samples (its shape is {list(shape)})")
    size = int(np.prod(per, dtype=np.int64)) * dtype.itemsize
    mapped = np.load(path, mmap_mode="r", allow_pickle=False) if fortran and n else None

    def samples(start: int = 0) -> Iterator[Sample]:
        with open(path, "rb") as f:
            fd = f.fileno()
            for i in range(start, n):
                if mapped is not None:
                    value = np.array(mapped[i])
                else:
                    raw = os.pread(fd, size, offset + i * size)
                    if len(raw) < size:
                        yield Sample(i, str(i), None, None, "the file ends before this sample")
                        continue
                    value = np.frombuffer(raw, dtype=dtype).reshape(per)
                yield Sample(i, str(i), {name: value})

    return DataSet(str(path), "npy", n, samples, starting_at=samples)


# --- folders: samples as files, flat or in class folders --------------------------------------


def _folder(
    path: Path,
    options: DataOptions,
    input_names: Sequence[str],
    preprocess: Callable[[str], Any] | None,
    processor: Processor | None = None,
) -> DataSet:
    """Files as samples: .npy / .npz as arrays; any other file through --preprocess (which
    takes every file), else the model's own processor (a text file's text kept)."""
    files = sorted((Path(root) / f).relative_to(path) for root, names in _walk(path) for f in names)
    if not files:
        raise InputError(f"--data {path}: the folder holds no file")
    image_folder = all(len(f.parts) == 2 for f in files)
    classes = tuple(sorted({f.parts[0] for f in files})) if image_folder else ()
    label_of = {c: k for k, c in enumerate(classes)}
    if preprocess is None and processor is None:
        other = next((f for f in files if f.suffix not in SAMPLE_FILES), None)
        if other is not None:
            raise UsageError(
                f"--data {path}: {other.as_posix()} is not a .npy / .npz sample; give "
                "--preprocess FILE.py:FN (a function from a path to a dict of input arrays), "
                "or an hf: model whose own processor reads it"
            )

    def read(file: Path) -> tuple[Mapping[str, Any], str]:
        full = str(path / file)
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
            try:
                arrays, text = read(file)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                yield Sample(i, name, None, label, _first_line(exc))
                continue
            yield Sample(i, name, arrays, label, text=text)

    fmt = "imagefolder" if image_folder else "folder"
    labels = "the class folders" if image_folder and not options.labels else None
    used = processor is not None and any(f.suffix not in SAMPLE_FILES for f in files)
    through = processor.name if used and processor is not None else ""
    return DataSet(
        str(path), fmt, len(files), samples, classes, labels, through, starting_at=samples
    )


def _walk(path: Path) -> Iterator[tuple[str, list[str]]]:
    """(folder, its file names) under `path`; hidden files and folders (".ipynb_checkpoints")
    are not samples."""
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        yield root, [f for f in names if not f.startswith(".")]


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
        raise InputError(f"--preprocess {spec}: importing it raised {_first_line(exc)}") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise UsageError(f"--preprocess {spec}: {target} has no function {attr!r}")
    return function


# --- tables: columns named as the inputs ------------------------------------------------------


def _table(
    path: Path, options: DataOptions, input_names: Sequence[str], processor: Processor | None
) -> DataSet:
    """Rows as samples: the columns named as the inputs, else (with the model's processor)
    its text / image column through it."""
    label_column = options.labels if options.labels and not _is_label_file(options.labels) else None
    names, count, read_rows = _table_reader(path)
    column = None
    if processor is not None:
        seen = names if names is not None else _jsonl_names(path)
        if seen is not None and not set(input_names) <= set(seen):
            column = _processor_column(path, seen, processor, label_column)
    wanted = [column] if column else list(input_names)
    columns = [*wanted, *([label_column] if label_column else [])]
    if names is not None:
        _check_columns(path, names, columns)

    def samples() -> Iterator[Sample]:
        for i, row in enumerate(read_rows(columns)):
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
                yield Sample(i, sid, None, None, _first_line(exc))
                continue
            yield Sample(i, sid, arrays, label, text=text)

    labels = f"column {label_column}" if label_column else None
    fmt = "dataset" if path.is_dir() else "table"
    through = f"column {column} through {processor.name}" if column and processor else ""
    return DataSet(str(path), fmt, count, samples, (), labels, through)


Rows = Iterator[dict[str, Any] | str]  # a row, or why it could not be read


def _table_reader(
    path: Path,
) -> tuple[Sequence[str] | None, int | None, Callable[[Sequence[str]], Rows]]:
    """(column names, row count, rows(columns)) of a table; names None where only reading
    tells them (.jsonl), count None where unknown up front."""
    if path.is_dir():  # datasets.save_to_disk: read by datasets, memory-mapped
        dataset = _load_from_disk(path)

        def disk_rows(columns: Sequence[str]) -> Rows:
            for batch in dataset.select_columns(list(columns)).iter(batch_size=_TABLE_ROWS):
                n = len(next(iter(batch.values()))) if batch else 0
                yield from ({c: batch[c][k] for c in columns} for k in range(n))

        return list(dataset.column_names), len(dataset), disk_rows
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path)

        def parquet_rows(columns: Sequence[str]) -> Rows:
            for batch in pq.ParquetFile(path).iter_batches(_TABLE_ROWS, columns=list(columns)):
                yield from batch.to_pylist()

        return table.schema_arrow.names, table.metadata.num_rows, parquet_rows
    if path.suffix == ".arrow":  # Arrow IPC, file or stream (what `datasets` writes)

        def arrow_rows(columns: Sequence[str]) -> Rows:
            for batch in _arrow_batches(path):
                yield from batch.select(list(columns)).to_pylist()

        return _arrow_batches(path).schema.names, None, arrow_rows

    def json_rows(columns: Sequence[str]) -> Rows:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    yield f"not JSON ({_first_line(exc)})"
                    continue
                yield row if isinstance(row, dict) else "not a JSON object"

    return None, None, json_rows  # a row without a column is skipped by name


def _jsonl_names(path: Path) -> list[str] | None:
    """The keys of a .jsonl's first object (None when it has none to read)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError:
                    return None
                return list(row) if isinstance(row, dict) else None
    return None


def _saved_dataset(path: Path) -> bool:
    """A folder `datasets.save_to_disk` wrote (a Dataset: state.json beside its .arrow)."""
    return (path / "state.json").is_file() and (path / "dataset_info.json").is_file()


def _load_from_disk(path: Path) -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise UsageError(
            f"--data {path}: a datasets.save_to_disk folder is read by the datasets package, "
            "which is not installed: pip install datasets"
        ) from exc
    try:
        return datasets.load_from_disk(str(path))
    except Exception as exc:
        raise InputError(f"--data {path}: datasets cannot load it: {_first_line(exc)}") from exc


def _processor_column(
    path: Path, names: Sequence[str], processor: Processor, label_column: str | None
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
        f"--data {path}: no column named as the inputs, and no {processor.kind} column for "
        f"{processor.name} (it has {', '.join(names)}; name it one of {usual})"
    )


def _arrow_batches(path: Path) -> Any:
    """An Arrow IPC file's record batches, one at a time (a reader with `.schema`): the
    random-access file format, else the stream format."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(path)
    except pa.ArrowInvalid:
        try:
            return pa.ipc.open_stream(path)
        except pa.ArrowInvalid as exc:
            raise InputError(f"--data {path}: not an Arrow IPC file ({exc})") from exc

    class _Batches:
        schema = reader.schema

        def __iter__(self) -> Iterator[Any]:
            return (reader.get_batch(i) for i in range(reader.num_record_batches))

    return _Batches()


def _check_columns(path: Path, names: Sequence[str], columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in names]
    if missing:
        raise UsageError(
            f"--data {path}: no column {', '.join(missing)} (it has {', '.join(names)}); "
            "name one column per input"
        )


# --- labels from a file -----------------------------------------------------------------------


def _is_label_file(labels: str) -> bool:
    return labels.endswith(".npy")


def _with_label_file(data: DataSet, labels: str) -> DataSet:
    """The samples with labels from a .npy (one per sample, in the samples' order)."""
    if not _is_label_file(labels):
        raise UsageError(
            f"--labels {labels}: a column name applies to a table; give a .npy of labels"
        )
    if not Path(labels).is_file():
        raise InputError(f"--labels {labels}: no such file")
    values = np.load(labels, mmap_mode="r", allow_pickle=False)
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise InputError(
            f"--labels {labels}: expected one integer label per sample, got "
            f"{values.dtype} {list(values.shape)}"
        )
    if data.count is not None and len(values) < data.count:
        raise InputError(f"--labels {labels}: {len(values)} labels for {data.count} samples")

    def labelled(samples: Iterator[Sample]) -> Iterator[Sample]:
        for s in samples:
            label = int(values[s.index]) if s.index < len(values) else None
            yield replace(s, label=label)

    return replace(
        data,
        samples=lambda: labelled(data.samples()),
        starting_at=lambda start: labelled(data.samples_from(start)),
        labels=labels,
    )
