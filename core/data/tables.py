"""A table's rows, one at a time, from any row on: a `.parquet` (row groups skipped by their
stated sizes), an Arrow IPC file or stream (`.arrow`, batches skipped whole), a `.jsonl`
(lines before the start skipped unparsed), or a `datasets.save_to_disk` folder (read by
datasets, memory-mapped: a path on this machine only). A file is read where it lies
(parity.data.storage: a path, or an object in a bucket read by ranges).

The row count is known up front for a parquet file and a saved dataset; a `.jsonl` or
`.arrow` is counted by a first pass (`TableReader.counted`: its lines, its batches' sizes,
nothing decoded into rows), which a run on Ray needs to shard it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from parity.data.storage import Storage
from parity.errors import InputError, UsageError, first_line

TABLES = (".parquet", ".jsonl", ".arrow")
_TABLE_ROWS = 256  # rows a table reader decodes at once

Rows = Iterator[dict[str, Any] | str]  # a row, or why it could not be read


@dataclass(frozen=True)
class TableReader:
    """A table opened: its column names (None where only reading tells them: .jsonl), its
    row count where known up front, `rows(columns, start)` the rows numbered `start` on, and
    `counted()` a first pass counting them where the count is not known."""

    names: Sequence[str] | None
    count: int | None
    rows: Callable[[Sequence[str], int], Rows]
    counted: Callable[[], int] | None = None


def table_reader(store: Storage) -> TableReader:
    if store.is_dir():
        return _saved(store)
    if store.suffix == ".parquet":
        return _parquet(store)
    if store.suffix == ".arrow":
        return _arrow(store)
    return _jsonl(store)


def _saved(store: Storage) -> TableReader:
    """A datasets.save_to_disk folder: read by datasets, memory-mapped."""
    if store.remote:
        raise UsageError(
            f"--data {store.shown}: a datasets.save_to_disk folder is read at a path "
            "(datasets maps it into memory); in object storage give its .arrow file"
        )
    dataset = _load_from_disk(store.given)

    def rows(columns: Sequence[str], start: int) -> Rows:
        part = dataset.select_columns(list(columns))
        if start:
            part = part.select(range(start, len(part)))
        for batch in part.iter(batch_size=_TABLE_ROWS):
            n = len(next(iter(batch.values()))) if batch else 0
            yield from ({c: batch[c][k] for c in columns} for k in range(n))

    return TableReader(list(dataset.column_names), len(dataset), rows)


def _load_from_disk(path: str) -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise UsageError(
            f"--data {path}: a datasets.save_to_disk folder is read by the datasets package, "
            "which is not installed: pip install datasets"
        ) from exc
    try:
        return datasets.load_from_disk(path)
    except Exception as exc:
        raise InputError(f"--data {path}: datasets cannot load it: {first_line(exc)}") from exc


def _parquet(store: Storage) -> TableReader:
    import pyarrow.parquet as pq

    with store.open() as fh:
        try:
            meta = pq.ParquetFile(fh).metadata
        except Exception as exc:  # noqa: BLE001 - pyarrow's words name what is wrong
            said = first_line(exc)
            raise InputError(f"--data {store.shown}: not a parquet file ({said})") from None
        names = meta.schema.to_arrow_schema().names
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]

    def rows(columns: Sequence[str], start: int) -> Rows:
        first, skip = 0, start
        while first < len(sizes) and skip >= sizes[first]:  # whole row groups, unread
            skip -= sizes[first]
            first += 1
        if first >= len(sizes):
            return
        with store.open() as fh:
            groups = list(range(first, len(sizes)))
            for batch in pq.ParquetFile(fh).iter_batches(
                _TABLE_ROWS, row_groups=groups, columns=list(columns)
            ):
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                yield from batch.slice(skip).to_pylist()
                skip = 0

    return TableReader(names, meta.num_rows, rows)


def _arrow(store: Storage) -> TableReader:
    """Arrow IPC, the file format or the stream format (what `datasets` writes)."""
    with store.open() as fh:
        names = _arrow_batches(fh, store).schema.names

    def batches() -> Iterator[Any]:
        with store.open() as fh:
            yield from _arrow_batches(fh, store)

    def rows(columns: Sequence[str], start: int) -> Rows:
        skip = start
        for batch in batches():
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            yield from batch.select(list(columns)).slice(skip).to_pylist()
            skip = 0

    return TableReader(names, None, rows, lambda: sum(b.num_rows for b in batches()))


def _arrow_batches(fh: IO[bytes], store: Storage) -> Any:
    """An Arrow IPC file's record batches, one at a time (an iterable with `.schema`): the
    random-access file format, else the stream format."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(fh)
    except pa.ArrowInvalid:
        fh.seek(0)
        try:
            return pa.ipc.open_stream(fh)
        except pa.ArrowInvalid as exc:
            raise InputError(f"--data {store.shown}: not an Arrow IPC file ({exc})") from exc

    class _Batches:
        schema = reader.schema

        def __iter__(self) -> Iterator[Any]:
            return (reader.get_batch(i) for i in range(reader.num_record_batches))

    return _Batches()


def _lines(store: Storage) -> Iterator[str]:
    """A .jsonl's lines that are not blank, decoded, as a text file reads them (universal
    newlines): the rows, numbered alike by every reader and by the count."""
    with store.open() as fh, io.TextIOWrapper(fh, encoding="utf-8") as text:
        yield from (line for line in text if line.strip())


def _jsonl(store: Storage) -> TableReader:
    def rows(columns: Sequence[str], start: int) -> Rows:
        for k, line in enumerate(_lines(store)):
            if k < start:
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                yield f"not JSON ({reason(exc)})"
                continue
            yield row if isinstance(row, dict) else "not a JSON object"

    # a row without a column is skipped by name
    return TableReader(None, None, rows, lambda: sum(1 for _ in _lines(store)))


def reason(exc: BaseException) -> str:
    """Why a sample could not be read: the exception's type and first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def jsonl_names(store: Storage) -> list[str] | None:
    """The keys of a .jsonl's first object (None when it has none to read)."""
    for line in _lines(store):
        try:
            row = json.loads(line)
        except ValueError:
            return None
        return list(row) if isinstance(row, dict) else None
    return None


def check_columns(store: Storage, names: Sequence[str], columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in names]
    if missing:
        raise UsageError(
            f"--data {store.shown}: no column {', '.join(missing)} (it has {', '.join(names)}); "
            "name one column per input"
        )
