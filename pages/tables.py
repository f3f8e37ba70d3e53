"""Table helpers the pages share: status cells coloured (their text: core.labels)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd


def status_style(frame: pd.DataFrame, columns: Sequence[str] | None = ("status",)):
    """Status cells in green or red (a Styler; st.dataframe keeps the column config).

    `columns`: the columns whose text starts with ✓ or ✗ (None: every column)."""

    def color(value: object) -> str:
        text = str(value)
        if text.startswith("✓"):
            return "color: #1a7f37; font-weight: 600"
        return "color: #cf222e; font-weight: 600" if text.startswith("✗") else ""

    return frame.style.map(color, subset=None if columns is None else list(columns))
