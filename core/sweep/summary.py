"""DIR/summary.json (``parity.sweep/1``) and the per-pair records that `--resume` trusts.

Both are written atomically: a reader polling summary.json mid-sweep sees the previous
complete file or the next one, never half of one. `pairs` lists the finished pairs in
manifest order; `total` and `complete` say how many there will be.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from parity.errors import UsageError
from parity.files import strict_json
from parity.files.atomic import write_text
from parity.files.json_output import dumps
from parity.files.safe_read import read_bytes
from parity.sweep import SCHEMA
from parity.sweep.execute import RECORD, Attempt, PairResult, Worst
from parity.sweep.plan import PairJob
from parity.verdict import ExitCode, Verdict

SUMMARY = "summary.json"
VERDICTS = tuple(Verdict)
_MAX_RECORD = 1 << 20  # one pair's record: a few hundred bytes


def result_dict(result: PairResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "verdict": result.verdict,
        "exit_code": result.exit_code,
        "seconds": result.seconds,
        "error": result.error,
        "failing": list(result.failing),
        "worst": None
        if result.worst is None
        else {"output": result.worst.output, "max_abs": result.worst.max_abs},
        "html": result.html,
        "saved_run": result.saved_run,
        "attempts": [
            {"node": a.node, "outcome": a.outcome, "seconds": a.seconds} for a in result.attempts
        ],
        "notes": list(result.notes),
    }


def result_from_dict(data: dict[str, Any], key: str = "") -> PairResult:
    """Raises KeyError / TypeError / ValueError on a malformed entry (callers say where)."""
    worst = data.get("worst")
    verdict = str(data["verdict"])
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r}")
    verdict = Verdict(verdict)
    return PairResult(
        name=str(data["name"]),
        verdict=verdict,
        exit_code=None if data.get("exit_code") is None else int(data["exit_code"]),
        seconds=float(data.get("seconds") or 0.0),
        error=None if data.get("error") is None else str(data["error"]),
        failing=tuple(str(n) for n in data.get("failing") or ()),
        worst=None if not worst else Worst(str(worst["output"]), _float(worst.get("max_abs"))),
        key=key,
        html=_file_name(data.get("html")),
        saved_run=_file_name(data.get("saved_run")),
        attempts=tuple(_attempt(a) for a in data.get("attempts") or ()),
        notes=tuple(str(n) for n in data.get("notes") or ()),
    )


def _attempt(data: dict[str, Any]) -> Attempt:
    node = data.get("node")
    return Attempt(
        node=None if node is None else str(node),
        outcome=str(data["outcome"]),
        seconds=float(data.get("seconds") or 0.0),
    )


def _file_name(value: Any) -> str | None:
    """A file name inside the pair's folder; anything with a path in it is ignored."""
    if not isinstance(value, str) or not value or Path(value).name != value or value == "..":
        return None
    return value


NO_NODE = "never got a node"
"""What a pair's attempts say when none of them ran anywhere (refused, or never placed)."""
NODE_CHARS = 12
"""A Ray node ID (56 hex digits) is shown by its first this many: enough to tell nodes apart."""


def retried(pair: PairResult) -> bool:
    """A pass (or fail) that took more than one try: a lost worker, or a storage read retried."""
    return pair.verdict is not Verdict.ERROR and len(pair.attempts) > 1


def never_placed(pair: PairResult) -> bool:
    """The pair never ran on any node: no process of it exited and no attempt names a node."""
    return pair.exit_code is None and not any(a.node for a in pair.attempts)


def verdict_words(pair: PairResult) -> str:
    """The verdict as the index and the Sweep page say it: "pass (retried)" after more tries."""
    return f"{pair.verdict} (retried)" if retried(pair) else str(pair.verdict)


def attempts_text(pair: PairResult) -> str:
    """Every try: "lost: WorkerCrashedError on 3f2a9c01b4de (4.1 s); pass on 77c0... (2.0 s)";
    a pair that never got a node says so."""
    if never_placed(pair):
        tried = "; ".join(f"{a.outcome} ({a.seconds:.1f} s)" for a in pair.attempts)
        return NO_NODE + (f": {tried}" if tried else "")
    return "; ".join(
        f"{a.outcome} on {(a.node or 'an unknown node')[:NODE_CHARS]} ({a.seconds:.1f} s)"
        for a in pair.attempts
    )


def counts(results: Iterable[PairResult]) -> dict[str, int]:
    """Pairs per verdict, every verdict a key (keys read as "pass", "fail", "error": each a
    Verdict, which is a str)."""
    c = Counter(r.verdict for r in results)
    return {v: c.get(v, 0) for v in VERDICTS}


def summary_dict(manifest: str, total: int, results: list[PairResult]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "manifest": manifest,
        "total": total,
        "complete": len(results) == total,
        "counts": counts(results),
        "pairs": [result_dict(r) for r in results],
    }


def write_summary(out: Path, data: dict[str, Any]) -> Path:
    return write_text(out / SUMMARY, dumps(data) + "\n")


def exit_code(results: list[PairResult], total: int) -> ExitCode:
    """ERROR when any pair could not be run (or never ran), else FAIL when any failed, else
    PASS."""
    c = counts(results)
    if c[Verdict.ERROR] or len(results) < total:
        return ExitCode.ERROR
    return ExitCode.FAIL if c[Verdict.FAIL] else ExitCode.PASS


def write_record(job: PairJob, result: PairResult) -> None:
    record = {"schema": SCHEMA, "key": job.key, "result": result_dict(result)}
    write_text(Path(job.out_dir) / RECORD, dumps(record) + "\n")


def load_record(job: PairJob) -> PairResult | None:
    """The pair's earlier result when it ran with the same key and the files it wrote (its
    report, and its --html / --save-run files) are all still there."""
    folder = Path(job.out_dir)
    if folder.is_symlink() or not folder.is_dir():  # a linked pair folder is never trusted
        return None
    try:
        raw = read_bytes(folder / RECORD, what="pair record", limit=_MAX_RECORD, error=UsageError)
        record = strict_json.loads(raw)
        if record.get("key") != job.key or not job.report_path.is_file():
            return None
        result = result_from_dict(record["result"], key=job.key)
    except (UsageError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    written = [name for name in (result.html, result.saved_run) if name]
    if result.name != job.name or not all((folder / name).is_file() for name in written):
        return None
    return result


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
