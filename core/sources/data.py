"""Source: a data set (`--data`) read in batches, and the torch model run on each batch.

Each case is one batch of samples (parity.data.batches): the loop runs every candidate on it
and compares its outputs element by element as for any input set, and the answers analysis
(parity.analyses.answers) reads the batch's samples, ids and labels from here. The run keeps
no batch's arrays (`keeps_arrays`): memory of a batch, never of the data set.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from parity.results import InputSet
from parity.run.config import Loaders, RunConfig
from parity.run.progress import ProgressReporter
from parity.signature import OnnxSignature
from parity.sources import Case
from parity.sources.torch_inputs import TorchSource

if TYPE_CHECKING:
    from parity.data.batches import Batch, Batcher
    from parity.data.read import DataSet


class DataSource(TorchSource):
    """Each case: a batch of the user's samples, and the torch model run on it once."""

    keeps_arrays = False
    runs_other_sizes = False  # no frozen-size search: the data's sizes are the data's

    def __init__(self, config: RunConfig, loaders: Loaders, report: ProgressReporter) -> None:
        super().__init__(config, loaders, report)
        assert config.data is not None
        self.options = config.data
        self.n_cases = None
        self.dataset: DataSet | None = None  # once opened
        self.batcher: Batcher | None = None
        self._current: Batch | None = None  # the batch of the case the loop runs now

    def batch(self, index: int) -> Batch | None:
        """The batch of the case numbered `index`: the one the
        loop runs now (earlier ones are let go)."""
        current = self._current
        return current if current is not None and current.index == index else None

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        from parity.data.batches import Batcher
        from parity.data.read import open_data
        from parity.run.runner import run_torch

        self.timings.update(load_model=0.0, inputs=0.0, torch=0.0)
        t0 = time.perf_counter()
        self.dataset = data = open_data(self.options, signature.input_names)
        from parity.limits.budget import MemoryBudget

        self.batcher = Batcher(
            signature.inputs,
            self.options.batch_size,
            self.options.max_bad,
            data.count,
            MemoryBudget.of(self._config.max_memory),
        )
        if data.count:
            self.n_cases = math.ceil(data.count / self.batcher.batch_size)
        self.timings["inputs"] += time.perf_counter() - t0
        self._report("load", f"loading model {self.model}", 0.05)
        t0 = time.perf_counter()
        self._torch = self._loaders.load_torch_model(
            self.model, weights=self._config.weights, max_memory=self._config.max_memory
        )
        self.timings["load_model"] = time.perf_counter() - t0
        started = time.perf_counter()
        done = 0
        batches = self.batcher.batches(data.samples())
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            self.timings["inputs"] += time.perf_counter() - t0
            if batch is None:
                self._current = None
                return
            self._current = batch
            self._report("torch", f"torch on {batch.label}{_rate(done, started, data.count)}")
            input_set = InputSet(index=batch.index, feeds=batch.feeds, label=batch.label)
            reference = run_torch(self._torch, input_set, signature)
            self.timings["torch"] += reference.seconds
            done += batch.n_real
            yield Case(input_set=input_set, reference=reference)


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
