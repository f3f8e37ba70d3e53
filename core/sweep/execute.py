"""Run one pair: `parity validate ...` in its own process group, killed at the timeout with
everything it started (parity.sweep.pair_process: it also dies with the sweep).

A pair that crashes, hangs or is killed for memory takes down only its own process; whatever
happened becomes a PairResult (the same on every engine: Ray runs this very function). The
pair runs in a private temporary folder: its report, its log.txt and every file its flags
write stay there and come back as bytes (`PairOutput.files`), which only the driver writes
into DIR/NAME (parity.sweep.land), so no engine needs to share a filesystem with the driver.
A pair that died without a report gets an error report, so every pair folder holds one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from parity.errors import Interrupted, UsageError
from parity.files import strict_json
from parity.files.json_budget import check_json_budget
from parity.files.safe_read import open_regular, read_bytes
from parity.sweep.pair_process import command as pair_command
from parity.sweep.plan import REPORT, PairJob
from parity.sweep.stage import MAX_FILE, fetch_uris
from parity.verdict import ExitCode, Verdict

LOG = "log.txt"
RECORD = "pair.json"
_LOG_TAIL = 16 << 10
_MAX_REPORT = 256 << 20
_POLL_S = 0.2
_TERM_GRACE_S = 5.0
MAX_RETURNED_FILES = 10_000
"""Files one pair may hand back (a --repro folder holds a few)."""


@dataclass(frozen=True)
class Attempt:
    """One try at a pair: where it ran, how it ended ("pass", "fail", "error", or
    "lost: WorkerCrashedError" ...), and how long it took."""

    node: str | None
    outcome: str
    seconds: float


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
    attempts: tuple[Attempt, ...] = ()
    """Every try, lost ones first (filled in by the engine)."""


@dataclass(frozen=True)
class PairOutput:
    """What a pair hands back to the driver: its result and its files, by name relative to
    its folder (report.json, log.txt, the --html / --save-run files, repro/...)."""

    result: PairResult
    files: Mapping[str, bytes] = field(default_factory=dict)


def node_name() -> str:
    return socket.gethostname()


def run_pair(
    job: PairJob,
    should_stop: Callable[[], bool] | None = None,
    *,
    inputs: Path | None = None,
    moved: Mapping[int, str] | None = None,
) -> PairOutput:
    """Run the pair to its end or its timeout in a private temporary folder; `should_stop`
    is polled to abandon it. `inputs`: the folder holding its input files (default: the
    manifest's folder); `moved`: args index -> where an input lies (parity.sweep.stage)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parity-pair-") as tmp:
        work = Path(tmp) / "out"
        try:
            work.mkdir()
            moved = {**(moved or {}), **fetch_uris(job, Path(tmp) / "uri")}
            result, report = _run(job, should_stop, start, work, inputs or job.cwd, moved)
        except UsageError as exc:  # a URI that cannot be read, or differs from its pin
            result, report = _died(job, start, None, exc.message, UsageError.kind)
        except OSError as exc:  # its temporary folder cannot be written (disk full): this pair
            result, report = _died(job, start, None, f"sweep could not run it: {exc}", "crash")
        files = collect(work)
    if report is not None:
        files[REPORT] = report
    return PairOutput(result, files)


def refused(job: PairJob, message: str, *, started: bool = False) -> PairOutput:
    """A pair the engine will not start (e.g. a GPU pair on a cluster without a GPU), or
    lost for good: an error report, like a pair whose process died, and never a hang."""
    result, report = _died(job, time.monotonic(), None, message, UsageError.kind)
    return PairOutput(replace(result, started=started), {REPORT: report})


def collect(work: Path) -> dict[str, bytes]:
    """Every regular file under `work` (links and special files are left), by POSIX name."""
    files: dict[str, bytes] = {}
    if not work.is_dir():
        return files
    for path in sorted(work.rglob("*")):
        if path.is_symlink() or not path.is_file() or len(files) >= MAX_RETURNED_FILES:
            continue
        with suppress(UsageError, OSError):
            name = path.relative_to(work).as_posix()
            files[name] = read_bytes(path, what="", limit=MAX_FILE, error=UsageError)
    return files


def _run(
    job: PairJob,
    should_stop: Callable[[], bool] | None,
    start: float,
    work: Path,
    cwd: str | Path,
    moved: Mapping[int, str],
) -> tuple[PairResult, bytes | None]:
    # dies with the sweep, and all it started
    command = pair_command(["validate", *job.command_args(work, moved)])
    timed_out = False
    with open(work / LOG, "wb") as log:
        try:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed whole, children too
            )
        except OSError as exc:
            return _died(job, start, None, f"could not start: {exc}", "crash")
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
    tail = _tail(work / LOG)
    report = read_json(work / REPORT)
    if timed_out:
        return _died(job, start, None, f"timed out after {job.timeout:g} s (killed)", "timeout")
    if code < 0:
        return _died(job, start, code, killed_text(-code, _last_line(tail)), "crash")
    if code not in set(ExitCode):
        last = _last_line(tail)
        return _died(job, start, code, f"exited with code {code}: {last}", "crash")
    if report is None:
        usage = _error_line(tail)  # e.g. argparse refusing an argument: no report written
        text = usage or f"exited with code {code} without a report"
        return _died(job, start, code, text, "usage" if usage else "crash")
    verdict = ExitCode(code).verdict
    error = _error_message(report, tail) if verdict is Verdict.ERROR else None
    return _result(job, verdict, code, start, error, report=report, work=work), None


def killed_text(signum: int, last: str = "") -> str:
    """ "crashed: killed by SIGKILL: out of memory?" (the kernel's OOM killer sends SIGKILL)."""
    known = signum in signal.Signals._value2member_map_
    name = signal.Signals(signum).name if known else f"signal {signum}"
    hint = ": out of memory?" if signum == signal.SIGKILL else ""
    return f"crashed: killed by {name}{hint}" + (f" ({last})" if last else "")


def _result(
    job: PairJob,
    verdict: Verdict,
    code: int | None,
    start: float,
    error: str | None,
    *,
    report: dict[str, Any] | None,
    work: Path | None = None,
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
        html=_written(job, "--html", work),
        saved_run=_written(job, "--save-run", work),
    )


def _written(job: PairJob, flag: str, work: Path | None) -> str | None:
    """The file `flag` names in the pair's folder, if the run wrote it."""
    for given, name in reversed(job.written):
        if given == flag:
            return name if work is not None and (work / name).is_file() else None
    return None


def _died(
    job: PairJob, start: float, code: int | None, message: str, kind: str
) -> tuple[PairResult, bytes]:
    """A process that left no usable report: an error report in its place."""
    from parity.reports.report import dumps, error_report_dict
    from parity.tolerances import Tolerances

    report = error_report_dict(
        model=None, onnx=None, tolerances=Tolerances(), kind=kind, message=message
    )
    data = (dumps(report) + "\n").encode()
    return _result(job, Verdict.ERROR, code, start, message, report=None), data


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


def read_json(path: Path, limit: int = _MAX_REPORT) -> dict[str, Any] | None:
    """A JSON object from a regular file of at most `limit` bytes whose parse fits the JSON
    budget (parity.files.json_budget); None when absent or not that (a FIFO, a link to a
    device, NaN or Infinity literals: parity.files.safe_read)."""
    try:
        raw = read_bytes(path, what="", limit=limit, error=UsageError)
        check_json_budget(raw, str(path))
        data = strict_json.loads(raw)
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
