"""Table helpers the pages share: comparison rows as dataframes (their cells: core.rows) and
status cells coloured (their text: core.labels)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from core.rows import COLUMNS, ComparisonRow


def rows_frame(rows: Sequence[ComparisonRow], *, leave_out: Sequence[str] = ()) -> pd.DataFrame:
    """The rows in core.rows' column order (headers as titles), numbers kept numeric."""
    columns = [c for c in COLUMNS if c.key not in leave_out]
    data = [{c.header: row.value(c.key) for c in columns} for row in rows]
    return pd.DataFrame(data, columns=[c.header for c in columns])


def _header(key: str) -> str:
    return next(c.header for c in COLUMNS if c.key == key)


ROW_COLUMN_CONFIG = {
    _header("set"): st.column_config.NumberColumn(_header("set"), width="small"),
    _header("max_abs"): st.column_config.NumberColumn(_header("max_abs"), format="%.3e"),
    _header("max_rel"): st.column_config.NumberColumn(_header("max_rel"), format="%.3e"),
    _header("min_atol"): st.column_config.NumberColumn(
        _header("min_atol"), format="%.3e", help="Smallest atol that passes at this output's rtol"
    ),
    _header("mismatch"): st.column_config.ProgressColumn(
        "mismatch fraction", min_value=0.0, max_value=1.0, format="percent"
    ),
    _header("nonfinite"): st.column_config.NumberColumn(
        _header("nonfinite"), help="Elements NaN or ±Inf on one side only (never pass)"
    ),
}
"""Column settings for :func:`rows_frame` tables (st.dataframe's column_config)."""


def status_style(frame: pd.DataFrame, columns: Sequence[str] | None = ("status",)):
    """Status cells in green or red (a Styler; st.dataframe keeps the column config).

    `columns`: the columns whose text starts with ✓ or ✗ (None: every column)."""

    def color(value: object) -> str:
        text = str(value)
        if text.startswith("✓"):
            return "color: #1a7f37; font-weight: 600"
        return "color: #cf222e; font-weight: 600" if text.startswith("✗") else ""

    return frame.style.map(color, subset=None if columns is None else list(columns))
