"""Table helpers the pages share: comparison rows as dataframes (their cells: parity.show.rows) and
status cells coloured (their text: parity.labels)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from parity.show.colors import mark_css
from parity.show.rows import COLUMNS, ComparisonRow


def rows_frame(rows: Sequence[ComparisonRow], *, leave_out: Sequence[str] = ()) -> pd.DataFrame:
    """The rows in parity.show.rows' column order (headers as titles), numbers kept numeric."""
    columns = [c for c in COLUMNS if c.key not in leave_out]
    data = [{c.header: row.value(c.key) for c in columns} for row in rows]
    return pd.DataFrame(data, columns=[c.header for c in columns])


def _header(key: str) -> str:
    return next(c.header for c in COLUMNS if c.key == key)


NUMBER_FORMAT = "%.2e"
"""Number cells in parity.text.number_text's scientific form (3 significant digits, at most 9
characters, e.g. ``-3.95e-1``), as the printf format st.dataframe's NumberColumn takes: the
cells stay numbers, so they sort. (A ``%g`` format writes 1.14e-6 as ``0.00000114`` there.)"""

ROW_COLUMN_CONFIG = {  # widths that fit the Overview's table on a 1280 px screen
    _header("set"): st.column_config.NumberColumn(_header("set"), width=40),
    _header("output"): st.column_config.TextColumn(_header("output"), width=110),
    _header("status"): st.column_config.TextColumn(_header("status"), width=64),
    _header("shape"): st.column_config.TextColumn(_header("shape"), width=100),
    _header("dtype"): st.column_config.TextColumn(_header("dtype"), width=104),
    _header("max_abs"): st.column_config.NumberColumn(
        _header("max_abs"), format=NUMBER_FORMAT, width=66
    ),
    _header("max_rel"): st.column_config.NumberColumn(
        _header("max_rel"), format=NUMBER_FORMAT, width=66
    ),
    _header("min_atol"): st.column_config.NumberColumn(
        _header("min_atol"),
        format=NUMBER_FORMAT,
        help="Smallest atol that passes at this output's rtol",
    ),
    _header("mismatch"): st.column_config.ProgressColumn(
        _header("mismatch"), min_value=0.0, max_value=1.0, format="percent", width=100
    ),
    _header("nonfinite"): st.column_config.NumberColumn(
        _header("nonfinite"), help="Elements NaN or ±Inf on one side only (never pass)", width=64
    ),
    _header("tolerance"): st.column_config.TextColumn(_header("tolerance"), width=90),
    _header("message"): st.column_config.TextColumn(_header("message"), width=240),
}
"""Column settings for :func:`rows_frame` tables (st.dataframe's column_config)."""


def row_column_config(frame: pd.DataFrame) -> dict:
    """ROW_COLUMN_CONFIG, its status column wide enough for a cause's label where a row
    reads one (``≈ float16 rounding``, ``✗ pass: a bug the tolerance hides``:
    parity.show.cause_labels)."""
    from parity.show.cause_labels import HIDDEN_BUG_MARKED

    status = _header("status")
    texts = frame[status].astype(str) if status in frame else None
    if texts is None or not (texts.str.startswith("≈") | (texts == HIDDEN_BUG_MARKED)).any():
        return ROW_COLUMN_CONFIG
    wide = st.column_config.TextColumn(status, width=min(260, 7 * int(texts.str.len().max()) + 24))
    return {**ROW_COLUMN_CONFIG, status: wide}


def fitting_columns(frame: pd.DataFrame, *, leave_out: Sequence[str] = ()) -> list[str]:
    """The frame's headers to show (st.dataframe's column_order) on a 1280 px page: without
    the `leave_out` column keys, the NaN / Inf column when every count is 0, and the
    atol / rtol column when every row has the same (say it beside the table:
    :func:`one_tolerance`)."""
    out = {_header(k) for k in leave_out}
    nonfinite = _header("nonfinite")
    if nonfinite in frame and not frame[nonfinite].fillna(0).astype(bool).any():
        out.add(nonfinite)
    if one_tolerance(frame) is not None:
        out.add(_header("tolerance"))
    if one_dtype(frame) is not None:
        out.add(_header("dtype"))
    return [c for c in frame.columns if c not in out]


def one_dtype(frame: pd.DataFrame) -> str | None:
    """The dtype every row of the frame has on both sides (said beside the table), or None."""
    column = _header("dtype")
    values = set(frame[column]) if column in frame else set()
    value = next(iter(values)) if len(values) == 1 else None
    return value if value and value != "-" and " vs " not in str(value) else None


def one_tolerance(frame: pd.DataFrame) -> str | None:
    """The atol / rtol text every row of the frame shares, or None."""
    column = _header("tolerance")
    values = set(frame[column]) if column in frame else set()
    return next(iter(values)) if len(values) == 1 else None


def status_style(frame: pd.DataFrame, columns: Sequence[str] | None = ("status",)):
    """Status cells in green, red, or amber where the failure is intended (a Styler;
    st.dataframe keeps the column config; colours: parity.show.colors.mark_css).

    `columns`: the columns whose text starts with ✓, ✗ or ≈ (None: every column)."""
    return frame.style.map(
        lambda value: mark_css(str(value)), subset=None if columns is None else list(columns)
    )
