"""The judgement grid: rows x outputs (input sets, or candidates, or an hf: run's steps), each
cell coloured by its worst error over the allowed one (parity.show.colors); shared by the
dashboard and the HTML report. Labels go in through `plot_text`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from parity.labels import set_label, set_noun
from parity.results import OutputComparison, ValidationRun
from parity.show.cause_labels import intended_outputs
from parity.show.colors import (
    RATIO_COLORBAR,
    RATIO_COLORSCALE,
    RATIO_SPAN,
    STRUCTURAL_COLOR,
    cell_look,
)
from parity.text import plot_text, plural_text

__all__ = ["GridCell", "judgement_grid", "verdict_grid"]


@dataclass(frozen=True)
class GridCell:
    """One cell of a judgement grid: where it sits, the comparison it shows, and what a
    click on it selects (plotly customdata)."""

    row: str
    column: str
    comparison: OutputComparison
    select: tuple = ()
    note: str = ""  # more hover words (a candidates grid: on how many sets it fails)
    intended: str = ""  # the cause's label of a failure the file meant (parity.show.cause_labels)


def judgement_grid(
    cells: Sequence[GridCell],
    *,
    rows: Sequence[str],
    columns: Sequence[str],
    title: str,
    column_title: str = "output",
) -> go.Figure:
    """Rows x columns of comparisons, each cell coloured by its worst error ÷ allowed error
    (parity.show.colors: the same scale in every run, greens pass, reds fail) and marked in
    words (✓, ✗, shape, dtype, missing) so the verdict reads without colour. Shape, dtype
    and missing cells are drawn in their own colour, never left empty. Row and column
    labels are plain text (plot_text); a click on a mark selects its `select` data.
    """
    rows = [plot_text(r) for r in rows]
    columns = [plot_text(c) for c in columns]
    where = {name: i for i, name in enumerate(rows)}, {name: j for j, name in enumerate(columns)}
    z = np.full((len(rows), len(columns)), np.nan)
    # cells off the ratio scale, by their own colour: structural (shape, dtype, missing)
    # and intended (amber)
    other: dict[str, np.ndarray] = {}
    hover = [["" for _ in columns] for _ in rows]
    xs, ys, marks, colors, custom, texts = [], [], [], [], [], []
    for cell in cells:
        i, j = where[0][plot_text(cell.row)], where[1][plot_text(cell.column)]
        look = cell_look(cell.comparison, cell.intended)
        if look.z is None:
            other.setdefault(look.fill, np.full(z.shape, np.nan))[i, j] = 1.0
        else:
            z[i, j] = look.z
        text = f"{rows[i]} · {columns[j]}<br>{plot_text(look.words)}"
        if cell.note:
            text += f"<br>{plot_text(cell.note)}"
        hover[i][j] = text
        xs.append(columns[j])
        ys.append(rows[i])
        marks.append(look.mark)
        colors.append(look.text_color)
        custom.append(list(cell.select))
        texts.append(text)
    common = {"x": columns, "y": rows, "xgap": 3, "ygap": 3, "hoverinfo": "text", "text": hover}
    fig = go.Figure(
        go.Heatmap(
            z=z,
            zmin=-RATIO_SPAN,
            zmax=RATIO_SPAN,
            colorscale=RATIO_COLORSCALE,
            colorbar=dict(RATIO_COLORBAR),
            name="judged",
            **common,
        )
    )
    for fill, cells_z in other.items():
        fig.add_trace(
            go.Heatmap(
                z=cells_z,
                colorscale=[[0.0, fill], [1.0, fill]],
                showscale=False,
                name="not comparable" if fill == STRUCTURAL_COLOR else "intended",
                **common,
            )
        )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers+text",
            text=marks,
            customdata=custom,
            textfont={"color": colors, "size": 15},
            marker={"size": 28, "opacity": 0},
            hovertext=texts,
            hoverinfo="text",
            showlegend=False,
        )
    )
    fig.update_layout(
        title={"text": plot_text(title)},
        xaxis={
            "title": column_title,
            "type": "category",
            "categoryorder": "array",
            "categoryarray": columns,
        },
        yaxis={
            "title": "",
            "type": "category",
            "autorange": "reversed",
            "categoryorder": "array",
            "categoryarray": rows,
        },
        margin={"l": 80, "r": 20, "t": 50, "b": 50},
        height=max(300, 90 + 56 * len(rows)),
        plot_bgcolor="#ffffff",
    )
    return fig


def verdict_grid(run: ValidationRun) -> go.Figure:
    """Input sets x outputs (:func:`judgement_grid`). A failure that appears only at some
    input sizes stands out as one odd row; a click selects (input set, output name)."""
    sets = [s.index for s in run.input_sets] or sorted({c.input_set for c in run.outputs})
    labels = {s: set_label(run, s) for s in sets}
    intended = intended_outputs(run)
    cells = [
        GridCell(
            labels[c.input_set],
            c.name,
            c,
            (c.input_set, c.name),
            intended=intended.get((c.candidate, c.name), ""),
        )
        for c in run.outputs
        if c.input_set in labels
    ]
    return judgement_grid(
        cells,
        rows=[labels[s] for s in sets],
        columns=list(run.output_names),
        title=f"{_rows_name(run)} × outputs (colour: worst error ÷ allowed error)",
    )


def _rows_name(run: ValidationRun) -> str:
    """What the rows are (labels.set_noun): an encoder's captured forwards are no
    generate() steps."""
    noun = set_noun(run)
    return "generate() steps" if noun == "step" else plural_text(noun)
