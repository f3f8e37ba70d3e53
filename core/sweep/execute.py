"""Run one pair: `parity validate ...` in its own process group, killed at the timeout with
everything it started (parity.sweep.pair_process: it also dies with the sweep).

A pair that crashes, hangs or is killed for memory takes down only its own process; whatever
happened becomes a PairResult (the same on every engine: Ray runs this very function). Its
output goes to DIR/NAME/log.txt. A pair that died without a report gets an error report, so
every pair folder holds a report.json.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from parity.errors import Interrupted, UsageError
from parity.files import strict_json
from parity.files.atomic import atomic_path, write_text
from parity.files.safe_read import open_regular, read_bytes
from parity.sweep.pair_process import command as pair_command
from parity.sweep.plan import PairJob
from parity.verdict import ExitCode, Verdict

LOG = "log.txt"
RECORD = "pair.json"
_LOG_TAIL = 16 << 10
_MAX_REPORT = 256 << 20
_POLL_S = 0.2
_TERM_GRACE_S = 5.0


@dataclass(frozen=True)
class Worst:
    output: str
    max_abs: float | None


@dataclass(frozen=True)
class PairResult:
    name: str
    verdict: Verdict
    """PASS | FAIL | ERROR (ERROR: the pair could not be run, or its process died)."""
    exit_code: int | None
    """validate's exit code; negative: killed by that signal; None: killed at the timeout,
    or never started (refused by the engine, lost by Ray)."""
    seconds: float
    error: str | None
    failing: tuple[str, ...]
    worst: Worst | None
    key: str
    html: str | None = None
    """File name of the pair's HTML report in its folder, when its args asked for one."""
    saved_run: str | None = None
    """File name of the pair's saved run (--save-run) in its folder, when there is one."""
    started: bool = True
    """False for a pair that never ran (refused by the engine, lost by Ray before it ran):
    `--resume` runs it again."""


def run_pair(job: PairJob, should_stop: Callable[[], bool] | None = None) -> PairResult:
    """Run the pair to its end or its timeout; `should_stop` is polled to abandon it."""
    start = time.monotonic()
    try:
        return _run(job, should_stop, start)
    except OSError as exc:  # its folder cannot be written (disk full, permissions): this pair only
        return _result(
            job, Verdict.ERROR, None, start, f"sweep could not run it: {exc}", report=None
        )


def refused(job: PairJob, message: str) -> PairResult:
    """A pair the engine will not start (e.g. a GPU pair on a cluster without a GPU): an
    error report in its folder, like a pair whose process died, and never a hang."""
    start = time.monotonic()
    try:
        Path(job.out_dir).mkdir(parents=True, exist_ok=True)
        _remove_previous(job)
        return replace(_died(job, start, None, message, UsageError.kind), started=False)
    except OSError as exc:
        return _result(
            job, Verdict.ERROR, None, start, f"sweep could not run it: {exc}", report=None
        )


