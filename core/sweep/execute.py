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

from parity.errors import Interrupted, StorageError, UsageError
from parity.files import strict_json
from parity.files.atomic import write_bytes
from parity.files.json_budget import check_json_budget
from parity.files.safe_read import open_regular, read_bytes
from parity.limits.budget import format_size
from parity.sweep.delivery import FetchTimeout, fetch_uris
from parity.sweep.names import names_env, redacted_uri, renamed_text
from parity.sweep.pair_process import command as pair_command
from parity.sweep.plan import REPORT, PairJob
from parity.verdict import ExitCode, Verdict

LOG = "log.txt"
RECORD = "pair.json"
_LOG_TAIL = 16 << 10
_MAX_REPORT = 256 << 20
_POLL_S = 0.2
_TERM_GRACE_S = 5.0
MAX_RETURNED_FILES = 10_000
"""Files one pair may hand back (a --repro folder holds a few)."""
MAX_RETURNED_BYTES = 8 << 30
"""Bytes one pair may hand back in all (its saved run, reports, log): what the driver holds
of one pair at a time, whatever the pair wrote."""
MAX_LOG = 16 << 20
"""The pair's log.txt keeps its last this many bytes (a pair printing forever is cut)."""


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
    notes: tuple[str, ...] = ()
    """What the sweep did to its files: a log cut to its tail, a file too large to return."""


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
    node: str | None = None,
) -> PairOutput:
    """Run the pair to its end or its timeout in a private temporary folder; `should_stop`
    is polled to abandon it. `inputs`: the folder holding its input files (default: the
    manifest's folder); `moved`: args index -> where an input lies (parity.sweep.delivery);
    `node`: where it runs, for the storage reads it retries (its result's `attempts`; the
    engine adds the try that ended it)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parity-pair-") as tmp:
        work = Path(tmp) / "out"
        cwd = Path(inputs or job.cwd)
        names = pair_names(job, work, cwd, moved or {})
        retried: list[Attempt] = []

        def on_retry(text: str, seconds: float) -> None:
            retried.append(Attempt(node, f"storage: {text}", seconds))

        try:
            work.mkdir()
            deadline = None if job.timeout is None else start + job.timeout
            fetched = fetch_uris(job, Path(tmp) / "uri", on_retry, deadline=deadline)
            names += uri_names(job, fetched)
            moved = {**(moved or {}), **fetched}
            result, report = _run(job, should_stop, start, work, cwd, moved, names)
        except FetchTimeout as exc:  # the pair's --timeout counts its reads too
            text = f"timed out after {job.timeout:g} s (killed) while reading {exc.uri}"
            result, report = _died(job, start, None, text, "timeout")
        except StorageError as exc:  # its storage failed: `--resume` runs it again
            message = renamed_text(exc.message, names)
            result, report = _died(job, start, None, message, StorageError.kind)
            result = replace(result, started=False)
        except UsageError as exc:  # a URI that differs from its pin: this pair's error
            message = renamed_text(exc.message, names)
            result, report = _died(job, start, None, message, UsageError.kind)
        except OSError as exc:  # its temporary folder cannot be written (disk full): this pair
            text = renamed_text(f"sweep could not run it: {exc}", names)
            result, report = _died(job, start, None, text, "crash")
        error = None if result.error is None else renamed_text(result.error, names)
        result = replace(result, attempts=tuple(retried), error=error)
        notes = [note] if (note := bound_log(work / LOG, names)) else []
        files, left = collect(work)
    notes += left
    if report is not None:
        files[REPORT] = report
    if notes:
        kept = {name: name in files for name in (result.html, result.saved_run) if name}
        result = replace(
            result,
            notes=(*result.notes, *notes),
            html=result.html if kept.get(result.html or "") else None,
            saved_run=result.saved_run if kept.get(result.saved_run or "") else None,
        )
    return PairOutput(result, files)


def pair_names(
    job: PairJob, work: Path, cwd: Path, moved: Mapping[int, str]
) -> list[tuple[str, str]]:
    """(where, name) for what the pair's process sees in temporary places: its output folder
    is DIR/NAME, a copy of the manifest's folder (on a Ray worker) is that folder, and an
    input moved elsewhere (a path outside the manifest's folder) is the path the args give."""
    names = [(str(work), job.out_dir)]
    if cwd.resolve() != Path(job.cwd).resolve():
        names.append((str(cwd), job.cwd))
    for slot in job.inputs:
        where = moved.get(slot.index)
        if where is not None and slot.kind != "uri" and where != slot.path:
            names += [(str(cwd / where), slot.path), (where, slot.path)]
    return names


def uri_names(job: PairJob, fetched: Mapping[int, str]) -> list[tuple[str, str]]:
    """(where the pair's process reads it, the URI) for every URI input."""
    return [(fetched[s.index], redacted_uri(s.path)) for s in job.inputs if s.index in fetched]


def refused(job: PairJob, message: str, *, started: bool = False) -> PairOutput:
    """A pair the engine will not start (e.g. a GPU pair on a cluster without a GPU), or
    lost for good: an error report, like a pair whose process died, and never a hang."""
    result, report = _died(job, time.monotonic(), None, message, UsageError.kind)
    return PairOutput(replace(result, started=started), {REPORT: report})


def collect(work: Path, limit: int | None = None) -> tuple[dict[str, bytes], list[str]]:
    """Every regular file under `work` (links and special files are left), by POSIX name,
    each counted by its size against `limit` (MAX_RETURNED_BYTES) before it is read: one
    that would pass it stays behind, said in a note; so is a file past MAX_RETURNED_FILES."""
    limit = MAX_RETURNED_BYTES if limit is None else limit
    files: dict[str, bytes] = {}
    left: list[str] = []
    total = 0
    if not work.is_dir():
        return files, left
    first = {work / REPORT, work / LOG}  # what the driver needs most, counted first
    for path in sorted(work.rglob("*"), key=lambda p: (p not in first, str(p))):
        if path.is_symlink() or not path.is_file():
            continue
        name = path.relative_to(work).as_posix()
        size = path.stat().st_size
        if len(files) >= MAX_RETURNED_FILES or total + size > limit:
            left.append(
                f"{name} ({format_size(size)}) not returned: the pair's files may hold "
                f"{format_size(limit)} and {MAX_RETURNED_FILES} files in all"
            )
            continue
        with suppress(UsageError, OSError):
            files[name] = read_bytes(path, what="", limit=limit - total, error=UsageError)
            total += len(files[name])
    return files, left


def bound_log(log: Path, names: list[tuple[str, str]], keep: int | None = None) -> str | None:
    """Rewrite the pair's log as its last `keep` bytes (MAX_LOG), from a line start, its
    temporary paths named as the manifest names them; a note when it was cut."""
    keep = MAX_LOG if keep is None else keep
    try:
        with open_regular(log, what="", limit=None, error=UsageError) as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - keep))
            data = fh.read(keep)
    except (OSError, UsageError):
        return None
    cut = size > keep
    if cut and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]
    text = renamed_text(data.decode("utf-8", errors="surrogateescape"), names)
    head = f"[log cut: its first {size - len(data)} bytes left out]\n" if cut else ""
    with suppress(OSError):
        write_bytes(log, head.encode() + text.encode("utf-8", errors="surrogateescape"))
    if not cut:
        return None
    return f"{LOG} cut to its last {format_size(keep)} ({format_size(size)} printed)"


