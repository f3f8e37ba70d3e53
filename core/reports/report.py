"""The JSON report, schema ``parity.report/1``: strict JSON (null, never NaN or Infinity).

Written the same way from a live run and from a saved run, so CI and the dashboard agree:
parity.reports.codec encodes the run; here are the report of a run that could not be made
and the writing of the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parity.files.atomic import write_output
from parity.files.json_output import dumps as strict_dumps
from parity.files.json_output import strict
from parity.reports.codec import REPORT_SCHEMA, report_json
from parity.results import ValidationRun
from parity.tolerances import Tolerances
from parity.verdict import Verdict

SCHEMA = REPORT_SCHEMA


def report_dict(run: ValidationRun) -> dict[str, Any]:
    """The run's report (parity.reports.codec encodes each part)."""
    return report_json(run)


def error_report_dict(
    *,
    model: str | None,
    onnx: str | None,
    tolerances: Tolerances,
    kind: str,
    message: str,
    environment: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The report of a run that could not be made (verdict ERROR)."""
    return strict(
        {
            "schema": SCHEMA,
            "verdict": Verdict.ERROR,
            "model": model,
            "onnx": onnx,
            "environment": environment or {},
            "tolerances": tolerances.to_json(),
            "input_sets": [],
            "outputs": [],
            "errors": [{"kind": kind, "message": message}],
        }
    )


def dumps(data: dict[str, Any]) -> str:
    return strict_dumps(data)


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    """Atomically (a killed write leaves the previous report whole); WriteError on failure."""
    write_output(path, dumps(data) + "\n", what="JSON report")
