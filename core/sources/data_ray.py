"""Source: a data set judged on Ray (`--data PATH --engine ray`), the same cases as
parity.sources.data's, each batch run where its shard was read.

The driver plans shards (ranges of sample numbers, whole batches each; a .jsonl's or
.arrow's rows counted by a first pass), and Ray Data runs them:
`from_items(shards).map_batches(ShardRunner, concurrency=N)`, an actor per worker that loads
the torch model and the ONNX session once and opens the data set once. A shard's actor reads
its samples with Parity's own reader from the shard's first sample on (parity.data.read: the
same ids, labels and skip reasons as a local run; a parquet's earlier row groups, a .npy's
earlier bytes not read), stacks them into batches (parity.data.batches), runs torch
and ONNX Runtime on each, and sends back per batch both sides' outputs and the inputs of the
rows that may be among an output's worst (parity.data.answers.rows_worth_keeping), never the
whole batch's inputs. The driver takes the shards in order, one at a time (Ray Data streams
them: memory of a shard, never of the data set), and yields one case per batch with the
candidate's outputs already computed (`Case.computed`): the loop compares and the answers
analysis reads them as on a local run, so the numbers are the local engine's.

The model, its weights, the ONNX file (and its external data), a --preprocess file and a
--labels .npy travel through Ray's object store as a sweep's files do (parity.files.ship,
each factory with what lies beside it); the data set itself is read by the workers where it
lies (parity.data.storage): an object-storage URI (s3://, gs://, ...) with the workers' own
credentials, or a path every node sees. The model file is code: it is loaded on the driver
first through the run's loaders (the same refusal of code a front end applies), then on each
worker.
"""

from __future__ import annotations

import logging
import math
import pickle
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from parity.data.batches import Batch
from parity.data.options import DataOptions
from parity.data.result import Skipped
from parity.errors import ModelRunError, ParityError, UsageError, first_line
from parity.files.ship import Bundle, ContentStore, Shipped, beside_factory, external_data, unpack
from parity.load.specs import DEMO_PREFIX
from parity.results import InputSet, OutputSet
from parity.run.config import Loaders, RunConfig
from parity.run.progress import ProgressReporter
from parity.signature import OnnxSignature
from parity.sources import Case
from parity.sources.data import DataSource, _rate

if TYPE_CHECKING:
    from parity.data.read import DataSet

SHARD_BATCHES = 4
"""Batches per shard: small enough that every worker gets several, large enough that a
shard's setup (opening the data set) is amortised."""


@dataclass(frozen=True)
class ShardJob:
    """What every shard's actor needs: where the shipped files go in its folder, and how to
    read and run (the options with the shipped paths in place of the driver's)."""

    bundle: Bundle
    model: str
    weights: str | None
    onnx: str
    provider: str
    opt_level: str
    options: DataOptions
    signature: OnnxSignature
    max_memory: int | None


@dataclass(frozen=True)
class BatchRun:
    """One batch run on a worker: the batch (the inputs of its worth-keeping rows only) and
    both sides' outputs."""

    batch: Batch
    reference: OutputSet
    onnx: OutputSet


@dataclass(frozen=True)
class ShardRun:
    """One shard's batches, in order, with the samples it read and those it skipped."""

    start: int
    batches: tuple[BatchRun, ...]
    skipped: tuple[Skipped, ...]
    read: int


