"""A whole sweep: plan the pairs, skip those `--resume` finds done, run the rest on an engine,
and keep summary.json, index.html and each pair's record up to date as results arrive.

Engines only run jobs and hand back each pair's result and files (PairOutput), in this
process: all writing of --out happens here (parity.sweep.land), so the local and the Ray
engine produce the same folder, and a Ray worker needs no filesystem shared with the driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from parity.errors import ParityError
from parity.sweep.execute import PairOutput, PairResult
from parity.sweep.index import write_index
from parity.sweep.land import land
from parity.sweep.manifest import Manifest
from parity.sweep.plan import PairJob, plan_jobs
from parity.sweep.progress import Progress
from parity.sweep.summary import exit_code, load_record, summary_dict, write_record, write_summary
from parity.verdict import ExitCode, Verdict

Engine = Callable[[Sequence[PairJob], Callable[[PairOutput], None]], None]
WRITE_INTERVAL_S = 0.5
"""summary.json and index.html are rewritten at most this often while pairs finish."""


@dataclass(frozen=True)
class SweepOutcome:
    results: tuple[PairResult, ...]
    """Finished pairs in manifest order (resumed ones included)."""
    total: int
    resumed: int
    seconds: float

    @property
    def exit_code(self) -> ExitCode:
        return exit_code(list(self.results), self.total)


def run_sweep(
    manifest: Manifest,
    out: Path,
    engine: Engine,
    *,
    timeout: float | None,
    resume: bool = False,
    progress: Progress | None = None,
) -> SweepOutcome:
    start = time.monotonic()
    jobs = plan_jobs(manifest, out, timeout=timeout)  # a pinned file that differs: refused here
    out.mkdir(parents=True, exist_ok=True)
    job_by_name = {job.name: job for job in jobs}
    by_name: dict[str, PairResult] = {}
    if resume:
        for job in jobs:
            record = load_record(job)
            if record is not None:
                by_name[job.name] = record
    resumed = len(by_name)
    writer = _Writer(out, str(manifest.path), jobs)
    if progress is not None:
        progress.skipped = resumed

    def on_result(output: PairOutput) -> None:
        result, job = output.result, job_by_name[output.result.name]
        try:
            land(job, output.files)
            if result.started:  # a pair that never ran has no result to resume from
                write_record(job, result)
        except (OSError, ParityError) as exc:  # --out refused it (disk full): this pair only
            text = getattr(exc, "message", None) or str(exc)
            result = replace(
                result,
                verdict=Verdict.ERROR,
                error=f"sweep could not write {job.out_dir}: {text}",
                started=False,
                html=None,
                saved_run=None,
            )
        by_name[result.name] = result
        finished = writer.ordered(by_name)
        writer.write(finished, force=False)
        if progress is not None:
            progress.update(finished)

    writer.write(writer.ordered(by_name), force=True)
    try:
        if progress is not None:
            progress.begin(writer.ordered(by_name))
        engine([j for j in jobs if j.name not in by_name], on_result)
    finally:
        writer.write(writer.ordered(by_name), force=True)
        if progress is not None:
            progress.close()
    return SweepOutcome(
        results=tuple(writer.ordered(by_name)),
        total=len(jobs),
        resumed=resumed,
        seconds=time.monotonic() - start,
    )


class _Writer:
    """summary.json + index.html, throttled while running, always written at the end."""

    def __init__(self, out: Path, manifest: str, jobs: Sequence[PairJob]) -> None:
        self.out = out
        self.manifest = manifest
        self.order = {job.name: i for i, job in enumerate(jobs)}
        self.last = 0.0

    def ordered(self, by_name: dict[str, PairResult]) -> list[PairResult]:
        return sorted(by_name.values(), key=lambda r: self.order[r.name])

    def write(self, results: list[PairResult], *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self.last < WRITE_INTERVAL_S:
            return
        self.last = now
        summary = summary_dict(self.manifest, len(self.order), results)
        write_summary(self.out, summary)
        write_index(self.out, summary)
