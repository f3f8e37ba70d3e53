"""The per-output overrides editor's data: rows from the tolerances, tolerances from edits.

Cells are text, read by parity.text.parse_number: a number cell in the browser drops the
``e-`` of ``5e-3`` and stores 53. Kept apart from the page so it can be tested directly.
"""

from __future__ import annotations

import pandas as pd

from parity.errors import UsageError
from parity.results import ValidationRun
from parity.text import parse_number
from parity.tolerances import Tolerance, Tolerances

EDITOR_COLUMNS = ["output", "override", "atol", "rtol"]


def fmt(value: float) -> str:
    """A tolerance as a cell shows it: ``0``, ``0.005``, ``1e-05`` (exact, round-trips)."""
    return "0" if value == 0 else f"{value:g}" if float(f"{value:g}") == value else repr(value)


def editor_frame(run: ValidationRun, tol: Tolerances) -> pd.DataFrame:
    """One row per output; atol/rtol are text cells (a number cell mangles ``5e-3``)."""
    rows = []
    for name in run.output_names:
        t = tol.outputs.get(name)
        rows.append(
            {
                "output": name,
                "override": t is not None,
                "atol": fmt(t.atol) if t is not None else "",
                "rtol": fmt(t.rtol) if t is not None else "",
            }
        )
    return pd.DataFrame(rows, columns=EDITOR_COLUMNS).astype({"override": "bool"})


def apply_edits(
    tol: Tolerances, names: list[str], edited_rows: dict[int, dict]
) -> tuple[Tolerances, list[str]]:
    """The tolerances after the editor's cell edits, and one line per cell that was refused.

    A number typed in a row's atol or rtol turns its override on; a blank cell takes the
    global value; numbers are read by parity.text.parse_number (``5e-3`` = ``0.005``).
    """
    errors: list[str] = []
    for row, edit in sorted(edited_rows.items()):
        name = names[int(row)]
        current = tol.outputs.get(name)
        on = current is not None
        values: dict[str, float | None] = {"atol": None, "rtol": None}
        if current is not None:
            values.update(current.to_json())
        for column in ("atol", "rtol"):
            if column not in edit:
                continue
            text = "" if edit[column] is None else str(edit[column]).strip()
            if not text:
                values[column] = None
                continue
            try:
                number = parse_number(text)
                Tolerance(**{column: number})  # finite and >= 0, or UsageError
            except (ValueError, UsageError) as exc:
                errors.append(f"{column} of {name}: {exc}")
                continue
            values[column] = number
            on = True
        if "override" in edit:
            on = bool(edit["override"])
        if on:
            tol = tol.with_output(
                name,
                Tolerance(
                    atol=tol.default.atol if values["atol"] is None else values["atol"],
                    rtol=tol.default.rtol if values["rtol"] is None else values["rtol"],
                ),
            )
        else:
            tol = tol.with_output(name, None)
    return tol, errors