class RayDataSource(DataSource):
    """Each case: a batch of the user's samples, run by torch and the ONNX file on Ray."""

    def __init__(self, config: RunConfig, loaders: Loaders, report: ProgressReporter) -> None:
        super().__init__(config, loaders, report)
        assert config.data is not None
        self._data = config.data

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        from parity.data.batches import Batcher
        from parity.data.read import open_data
        from parity.limits.budget import MemoryBudget
        from parity.run.ray_cluster import connect, import_ray, prints_to_stderr

        ray = import_ray()
        if _file_of(self.model) is None and not self.model.startswith(DEMO_PREFIX):
            raise UsageError(
                f"--engine ray: the model ({self.model}) is not a file the workers can load: "
                "give FILE.py:make, an exported or TorchScript file, or demo:NAME"
            )
        self.timings.update(load_model=0.0, inputs=0.0, torch=0.0)
        t0 = time.perf_counter()
        budget = MemoryBudget.of(self._config.max_memory)
        data = open_data(self._data, signature.input_names, budget=budget)
        count = data.size()  # a .jsonl's or .arrow's by a first pass: shards need it
        assert count is not None  # every format is counted
        self.dataset = data = replace(data, count=count)
        self.timings["inputs"] = time.perf_counter() - t0
        batcher = Batcher(
            signature.inputs, self._data.batch_size, self._data.max_bad, count, budget
        )
        self.batcher = batcher
        self.n_cases = math.ceil(count / batcher.batch_size)
        self._report("load", f"loading model {self.model}", 0.05)
        t0 = time.perf_counter()  # on the driver first: the run's loaders refuse code there
        self._loaders.load_torch_model(
            self.model, weights=self._config.weights, max_memory=self._config.max_memory
        )
        self.timings["load_model"] = time.perf_counter() - t0
        shard = batcher.batch_size * SHARD_BATCHES
        shards = [{"start": a, "stop": min(a + shard, count)} for a in range(0, count, shard)]
        started = not ray.is_initialized()
        with prints_to_stderr():
            if started:
                connect(ray, self._data.ray_address, self._data.workers)
            try:
                job = self._job(ray, signature)
                yield from self._run(ray, job, shards, count)
            finally:
                if started:
                    ray.shutdown()

    def _job(self, ray: Any, signature: OnnxSignature) -> ShardJob:
        """The files the actors need, shipped, and the job naming them in an actor's folder."""
        store = ContentStore(ray.put)
        files: dict[str, Shipped] = {}

        def ship(path: str, folder: str) -> str:
            source = Path(path)
            rel = f"{folder}/{source.name}"
            found = [(source, rel)]
            if source.suffix == ".py":
                found += [(p, f"{folder}/{p.relative_to(source.parent).as_posix()}")
                          for p in beside_factory(source)]  # fmt: skip
            elif source.suffix == ".onnx":
                found += [(source.parent / loc, f"{folder}/{loc}") for loc in external_data(source)]
            for where, target in found:
                files.setdefault(target, store.ship(where, target))
            return rel

        def code(spec: str | None, folder: str) -> str | None:
            """FILE.py:NAME or a model file as shipped; anything else (demo:NAME) as it is."""
            if spec is None:
                return None
            file = _file_of(spec)
            if file is None:
                return spec
            return ship(file, folder) + spec[len(file) :]

        config, options = self._config, self._data
        onnx = config.onnx_files[0]
        labels = options.labels
        job = ShardJob(
            bundle=Bundle((), ()),
            model=code(self.model, "model") or self.model,
            weights=ship(config.weights, "weights") if config.weights else None,
            onnx=ship(onnx, "onnx"),
            provider=config.providers[0],
            opt_level=config.ort_opt_levels[0],
            options=replace(
                options,
                preprocess=code(options.preprocess, "preprocess"),
                labels=ship(labels, "labels") if _label_file(labels) else labels,
                max_bad=1.0,  # judged on the driver, over every shard
                engine="local",
            ),
            signature=signature,
            max_memory=config.max_memory,
        )
        return replace(job, bundle=Bundle(tuple(files.values()), ()))

    def _run(
        self, ray: Any, job: ShardJob, shards: list[dict[str, int]], total: int
    ) -> Iterator[Case]:
        from parity.run.ray_cluster import GPU_PROVIDERS, cluster_cpus

        logging.getLogger("ray.data").setLevel(logging.WARNING)  # its INFO lines: stderr noise
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # shards come back in order
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        workers = max(1, min(len(shards), cluster_cpus(ray), self._data.workers or len(shards)))
        gpu = job.provider in GPU_PROVIDERS
        if gpu:  # an actor per GPU: one that no node can place would wait forever
            gpus = int(ray.cluster_resources().get("GPU", 0))
            if not gpus:
                raise UsageError(
                    f"--engine ray: {job.provider} needs a GPU, and the Ray cluster has none: "
                    "run on a cluster with a GPU node, or with --provider CPUExecutionProvider"
                )
            workers = min(workers, gpus)
        runs = ray.data.from_items(shards, override_num_blocks=len(shards)).map_batches(
            ShardRunner,
            fn_constructor_kwargs={"job": job},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=1,
            num_gpus=1 if gpu else 0,
            batch_format="numpy",
        )
        batcher, index, done, started = self.batcher, 0, 0, time.perf_counter()
        assert batcher is not None  # opened before the cases
        t0 = time.perf_counter()
        for shard in _shard_runs(ray, runs):
            self.timings["inputs"] += time.perf_counter() - t0
            batcher.read += shard.read
            batcher.skipped.extend(shard.skipped)
            batcher.check_bad(final=False)
            for run in shard.batches:
                batch = replace(run.batch, index=index)
                self._current = batch
                self._report("torch", f"ray: {batch.label}{_rate(done, started, total)}")
                input_set = InputSet(index=index, feeds={}, label=batch.label)
                self.timings["torch"] += run.reference.seconds
                done += batch.n_real
                index += 1
                yield Case(input_set=input_set, reference=run.reference, computed=run.onnx)
            t0 = time.perf_counter()
        batcher.check_bad(final=True)
        self._current = None


