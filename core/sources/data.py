"""Source: a data set (`--data`) read in batches, and the torch model run on each batch.

Each case is one batch of samples (parity.data.batches): the loop runs every candidate on it
and compares its outputs element by element as for any input set, and the answers analysis
(parity.analyses.answers) reads the batch's samples, ids and labels from here. The run keeps
no batch's arrays (`keeps_arrays`): memory of a batch, never of the data set. `DataBatches`
is what every data source shares (this torch one, and an hf: folder's,
parity.hf.data_source): the data set opened, its batches read one at a time with the
progress said.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from parity.results import InputSet
from parity.run.config import Loaders, RunConfig
from parity.run.progress import ProgressReporter
from parity.signature import OnnxSignature
from parity.sources import Case
from parity.sources.torch_inputs import TorchSource

if TYPE_CHECKING:
    from parity.data.batches import Batch, Batcher
    from parity.data.read import DataSet


class DataBatches:
    """A data source's batches: `dataset` and `batcher` once `open` ran (what the answers
    analysis reads after the cases), the batch the loop runs now (`batch(index)`)."""

    keeps_arrays = False
    runs_other_sizes = False  # no frozen-size search: the data's sizes are the data's
    n_cases: int | None
    timings: dict[str, float]
    _report: ProgressReporter

    def _start_data(self, config: RunConfig) -> None:
        assert config.data is not None
        self.data_options = config.data
        self._data_memory = config.max_memory
        self.n_cases = None
        self.dataset: DataSet | None = None  # once opened
        self.batcher: Batcher | None = None
        self._current: Batch | None = None  # the batch of the case the loop runs now

    def known_tasks(self) -> dict[str, str]:
        """Output -> task where the model says it (an hf: config's id2label); {}: inferred."""
        return {}

    def batch(self, index: int) -> Batch | None:
        """The batch of the case numbered `index`: the one the
        loop runs now (earlier ones are let go)."""
        current = self._current
        return current if current is not None and current.index == index else None

    def _open_data(self, signature: OnnxSignature, processor: Any = None) -> None:
        """The data set opened for this file's inputs (`processor`: the model's own,
        parity.data.read.Processor), its batcher made; timed as inputs."""
        from parity.data.batches import Batcher
        from parity.data.read import open_data
        from parity.limits.budget import MemoryBudget

        t0 = time.perf_counter()
        budget = MemoryBudget.of(self._data_memory)
        self.dataset = data = open_data(self.data_options, signature.input_names, processor, budget)
        self.batcher = Batcher(
            signature.inputs,
            self.data_options.batch_size,
            self.data_options.max_bad,
            data.count,
            budget,
            pad=processor.pad if processor is not None else None,
        )
        if data.count:
            self.n_cases = math.ceil(data.count / self.batcher.batch_size)
        self.timings["inputs"] = self.timings.get("inputs", 0.0) + time.perf_counter() - t0

    def _cases_of(self, reference: Callable[[Any, InputSet], Case]) -> Iterator[Case]:
        """One case per batch, read as the loop asks for it: `reference(batch, input_set)`
        runs torch on it (timed by the caller); progress in samples/s and the time left."""
        started = time.perf_counter()
        done = 0
        assert self.batcher is not None and self.dataset is not None  # opened before the cases
        dataset = self.dataset
        batches = self.batcher.batches(dataset.samples())
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            self.timings["inputs"] += time.perf_counter() - t0
            if batch is None:
                self._current = None
                return
            self._current = batch
            rate = _rate(done, started, dataset.count)
            self._report("torch", f"torch on {batch.label}{rate}")
            input_set = InputSet(index=batch.index, feeds=batch.feeds, label=batch.label)
            case = reference(batch, input_set)
            done += batch.n_real
            yield case


class DataSource(DataBatches, TorchSource):
    """Each case: a batch of the user's samples, and the torch model run on it once."""

    keeps_arrays = False
    runs_other_sizes = False

    def __init__(self, config: RunConfig, loaders: Loaders, report: ProgressReporter) -> None:
        super().__init__(config, loaders, report)
        self._start_data(config)

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        from parity.run.runner import run_torch

        self.timings.update(load_model=0.0, inputs=0.0, torch=0.0)
        self._open_data(signature)
        self._report("load", f"loading model {self.model}", 0.05)
        t0 = time.perf_counter()
        self._torch = self._loaders.load_torch_model(
            self.model, weights=self._config.weights, max_memory=self._config.max_memory
        )
        self.timings["load_model"] = time.perf_counter() - t0

        torch_model = self._torch
        assert torch_model is not None

        def reference(batch: Any, input_set: InputSet) -> Case:
            made = run_torch(torch_model, input_set, signature)
            self.timings["torch"] += made.seconds
            return Case(input_set=input_set, reference=made)

        yield from self._cases_of(reference)


def _rate(done: int, started: float, total: int | None) -> str:
    """ " (120 samples/s, ETA 0:04)" once some samples are done."""
    seconds = time.perf_counter() - started
    if not done or seconds <= 0:
        return f" of {total}" if total else ""
    rate = done / seconds
    text = f" ({rate:,.0f} samples/s"
    if total:
        left = max(total - done, 0) / rate
        text += f", ETA {int(left // 60)}:{int(left % 60):02d}"
    return text + ")"
