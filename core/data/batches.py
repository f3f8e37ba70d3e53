"""Samples stacked into batches the ONNX file takes: each sample checked against the inputs
(names, rank, fixed sizes, dtype cast), a bad one skipped by name with its reason; samples
of other sizes start a new batch, but token ids (`pad`: an hf: tokenizer's inputs) are padded
at their end to the batch's longest; a file with a fixed batch size gets batches of that size
(the last one padded with copies of its last sample, `n_real` says how many are real).
Too many skipped (more than --max-bad of those read) ends the run: InputError, one line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from parity.data.read import Sample
from parity.data.result import Skipped
from parity.errors import InputError
from parity.limits.budget import MemoryBudget
from parity.signature import TensorSpec


@dataclass(frozen=True)
class Batch:
    """Samples stacked: `feeds` by input name (leading axis: samples), each sample's number
    in the data set, id and label (-1: none); the first `n_real` rows are real samples."""

    index: int
    feeds: dict[str, np.ndarray]
    samples: np.ndarray  # int64, one per real row
    ids: tuple[str, ...]
    labels: np.ndarray | None  # int64, one per real row (None: no labels)
    n_real: int
    texts: tuple[str, ...] = ()  # each real row's text, where a tokenizer read texts
    # rows whose inputs `feeds` holds, in order (None: every row): a batch judged on a Ray
    # worker comes back with the inputs of the rows that may be among the worst only
    kept: tuple[int, ...] | None = None
    n_rows: int = 0  # rows run, padding included (0: those of `feeds`)

    @property
    def rows(self) -> int:
        """Rows the models ran on, padding included."""
        return self.n_rows or len(next(iter(self.feeds.values())))

    def inputs_of(self, row: int) -> dict[str, np.ndarray]:
        """Row `row`'s inputs (copies)."""
        at = row if self.kept is None else self.kept.index(row)
        return {k: np.array(v[at]) for k, v in self.feeds.items()}

    def keeping(self, rows: Sequence[int]) -> Batch:
        """This batch with the inputs of `rows` only (the rest let go)."""
        kept = tuple(sorted(set(rows)))
        feeds = {k: np.ascontiguousarray(v[list(kept)]) for k, v in self.feeds.items()}
        return replace(self, feeds=feeds, kept=kept, n_rows=self.rows)

    @property
    def label(self) -> str:
        first, last = int(self.samples[0]), int(self.samples[-1])
        return f"samples {first}-{last}" if last != first else f"sample {first}"


def fixed_batch(inputs: Sequence[TensorSpec]) -> int | None:
    """The batch size a file fixes on its inputs' first axis (None: dynamic)."""
    sizes = {s.shape[0] for s in inputs if s.shape and isinstance(s.shape[0], int)}
    return min(sizes) if sizes else None


