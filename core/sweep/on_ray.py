"""The Ray engine: one Ray task per pair, running the same `run_pair` as the local engine.

Each task asks for one CPU, and one GPU when its pair asks for a GPU execution provider, so
Ray places pairs where the resources are (and the pair's process inherits the
CUDA_VISIBLE_DEVICES Ray gives its task). A GPU pair on a cluster that has no GPU when the
sweep starts would wait forever for one: it becomes an error pair at once, saying so, and
the other pairs run. Without an address, `ray.init()` starts a local
cluster (sized by --workers) for this sweep and stops it after; with `--ray-address` the
tasks go to that cluster, whose nodes must have Parity installed and see the manifest's files
and DIR at the same paths (a shared filesystem). Results come back to this process, which
writes the sweep's own files, so both engines fill the folder the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial

from parity.errors import UsageError, first_line
from parity.sweep.execute import PairResult, refused, run_pair
from parity.sweep.plan import PairJob
from parity.verdict import Verdict

EXTRA_HINT = "pip install 'onnx-parity[ray]' (in a checkout: pip install -e '.[ray]')"
_LOCAL_OBJECT_STORE = 128 << 20
"""Results are a few hundred bytes: a local cluster needs no big shared-memory store."""


def ray_engine(*, address: str | None, workers: int | None):
    """The engine for `run_sweep`; UsageError (one line naming the extra) without Ray."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError(f"--engine ray needs Ray, which is not installed: {EXTRA_HINT}") from None
    return partial(run_on_ray, address=address, workers=workers)


def run_on_ray(
    jobs: Sequence[PairJob],
    on_result: Callable[[PairResult], None],
    *,
    address: str | None,
    workers: int | None,
) -> None:
    import ray

    started = not ray.is_initialized()
    if started:
        _init(ray, address, workers)
    try:
        resources, runnable = ray.cluster_resources(), []
        for job in jobs:
            problem = unplaceable(job, resources)
            if problem is None:
                runnable.append(job)
            else:
                on_result(refused(job, problem))
        _run(ray, runnable, on_result, limit=workers if address else None)
    finally:
        if started:
            ray.shutdown()


def _init(ray, address: str | None, workers: int | None) -> None:
    quiet = {"log_to_driver": False, "logging_level": "WARNING"}
    if address:
        ray.init(address=address, **quiet)
        return
    ray.init(
        num_cpus=workers or os.cpu_count() or 1,
        include_dashboard=False,
        object_store_memory=_LOCAL_OBJECT_STORE,
        **quiet,
    )


def unplaceable(job: PairJob, resources: dict[str, float]) -> str | None:
    """Why a cluster with `resources` (ray.cluster_resources()) can never run the job's task."""
    gpus = resources.get("GPU", 0)
    if job.num_gpus and gpus < job.num_gpus:
        cpus = resources.get("CPU", 0)
        return (
            f"asks for {job.gpu_provider}, which needs a GPU, and the Ray cluster has none "
            f"({cpus:g} CPU, {gpus:g} GPU): run it on a cluster with a GPU node, or with "
            "--provider CPUExecutionProvider"
        )
    return None


def task_options(job: PairJob) -> dict:
    """What the pair's Ray task asks for: one CPU, and one GPU for a GPU provider."""
    return {"num_cpus": 1, "num_gpus": job.num_gpus, "name": f"parity-sweep:{job.name}"}


def _run(ray, jobs: Sequence[PairJob], on_result, *, limit: int | None) -> None:
    task = ray.remote(run_pair)
    queue = list(reversed(jobs))
    pending: dict = {}

    def submit() -> None:
        while queue and (limit is None or len(pending) < limit):
            job = queue.pop()
            ref = task.options(**task_options(job)).remote(job)
            pending[ref] = job

    try:
        submit()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                job = pending.pop(ref)
                on_result(_get(ray, ref, job))
            submit()
    except BaseException:
        for ref in pending:
            ray.cancel(ref)  # raises KeyboardInterrupt in the task: run_pair kills its process
        raise


def _get(ray, ref, job: PairJob) -> PairResult:
    """The task's result; a task Ray itself lost (its worker or node died) is an error pair."""
    try:
        return ray.get(ref)
    except (ray.exceptions.RayError, OSError) as exc:
        return PairResult(
            name=job.name,
            verdict=Verdict.ERROR,
            exit_code=None,
            seconds=0.0,
            error=f"ray: {type(exc).__name__}: {first_line(exc)}",
            failing=(),
            worst=None,
            key=job.key,
            started=False,
        )