def _run(
    job: PairJob,
    should_stop: Callable[[], bool] | None,
    start: float,
    work: Path,
    cwd: str | Path,
    moved: Mapping[int, str],
    names: list[tuple[str, str]],
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
                env={**os.environ, **names_env(names)},
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
    verdict = _verdict(report, ExitCode(code))
    error = _error_message(report, tail) if verdict is Verdict.ERROR else None
    return _result(job, verdict, code, start, error, report=report, work=work), None


def _verdict(report: dict[str, Any], code: ExitCode) -> Verdict:
    """The report's own verdict (the codec reads it), its exit code's where it has none."""
    from parity.files.strict_json import FieldError
    from parity.reports.codec import report_verdict

    try:
        return report_verdict(report)
    except FieldError:
        return code.verdict


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
    failing, worst = judged(report)
    return PairResult(
        name=job.name,
        verdict=verdict,
        exit_code=code,
        seconds=round(time.monotonic() - start, 2),
        error=error,
        failing=failing,
        worst=worst,
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


def judged(report: dict[str, Any] | None) -> tuple[tuple[str, ...], Worst | None]:
    """A report's failing outputs and its worst one, read through the codec by the rules
    every view uses (parity.show.rows.worst_row: parity.labels.badness); none for a report
    whose outputs cannot be read."""
    from parity.files.strict_json import FieldError
    from parity.reports.codec import report_rows_from_json
    from parity.show.rows import worst_row

    try:
        rows = report_rows_from_json(report or {})
    except FieldError:
        return (), None
    failing = tuple(dict.fromkeys(r.name for r in rows if not r.status.passed))
    worst = worst_row(rows)
    return failing, None if worst is None else Worst(worst.name, worst.max_abs)


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