def _run(job: PairJob, should_stop: Callable[[], bool] | None, start: float) -> PairResult:
    out = Path(job.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous(job)
    command = pair_command(["validate", *job.args])  # dies with the sweep, and all it started
    timed_out = False
    with atomic_path(out / LOG) as log_tmp, open(log_tmp, "wb") as log:
        try:
            proc = subprocess.Popen(
                command,
                cwd=job.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed whole, children too
            )
        except OSError as exc:
            return _result(job, Verdict.ERROR, None, start, f"could not start: {exc}", report=None)
        deadline = None if job.timeout is None else start + job.timeout
        try:
            while True:
                try:
                    code = proc.wait(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if should_stop is not None and should_stop():
                        raise Interrupted(job.name) from None
                    if deadline is not None and time.monotonic() >= deadline:
                        timed_out = True
                        code = _kill(proc)
                        break
        except BaseException:  # interrupted: never leave a pair running behind the sweep
            _kill(proc)
            raise
    tail = _tail(out / LOG)
    report = read_json(job.report_path)
    if timed_out:
        return _died(job, start, None, f"timed out after {job.timeout:g} s (killed)", "timeout")
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else code
        hint = " (out of memory?)" if code == -signal.SIGKILL else ""
        last = _last_line(tail)
        text = f"crashed: killed by {name}{hint}" + (f": {last}" if last else "")
        return _died(job, start, code, text, "crash")
    if code not in set(ExitCode):
        last = _last_line(tail)
        return _died(job, start, code, f"exited with code {code}: {last}", "crash")
    if report is None:
        usage = _error_line(tail)  # e.g. argparse refusing an argument: no report written
        text = usage or f"exited with code {code} without a report"
        return _died(job, start, code, text, "usage" if usage else "crash")
    verdict = ExitCode(code).verdict
    error = _error_message(report, tail) if verdict is Verdict.ERROR else None
    return _result(job, verdict, code, start, error, report=report)


def _result(
    job: PairJob,
    verdict: Verdict,
    code: int | None,
    start: float,
    error: str | None,
    *,
    report: dict[str, Any] | None,
) -> PairResult:
    outputs = (report or {}).get("outputs") or []
    return PairResult(
        name=job.name,
        verdict=verdict,
        exit_code=code,
        seconds=round(time.monotonic() - start, 2),
        error=error,
        failing=_failing(outputs),
        worst=_worst(outputs),
        key=job.key,
        html=_written(job, "--html"),
        saved_run=_written(job, "--save-run"),
    )


def _written(job: PairJob, flag: str) -> str | None:
    """The file `flag` names in the pair's folder, if the run wrote it."""
    for given, placed in reversed(job.written):
        if given == flag:
            path = Path(placed)
            return path.name if path.is_file() else None
    return None


def _died(job: PairJob, start: float, code: int | None, message: str, kind: str) -> PairResult:
    """A process that left no usable report: write an error report in its place."""
    from parity.reports.report import dumps, error_report_dict
    from parity.tolerances import Tolerances

    report = error_report_dict(
        model=None, onnx=None, tolerances=Tolerances(), kind=kind, message=message
    )
    write_text(job.report_path, dumps(report) + "\n")
    return _result(job, Verdict.ERROR, code, start, message, report=None)


def _kill(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM the pair's process (parity.sweep.pair_process kills every descendant, setsid'd
    ones too), then SIGKILL its process group, which is all of it that can be left."""
    with suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_TERM_GRACE_S)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def _remove_previous(job: PairJob) -> None:
    """Files an earlier run of this pair left: a crash now must not show the old report."""
    out = Path(job.out_dir)
    stale = [job.report_path, out / RECORD, out / LOG]
    stale += [Path(placed) for _, placed in job.written]
    for path in stale:
        path.unlink(missing_ok=True)


def read_json(path: Path, limit: int = _MAX_REPORT) -> dict[str, Any] | None:
    """A JSON object from a regular file of at most `limit` bytes; None when absent or not
    that (a FIFO, a link to a device, NaN or Infinity literals: parity.files.safe_read)."""
    try:
        data = strict_json.loads(read_bytes(path, what="", limit=limit, error=UsageError))
    except (UsageError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _failing(outputs: list[Any]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for o in outputs:
        if isinstance(o, dict) and o.get("status") != "pass":
            names[str(o.get("name"))] = None
    return tuple(names)


def _worst(outputs: list[Any]) -> Worst | None:
    """The output to name first: failing before passing, then the largest max abs error."""
    best: tuple[bool, float] | None = None
    worst = None
    for o in outputs:
        if not isinstance(o, dict):
            continue
        max_abs = o.get("max_abs")
        rank = (o.get("status") != "pass", max_abs if isinstance(max_abs, int | float) else -1.0)
        if best is None or rank > best:
            best, worst = rank, Worst(str(o.get("name")), max_abs)
    return worst


def _error_message(report: dict[str, Any], tail: str) -> str:
    errors = report.get("errors") or []
    if errors and isinstance(errors[0], dict) and errors[0].get("message"):
        return str(errors[0]["message"])
    return _error_line(tail) or _last_line(tail) or "the run could not be made"


def _error_line(tail: str) -> str | None:
    """The message of the last `parity...: error: MESSAGE` line the process printed."""
    for line in reversed(tail.splitlines()):
        head, sep, message = line.partition("error: ")
        if sep and head.startswith("parity") and message.strip():
            return message.strip()[:300]
    return None


def _tail(path: Path) -> str:
    try:
        with open_regular(path, what="", limit=None, error=UsageError) as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - _LOG_TAIL))
            return fh.read(_LOG_TAIL).decode("utf-8", errors="replace")
    except (OSError, UsageError):
        return ""


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""