class Batcher:
    """Turns samples into batches; `skipped` and `read` grow as it goes."""

    def __init__(
        self,
        inputs: Sequence[TensorSpec],
        batch_size: int,
        max_bad: float,
        expected: int | None,
        budget: MemoryBudget | None = None,
        pad: Mapping[str, int] | None = None,
    ) -> None:
        self._inputs = tuple(inputs)
        self._pad = dict(pad or {})  # input -> pad value: lengths may differ within a batch
        self._budget = budget
        self._checked_shapes: set[tuple[tuple[int, ...], ...]] = set()
        fixed = fixed_batch(inputs)
        self.batch_size = fixed or batch_size
        self.fixed = fixed is not None
        self._max_bad = max_bad
        self._expected = expected
        self.skipped: list[Skipped] = []
        self.read = 0

    def batches(self, samples: Iterator[Sample]) -> Iterator[Batch]:
        pending: list[tuple[Sample, dict[str, np.ndarray]]] = []
        index = 0
        for sample in samples:
            self.read += 1
            checked = self._checked(sample)
            if checked is None:
                self._check_bad(final=False)
                continue
            key = self._key(checked)
            self._check_budget(key, checked)
            if pending and (self._key(pending[0][1]) != key or len(pending) >= self.batch_size):
                yield self._stack(index, pending)
                index += 1
                pending = []
            pending.append((sample, checked))
        self._check_bad(final=True)
        if pending:
            yield self._stack(index, pending)

    def _key(self, arrays: dict[str, np.ndarray]) -> tuple[tuple[int, ...], ...]:
        """What samples of one batch share: their shapes, but a padded input's length."""
        return tuple(a.shape[1:] if n in self._pad else a.shape for n, a in arrays.items())

    def _checked(self, sample: Sample) -> dict[str, np.ndarray] | None:
        """The sample's arrays in the inputs' dtypes, or None (skipped, with why)."""
        if sample.arrays is None:
            self.skipped.append(Skipped(sample.id, sample.reason or "could not be read"))
            return None
        out = {}
        for spec in self._inputs:
            problem = ""
            value = sample.arrays.get(spec.name)
            if value is None:
                problem = f"no input {spec.name}"
            else:
                try:
                    array = np.asarray(value)
                    if array.dtype.kind not in "biuf":
                        raise TypeError(f"{array.dtype} values")
                    array = array.astype(spec.dtype, copy=False)
                except (TypeError, ValueError) as exc:
                    problem = f"input {spec.name}: {exc}"
                else:
                    problem = _shape_problem(spec, array.shape)
            if problem:
                self.skipped.append(Skipped(sample.id, problem))
                return None
            out[spec.name] = array
        return out

    def _check_budget(
        self, key: tuple[tuple[int, ...], ...], arrays: dict[str, np.ndarray]
    ) -> None:
        """A batch of samples this size within --max-memory (BudgetError, one line, naming
        --batch-size), checked once per sample size before the batch is stacked."""
        if self._budget is None or key in self._checked_shapes:
            return
        self._checked_shapes.add(key)
        n_bytes = self.batch_size * sum(a.nbytes for a in arrays.values())
        self._budget.check(
            n_bytes,
            f"a batch of {self.batch_size} samples of {', '.join(map(str, key))}",
            proceed="give a smaller --batch-size",
        )

    def check_bad(self, *, final: bool) -> None:
        """`_check_bad` for samples batched elsewhere (the shards of a run on Ray), counted
        into `read` and `skipped` by the caller."""
        self._check_bad(final=final)

    def _check_bad(self, *, final: bool) -> None:
        """InputError once more samples were skipped than --max-bad allows of the data set
        (early where its size is known, else at the end)."""
        total = self.read if final or self._expected is None else self._expected
        if not self.skipped or len(self.skipped) <= self._max_bad * total:
            return
        if not final and self._expected is None:
            return
        first = self.skipped[0]
        raise InputError(
            f"--data: {len(self.skipped)} of {total} samples could not be used, more than "
            f"--max-bad {self._max_bad:.3g} allows; first: {first.id}: {first.reason}"
        )

    def _stack(self, index: int, pending: list[tuple[Sample, dict[str, np.ndarray]]]) -> Batch:
        n_real = len(pending)
        rows = pending + [pending[-1]] * (self.batch_size - n_real if self.fixed else 0)
        feeds = {
            s.name: _stacked([arrays[s.name] for _, arrays in rows], self._pad.get(s.name))
            for s in self._inputs
        }
        labels = [s.label for s, _ in pending]
        return Batch(
            index=index,
            feeds=feeds,
            samples=np.array([s.index for s, _ in pending], dtype=np.int64),
            ids=tuple(s.id for s, _ in pending),
            labels=None
            if any(label is None for label in labels)
            else np.array(labels, dtype=np.int64),
            n_real=n_real,
            texts=tuple(s.text for s, _ in pending) if any(s.text for s, _ in pending) else (),
        )


def _stacked(arrays: list[np.ndarray], pad: int | None) -> np.ndarray:
    """Samples stacked; with a pad value, each first padded at its end to the longest."""
    longest = max(a.shape[0] for a in arrays) if pad is not None and arrays[0].ndim else 0
    if pad is None or all(a.shape[0] == longest for a in arrays):
        return np.stack(arrays)
    out = np.full((len(arrays), longest, *arrays[0].shape[1:]), pad, dtype=arrays[0].dtype)
    for k, a in enumerate(arrays):
        out[k, : a.shape[0]] = a
    return out


def _shape_problem(spec: TensorSpec, shape: tuple[int, ...]) -> str:
    """Why a sample of `shape` cannot be a row of input `spec` ("" when it can)."""
    want = spec.shape[1:]
    if len(shape) != len(want):
        return (
            f"input {spec.name} has shape {list(shape)} where the model takes "
            f"{_text(want)} per sample"
        )
    for got, dim in zip(shape, want, strict=True):
        if isinstance(dim, int) and got != dim:
            return (
                f"input {spec.name} has shape {list(shape)} where the model takes "
                f"{_text(want)} per sample"
            )
    return ""


def _text(dims: Sequence[object]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
