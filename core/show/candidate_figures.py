"""The candidates x outputs grid (parity.show.candidate_views' cells), for the dashboard's Overview
and the HTML report: one row per candidate (its verdict in the label), one column per output,
each cell the candidate's worst input set for that output."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from parity.labels import status_label
from parity.results import CandidateInfo, ValidationRun
from parity.show.candidate_views import candidate_cells
from parity.show.figures import PASS_COLOR, plot_text
from parity.text import number_text
from parity.verdict import Verdict

__all__ = ["candidate_row_label", "candidates_grid"]


def candidate_row_label(run: ValidationRun, info: CandidateInfo) -> str:
    """``#1 model.onnx (CPU, all) · FAIL``: a grid row, a menu entry."""
    verdict = run.candidate_verdict(info.index)
    return f"{info.label} · {'FAIL' if verdict is Verdict.FAIL else verdict}"


def candidates_grid(run: ValidationRun) -> go.Figure:
    """Candidates x outputs, coloured by log10 of the worst max |error| over the input sets,
    marked ✓ / ✗ / shape / dtype / missing (a candidate that could not run: "error" across
    its row). A cell's customdata is (candidate index, output name, input set)."""
    infos = run.candidate_list
    names = list(run.output_names)
    rows = [plot_text(candidate_row_label(run, i)) for i in infos]
    row_of = {i.index: k for k, i in enumerate(infos)}
    z = np.full((len(rows), len(names)), np.nan)
    hover = [["" for _ in names] for _ in rows]
    xs, ys, marks, colors, custom = [], [], [], [], []
    for cell in candidate_cells(run):
        i, j = row_of[cell.candidate.index], names.index(cell.name)
        worst = cell.worst
        m = worst.stats.max_abs if worst.stats is not None else None
        if m is not None and math.isfinite(m) and m > 0:
            z[i, j] = math.log10(m)
        fails = f"fails on {cell.n_failing} of {cell.n_sets} set(s)" if cell.n_failing else "pass"
        hover[i][j] = (
            f"{rows[i]}<br>{plot_text(cell.name)}: {fails}<br>worst: set {worst.input_set}, "
            f"{status_label(worst.status)}, max |error| {number_text(m, 2)}"
        )
        xs.append(plot_text(cell.name))
        ys.append(rows[i])
        marks.append(status_label(worst.status, "mark"))
        colors.append(PASS_COLOR if worst.status.passed else "white")
        custom.append([cell.candidate.index, cell.name, worst.input_set])
    for info in infos:
        if info.error is not None:
            for name in names:
                xs.append(plot_text(name))
                ys.append(rows[row_of[info.index]])
                marks.append("error")
                colors.append("#9a6700")
                custom.append([info.index, name, -1])
                hover[row_of[info.index]][names.index(name)] = plot_text(info.error)
    finite = z[np.isfinite(z)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-8.0, 0.0)
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    columns = [plot_text(n) for n in names]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=rows,
            text=hover,
            hoverinfo="text",
            zmin=lo,
            zmax=hi,
            colorscale="YlOrRd",
            xgap=3,
            ygap=3,
            colorbar={"title": "log10 max |error|"},
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
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.update_layout(
        title={"text": "candidates × outputs (worst input set; colour: log10 max |error|)"},
        xaxis={"title": "output", "type": "category", "categoryarray": columns},
        yaxis={"title": "", "type": "category", "autorange": "reversed", "categoryarray": rows},
        margin={"l": 80, "r": 20, "t": 50, "b": 50},
        height=max(300, 90 + 48 * len(rows)),
        plot_bgcolor="#ffffff",
    )
    return fig