def _file_of(spec: str) -> str | None:
    """The file a model or --preprocess text names (FILE.py of FILE.py:NAME, or the path
    itself), None for another kind (demo:NAME, a model in memory)."""
    target, sep, _ = spec.rpartition(":")
    if sep and target.endswith(".py") and Path(target).is_file():
        return target
    return spec if Path(spec).is_file() else None


def _label_file(labels: str | None) -> TypeGuard[str]:
    """--labels names a .npy on this machine (shipped), not a column or a URI (read there)."""
    return bool(labels and labels.endswith(".npy") and Path(labels).is_file())


def _shard_runs(ray: Any, runs: Any) -> Iterator[ShardRun]:
    """The shards' runs in order; what a worker raised, as the error it is (a ParityError
    as raised there, anything else one line naming the worker)."""
    try:
        for row in runs.iter_rows():
            yield pickle.loads(row["run"])
    except ray.exceptions.RayError as exc:
        cause = _innermost(exc)
        if isinstance(cause, ParityError):
            raise cause from None
        raise ModelRunError(f"--engine ray: a worker raised {first_line(cause)}") from None


def _innermost(exc: BaseException) -> BaseException:
    """The exception under Ray's wrappers (RayTaskError, Ray Data's UserCodeException)."""
    seen = exc
    for _ in range(8):
        nxt = getattr(seen, "cause", None) or seen.__cause__
        if nxt is None or nxt is seen:
            break
        seen = nxt
    return seen


class ShardRunner:
    """A Ray Data actor: the shipped files written into a private folder, the torch model
    and the ONNX session loaded once; each call runs one shard."""

    def __init__(self, job: ShardJob) -> None:
        import ray

        from parity.load.onnx_model import load_onnx, make_session
        from parity.load.torch_model import load_torch_model

        self._folder = tempfile.TemporaryDirectory(prefix="parity-data-")
        root = Path(self._folder.name)
        unpack(job.bundle, root, ray.get)

        def here(rel: str | None) -> str | None:
            if rel is None:
                return None
            path, sep, attr = rel.rpartition(":")
            if sep and path.endswith(".py") and (root / path).is_file():
                return f"{root / path}:{attr}"
            return str(root / rel) if (root / rel).is_file() else rel

        self.job = job
        self.options = replace(
            job.options, preprocess=here(job.options.preprocess), labels=here(job.options.labels)
        )
        self.torch = load_torch_model(
            here(job.model) or job.model, weights=here(job.weights), max_memory=job.max_memory
        )
        self.session = make_session(
            load_onnx(str(root / job.onnx)), provider=job.provider, opt_level=job.opt_level
        )
        self.data: DataSet | None = None

    def __call__(self, shard: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        start, stop = int(shard["start"][0]), int(shard["stop"][0])
        run = self.run(start, stop)
        return {"run": np.array([pickle.dumps(run, protocol=5)], dtype=object)}

    def run(self, start: int, stop: int) -> ShardRun:
        from itertools import takewhile

        from parity.data.answers import answers_for, rows_worth_keeping
        from parity.data.batches import Batcher
        from parity.data.read import open_data
        from parity.limits.budget import MemoryBudget
        from parity.run.runner import run_onnx, run_torch

        signature = self.job.signature
        if self.data is None:  # opened once per actor (an .npz's arrays read once)
            budget = MemoryBudget.of(self.job.max_memory)
            self.data = open_data(self.options, signature.input_names, budget=budget)
        data = self.data
        batcher = Batcher(
            signature.inputs, self.options.batch_size, 1.0, None,
            MemoryBudget.of(self.job.max_memory),
        )  # fmt: skip
        samples = takewhile(lambda s: s.index < stop, data.samples_from(start))
        tasks: dict[str, str] | None = None
        runs = []
        for batch in batcher.batches(samples):
            input_set = InputSet(index=batch.index, feeds=batch.feeds, label=batch.label)
            reference = run_torch(self.torch, input_set, signature)
            onnx = run_onnx(self.session, input_set, signature=signature)
            if tasks is None:  # as the answers analysis decides them, from the first batch
                kinds = {
                    n: (a.shape, a.dtype)
                    for n, a in reference.arrays.items()
                    if n in onnx.arrays and a.ndim >= 1 and a.shape[0] == batch.rows
                }
                found = answers_for(kinds, self.options.tasks, {})
                tasks = {n: a.task for n, a in found.items()}
            keep = rows_worth_keeping(tasks, reference.arrays, onnx.arrays, batch.n_real)
            runs.append(BatchRun(batch.keeping(keep), reference, onnx))
        return ShardRun(start, tuple(runs), tuple(batcher.skipped), batcher.read)
