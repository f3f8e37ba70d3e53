"""The deploy matrix (issue 63): every test that judges a file a deploy tool made records one
row (tool, option, architecture, clean or with a planted bug, the verdict by cause, whether
the planted bug was named where it was planted), and the suite's rows make docs/deploy.md's
table. Rows go to test-artifacts/deploy_matrix.jsonl (one line each, appended: xdist workers
share it; the controller empties it when a session starts, tests/conftest.py), and

    python -m tests.helpers.deploy_matrix

prints them as the markdown table the docs carry (sorted, so a re-run gives the same table).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from parity.results import FindingKind, ValidationRun

ROWS = Path(__file__).resolve().parents[2] / "test-artifacts" / "deploy_matrix.jsonl"


def record(
    run: ValidationRun,
    *,
    tool: str,
    option: str,
    architecture: str,
    planted_at: str | None = None,
) -> dict[str, object]:
    """One row for `run` (judged by cause whatever its own judge); `planted_at` is the text a
    bug finding must name (a node, a layer) for the bug to count as located. Returns the row
    (tests assert on it as well)."""
    judged = run.rejudge(judge="cause")
    bugs = [f.text for f in judged.findings if f.kind is FindingKind.BUG]
    row: dict[str, object] = {
        "tool": tool,
        "option": option,
        "architecture": architecture,
        "file": "bug planted" if planted_at else "clean",
        "verdict": str(judged.verdict),
        "bug_said": bool(bugs),
        "located": None if planted_at is None else any(planted_at in b for b in bugs),
    }
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(row, sort_keys=True) + "\n").encode()
    fd = os.open(ROWS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:  # one write of one short line: whole lines even with several workers appending
        os.write(fd, line)
    finally:
        os.close(fd)
    return row


def right(row: dict[str, object]) -> bool:
    """What the matrix asks of a row: a clean file passes by cause with no bug said; a planted
    bug fails by cause and is named where it was planted."""
    if row["file"] == "clean":
        return row["verdict"] == "pass" and not row["bug_said"]
    return row["verdict"] == "fail" and bool(row["located"])


def table(rows: list[dict[str, object]]) -> str:
    """The rows as the docs' markdown table."""
    head = (
        "| tool | option | architecture | file | verdict by cause | bug located | right |\n"
        "|---|---|---|---|---|---|---|"
    )
    lines = []
    key = ("tool", "option", "architecture", "file")
    for r in sorted({json.dumps(r, sort_keys=True) for r in map(_clean, rows)}):
        row = json.loads(r)
        located = "-" if row["located"] is None else ("yes" if row["located"] else "no")
        lines.append(
            "| " + " | ".join(str(row[k]) for k in key)
            + f" | {row['verdict']} | {located} | {'yes' if right(row) else '**no**'} |"
        )  # fmt: skip
    return "\n".join([head, *lines])


def _clean(row: dict[str, object]) -> dict[str, object]:
    return {k: row[k] for k in ("tool", "option", "architecture", "file", "verdict", "bug_said",
                                "located")}  # fmt: skip


def main() -> None:
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    print(table(rows))


if __name__ == "__main__":
    main()
