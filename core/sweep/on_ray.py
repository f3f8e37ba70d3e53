"""The Ray engine: one Ray task per pair, running the same `run_pair` as the local engine.

Nothing is shared but Ray: each pair's input files go through Ray's object store, once per
distinct content (parity.sweep.delivery), into a private folder on the worker; the pair's
report files come back as bytes and only this process writes --out (parity.sweep.land). URIs
in the manifest are read by the worker itself.

Each task asks for the pair's CPUs, one GPU when its pair asks for a GPU execution provider,
and `memory=` from its --max-memory, so Ray places pairs where the resources are (and packs
no more heavy pairs on a node than fit). A pair that no node of the cluster can take (a GPU
pair on a cluster without a GPU) is an error at once; one whose nodes were lost with no
replacement is an error after `node_wait` seconds, never a silent wait.

Ray's own retries are off (`max_retries=0`) so that each lost attempt (worker or node died,
object lost) reaches this driver, which runs the pair again, up to `max_attempts` tries, and
records every try in the summary (`attempts`: node, outcome, seconds). A task first yields
its node's ID (a streaming generator), so a lost attempt still says where it ran; Ray Client
(ray://) cannot stream, and there a lost attempt's node is unknown.

Without an address, `ray.init()` starts a local cluster (sized by --workers) for this sweep
and stops it after. Ray's log lines never reach the sweep's stdout (log_to_driver=False, and
the messages Ray's driver prints itself go to stderr).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from parity.errors import UsageError, first_line
from parity.limits.budget import format_size
from parity.run.ray_cluster import (  # noqa: F401  (check_token: the sweep's name for it)
    EXTRA_HINT,
    check_token,
    connect,
    import_ray,
    prints_to_stderr,
)
from parity.sweep.delivery import Bundle, Shipper, unpack
from parity.sweep.execute import Attempt, PairOutput, refused, run_pair
from parity.sweep.plan import PairJob

MAX_ATTEMPTS = 3
"""Tries per pair when Ray loses its worker or node (the first included)."""
NODE_WAIT_S = 120.0
"""How long pairs wait for a node able to run them, from the loss of the last such node (as
the cluster's resources show it), before they are errors: a replacement has this long."""
_WAIT_S = 1.0
_CHECK_S = 2.0
LOST_ERRORS = (
    "WorkerCrashedError",
    "NodeDiedError",
    "OwnerDiedError",
    "ObjectLostError",
    "ObjectFetchTimedOutError",
    "ObjectReconstructionFailedError",
    "LocalRayletDiedError",
    "OutOfMemoryError",
    "RaySystemError",
)
"""Ray exceptions that mean the attempt was lost, not that the pair failed: tried again."""


def ray_engine(
    *,
    address: str | None,
    workers: int | None,
    max_attempts: int = MAX_ATTEMPTS,
    node_wait: float = NODE_WAIT_S,
):
    """The engine for `run_sweep`; UsageError (one line naming the extra) without Ray."""
    import_ray()
    return partial(
        run_on_ray, address=address, workers=workers, max_attempts=max_attempts,
        node_wait=node_wait,
    )  # fmt: skip


def run_on_ray(
    jobs: Sequence[PairJob],
    on_result: Callable[[PairOutput], None],
    *,
    address: str | None,
    workers: int | None,
    max_attempts: int = MAX_ATTEMPTS,
    node_wait: float = NODE_WAIT_S,
) -> None:
    import ray

    started = not ray.is_initialized()
    with prints_to_stderr():
        if started:
            connect(ray, address, workers)
        try:
            run = _Run(ray, on_result, max_attempts=max_attempts, node_wait=node_wait)
            run.run(jobs, limit=workers if address else None)
            print(
                f"sweep: ray: {run.shipper.files_put} distinct input file(s), "
                f"{format_size(run.shipper.bytes_put)} put in the object store, "
                f"{format_size(run.delivered)} delivered to the pairs' tasks",
                file=sys.stderr,
            )
        finally:
            if started:
                ray.shutdown()


def unplaceable(job: PairJob, resources: dict[str, float]) -> str | None:
    """Why a cluster with `resources` (ray.cluster_resources()) can never run the job's task."""
    gpus, cpus = resources.get("GPU", 0), resources.get("CPU", 0)
    if job.num_gpus and gpus < job.num_gpus:
        return (
            f"asks for {job.gpu_provider}, which needs a GPU, and the Ray cluster has none "
            f"({cpus:g} CPU, {gpus:g} GPU): run it on a cluster with a GPU node, or with "
            "--provider CPUExecutionProvider"
        )
    if cpus < job.num_cpus:
        return f"the Ray cluster has {cpus:g} CPU, and the pair needs {job.num_cpus}"
    memory = resources.get("memory", 0)
    if job.memory and memory < job.memory:
        return (
            f"asks for {format_size(job.memory)} (its --max-memory), and the Ray cluster has "
            f"{format_size(int(memory))} for tasks"
        )
    return None


def task_options(job: PairJob) -> dict:
    """What the pair's Ray task asks for: its CPUs, one GPU for a GPU provider, its memory;
    Ray's own retries off (the driver retries, and records each attempt)."""
    options = {
        "num_cpus": job.num_cpus,
        "num_gpus": job.num_gpus,
        "name": f"parity-sweep:{job.name}",
    }
    if job.memory:
        options["memory"] = job.memory
    return {**options, "max_retries": 0}


# --------------------------------------------------------------------------- on the worker


def pair_steps(job: PairJob, bundle: Bundle) -> Iterator[Any]:
    """The task: first its node's ID, then the pair's PairOutput (inputs unpacked into a
    private folder, removed after)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    yield node
    with tempfile.TemporaryDirectory(prefix="parity-inputs-") as tmp:
        try:
            moved = unpack(bundle, Path(tmp), ray.get)
        except OSError as exc:  # the worker's disk is full: this pair only
            yield refused(job, f"could not write its input files on the worker: {exc}")
            return
        yield run_pair(job, inputs=Path(tmp), moved=moved, node=node)


def pair_whole(job: PairJob, bundle: Bundle) -> tuple[str, PairOutput]:
    """`pair_steps` as one return value, for Ray Client (which cannot stream)."""
    steps = pair_steps(job, bundle)
    node = next(steps)
    return node, next(steps)


# --------------------------------------------------------------------------- on the driver


@dataclass
class _Try:
    job: PairJob
    handle: Any
    """The task's ObjectRefGenerator (or, under Ray Client, its ObjectRef)."""
    submitted: float
    node: str | None = None
    started: float | None = None
    lost: list[Attempt] = field(default_factory=list)


class _Run:
    def __init__(self, ray, on_result, *, max_attempts: int, node_wait: float) -> None:
        self.ray = ray
        self.on_result = on_result
        self.max_attempts = max(1, max_attempts)
        self.node_wait = node_wait
        self.shipper = Shipper(ray.put)
        self.bundles: dict[str, Bundle] = {}
        self.streaming = not ray.util.client.ray.is_connected()
        self.task = ray.remote(pair_steps if self.streaming else pair_whole)
        self.returns = {"num_returns": "streaming"} if self.streaming else {}
        self.running: dict[Any, _Try] = {}
        self.last_check = 0.0
        self.short_since: dict[tuple[int, int, int | None], float] = {}
        """(CPUs, GPUs, memory) a pair asks for -> when the cluster was first seen without a
        node able to run it: the loss, as the cluster sees it (within _CHECK_S)."""
        self.delivered = 0
        """Bytes of input files the tasks were given (each attempt's bundle)."""

    def run(self, jobs: Sequence[PairJob], *, limit: int | None) -> None:
        resources = self.ray.cluster_resources()
        queue: list[tuple[PairJob, list[Attempt]]] = []
        for job in jobs:
            problem = unplaceable(job, resources)
            if problem is None:
                queue.append((job, []))
            else:
                self.on_result(refused(job, problem))
        queue.reverse()
        self.queue = queue
        try:
            while self.queue or self.running:
                while self.queue and (limit is None or len(self.running) < limit):
                    self._submit(*self.queue.pop())
                if not self.running:
                    continue
                ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=_WAIT_S)
                for handle in ready:
                    self._step(handle)
                self._check_waiting()
        except BaseException:
            for attempt in self.running.values():
                with contextlib.suppress(Exception):  # KeyboardInterrupt in the task:
                    self.ray.cancel(attempt.handle)  # run_pair kills its process
            raise

    def _submit(self, job: PairJob, lost: list[Attempt]) -> None:
        try:
            bundle = self.bundles.get(job.name) or self.shipper.bundle(job)
        except UsageError as exc:
            self.on_result(_with_attempts(refused(job, exc.message), lost))
            return
        self.bundles[job.name] = bundle
        self.delivered += bundle.size
        handle = self.task.options(**task_options(job), **self.returns).remote(job, bundle)
        self.running[handle] = _Try(job, handle, time.monotonic(), lost=lost)

    def _step(self, handle: Any) -> None:
        attempt = self.running[handle]
        ray = self.ray
        try:
            if self.streaming:
                value = ray.get(next(handle))
            else:
                node, value = ray.get(handle)
                attempt.node, attempt.started = node, attempt.started or time.monotonic()
        except StopIteration:  # ended without its output: lost
            self._lost(attempt, "ended early", "the task ended without a result")
            return
        except ray.exceptions.TaskCancelledError:
            self.running.pop(handle)
            return
        except ray.exceptions.RayError as exc:
            kind = type(exc).__name__
            if any(n in {c.__name__ for c in type(exc).__mro__} for n in LOST_ERRORS):
                self._lost(attempt, kind, first_line(exc))
            else:  # the task itself raised: a bug, not a lost worker; not retried
                self._end(attempt, refused(attempt.job, f"ray: {kind}: {first_line(exc)}"))
            return
        if self.streaming and attempt.node is None:  # the first step: where it runs
            attempt.node, attempt.started = str(value), time.monotonic()
            return
        self._end(attempt, value)

    def _done(self, job: PairJob) -> None:
        self.bundles.pop(job.name, None)

    def _end(self, attempt: _Try, output: PairOutput) -> None:
        self.running.pop(attempt.handle, None)
        self._done(attempt.job)
        this = Attempt(attempt.node, str(output.result.verdict), output.result.seconds)
        self.on_result(_with_attempts(output, [*attempt.lost, *output.result.attempts, this]))

    def _lost(self, attempt: _Try, kind: str, text: str) -> None:
        self.running.pop(attempt.handle, None)
        since = attempt.started or attempt.submitted
        lost = [*attempt.lost, Attempt(attempt.node, f"lost: {kind}", _seconds(since))]
        if len(lost) < self.max_attempts:
            self.queue.append((attempt.job, lost))  # next to run
            return
        self._done(attempt.job)
        message = (
            f"lost {len(lost)} times on Ray (retried up to {self.max_attempts}): {kind}: {text}"
        )
        self.on_result(_with_attempts(refused(attempt.job, message), lost))

    def _check_waiting(self) -> None:
        """A pair not started that no node left can run, for node_wait seconds counted from
        when the cluster lost the last node able to (or from its submission, if later): an
        error. A replacement joining within node_wait takes the queue."""
        now = time.monotonic()
        if now - self.last_check < _CHECK_S:
            return
        self.last_check = now
        waiting = [a for a in self.running.values() if a.started is None]
        if not waiting:
            self.short_since.clear()
            return
        resources = self.ray.cluster_resources()
        for attempt in waiting:
            problem = unplaceable(attempt.job, resources)
            shape = (attempt.job.num_cpus, attempt.job.num_gpus, attempt.job.memory)
            if problem is None:
                self.short_since.pop(shape, None)
                continue
            since = max(self.short_since.setdefault(shape, now), attempt.submitted)
            if now - since < self.node_wait:
                continue
            with contextlib.suppress(Exception):
                self.ray.cancel(attempt.handle, force=True)
            self.running.pop(attempt.handle, None)
            self._done(attempt.job)
            lost = [*attempt.lost, Attempt(None, "not placed", _seconds(attempt.submitted))]
            text = (
                f"no Ray node can run it after {now - since:.0f} s without one (its nodes "
                f"lost, and no replacement joined): {problem}"
            )
            self.on_result(_with_attempts(refused(attempt.job, text), lost))


def _seconds(since: float) -> float:
    return round(time.monotonic() - since, 2)


def _with_attempts(output: PairOutput, attempts: list[Attempt]) -> PairOutput:
    return replace(output, result=replace(output.result, attempts=tuple(attempts)))
