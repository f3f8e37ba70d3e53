"""Read a finished (or running) sweep folder: its summary and, per pair, its outputs.

What the dashboard's Sweep page shows; no Streamlit here. Every file is bounded in size, and
in what parsing it may cost before it is parsed (parity.files.json_budget), and parsed
defensively: one bad pair report leaves its row without outputs, while a folder
without a readable summary is one UsageError line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parity.errors import UsageError
from parity.files import strict_json
from parity.files.json_budget import check_json_budget
from parity.files.safe_read import read_bytes
from parity.sweep import SCHEMA
from parity.sweep.execute import PairResult, read_json
from parity.sweep.plan import REPORT
from parity.sweep.summary import SUMMARY, result_from_dict

MAX_SUMMARY = 256 << 20
"""A summary of 10^5 pairs is a few tens of MB; past this it is not one."""


@dataclass(frozen=True)
class OutputCell:
    """One output of one pair: its worst status and largest max abs over the input sets."""

    status: str
    max_abs: float | None
    # the cause's label where it fails by what the file meant (the report's `intended`)
    intended: str = ""
    # it passes only at a tolerance looser than the default, and a finding says it is a bug
    hidden_bug: bool = False


@dataclass(frozen=True)
class SweepFolder:
    path: Path
    manifest: str
    total: int
    complete: bool
    pairs: tuple[PairResult, ...]
    outputs: dict[str, dict[str, OutputCell]]
    """pair name -> output name -> cell (empty for a pair without a readable report)."""

    def output_names(self) -> list[str]:
        names: dict[str, None] = {}
        for cells in self.outputs.values():
            names.update(dict.fromkeys(cells))
        return list(names)

    def intended(self, name: str) -> str:
        """The causes' labels of pair `name` when it fails only by what its file was meant
        to do (every failing output intended, no error), else "": the pair drawn amber."""
        pair = next((p for p in self.pairs if p.name == name), None)
        cells = self.outputs.get(name, {})
        if pair is None or pair.verdict != "fail" or pair.error or not pair.failing:
            return ""
        labels = [cells[n].intended if n in cells else "" for n in pair.failing]
        return ", ".join(sorted(set(labels))) if all(labels) else ""

    def hidden_bugs(self, name: str) -> list[str]:
        """The outputs of pair `name` that pass only because of their tolerance while its
        report's findings call them a bug (parity.show.findings.HIDDEN_BY_TOLERANCE)."""
        return [o for o, cell in self.outputs.get(name, {}).items() if cell.hidden_bug]

    def saved_run(self, name: str) -> Path | None:
        pair = next((p for p in self.pairs if p.name == name), None)
        if pair is None or pair.saved_run is None:
            return None
        path = self.path / name / pair.saved_run
        return path if path.is_file() else None


def load_sweep(path: str | Path) -> SweepFolder:
    folder = Path(path).expanduser()
    summary = _read_summary(folder)
    if summary.get("schema") != SCHEMA:
        raise UsageError(f"{folder / SUMMARY}: schema is not {SCHEMA!r}")
    pairs = []
    for i, entry in enumerate(summary.get("pairs") or []):
        try:
            pair = result_from_dict(entry)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise UsageError(f"{folder / SUMMARY}: pairs[{i}] is malformed ({exc})") from exc
        if Path(pair.name).name != pair.name or pair.name in (".", ".."):
            raise UsageError(
                f"{folder / SUMMARY}: pairs[{i}]: name {pair.name!r} is not a folder inside "
                "the sweep folder"
            )
        pairs.append(pair)
    total = summary.get("total")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise UsageError(f"{folder / SUMMARY}: total {total!r} is not a count of pairs")
    return SweepFolder(
        path=folder,
        manifest=str(summary.get("manifest", "")),
        total=total or len(pairs),
        complete=bool(summary.get("complete")),
        pairs=tuple(pairs),
        outputs={p.name: _cells(folder / p.name / REPORT) for p in pairs},
    )


def _read_summary(folder: Path) -> dict:
    """The folder's summary.json: a regular file, bounded, strict JSON (no Infinity)."""
    where = folder / SUMMARY
    if not where.exists() and not where.is_symlink():
        raise UsageError(f"{folder}: no readable {SUMMARY} (is it a `parity sweep --out` folder?)")
    raw = read_bytes(where, what="sweep summary", limit=MAX_SUMMARY, error=UsageError)
    check_json_budget(raw, f"sweep summary {where}")
    try:
        summary = strict_json.loads(raw)
    except strict_json.FieldError as exc:
        raise UsageError(f"{where}: {exc}") from exc
    if not isinstance(summary, dict):
        raise UsageError(f"{where}: not a JSON object; is it a `parity sweep --out` folder?")
    return summary


def _cells(report_path: Path) -> dict[str, OutputCell]:
    """Per output, its input sets merged as every table merges them (parity.show.rows.merge:
    the worst set's status by parity.labels.badness, the largest max abs)."""
    from parity.files.strict_json import FieldError
    from parity.reports.codec import report_rows_from_json
    from parity.show.rows import merge

    report = read_json(report_path) or {}
    try:
        rows = report_rows_from_json(report)
    except FieldError:
        return {}
    intended = _intended(report)
    hidden = _hidden(report)
    by_name: dict[str, list] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    cells: dict[str, OutputCell] = {}
    for name, mine in by_name.items():
        merged = merge(mine)
        label = intended.get(name, "") if merged.status == "fail" else ""
        cells[name] = OutputCell(str(merged.status), merged.max_abs, label, name in hidden)
    return cells


def _hidden(report: object) -> set[str]:
    """Outputs the report's findings call a bug that a loosened tolerance passes."""
    from parity.show.findings import HIDDEN_BY_TOLERANCE

    entries = report.get("findings") if isinstance(report, dict) else None
    found = entries if isinstance(entries, list) else []
    return {
        e["output"]
        for e in found
        if isinstance(e, dict) and e.get("kind") == "bug" and isinstance(e.get("output"), str)
        and HIDDEN_BY_TOLERANCE in str(e.get("text", ""))
    }  # fmt: skip


def _intended(report: object) -> dict[str, str]:
    """output -> label from the report's `intended` (parity.show.cause_labels.intended_json);
    entries that are not what it writes are left out."""
    entries = report.get("intended") if isinstance(report, dict) else None
    out: dict[str, str] = {}
    for e in entries if isinstance(entries, list) else []:
        output, label = (e.get("output"), e.get("label")) if isinstance(e, dict) else (0, 0)
        if isinstance(output, str) and isinstance(label, str):
            out.setdefault(output, label)
    return out
