"""The candidates x outputs grid (parity.show.candidate_views' cells), for the dashboard's Overview
and the HTML report: one row per candidate (its verdict in the label), one column per output,
each cell the candidate's worst input set for that output."""

from __future__ import annotations

import plotly.graph_objects as go

from parity.results import CandidateInfo, ValidationRun
from parity.show.candidate_views import candidate_cells
from parity.show.cause_labels import intended_outputs, run_cause
from parity.show.colors import FAIL_TEXT, STRUCTURAL_COLOR
from parity.show.figures import GridCell, judgement_grid, plot_text
from parity.verdict import Verdict

__all__ = ["candidate_row_label", "candidates_grid"]


def candidate_row_label(run: ValidationRun, info: CandidateInfo) -> str:
    """``#1 model.onnx (CPU, all) · FAIL``: a grid row, a menu entry."""
    look = run_cause(run, info.index)
    said = "FAIL" if look.verdict is Verdict.FAIL else str(look.verdict)
    return f"{info.label} · {said}" + (f" · {look.intended}" if look.intended else "")


def candidates_grid(run: ValidationRun) -> go.Figure:
    """Candidates x outputs on the judgement scale every grid uses (parity.show.figures.
    judgement_grid: worst error ÷ allowed error, greens pass, reds fail), each cell the
    candidate's worst input set, marked ✓ / ✗ / shape / dtype / missing; a candidate that
    could not run reads "error" across its row. A mark's customdata is (candidate index,
    output name, input set), input set -1 for a candidate that could not run."""
    infos = run.infos
    names = list(run.output_names)
    rows = [candidate_row_label(run, i) for i in infos]
    row_of = {i.index: rows[k] for k, i in enumerate(infos)}
    intended = intended_outputs(run)
    cells = []
    for cell in candidate_cells(run):
        worst = cell.worst
        fails = f"fails on {cell.n_failing} of {cell.n_sets} set(s)" if cell.n_failing else "pass"
        words = f"{fails}; worst: set {worst.input_set}"
        cells.append(
            GridCell(
                row_of[cell.candidate.index],
                cell.name,
                worst,
                (cell.candidate.index, cell.name, worst.input_set),
                words,
                intended=intended.get((cell.candidate.index, cell.name), ""),
            )
        )
    fig = judgement_grid(
        cells,
        rows=rows,
        columns=names,
        title="candidates × outputs (worst input set; colour: worst error ÷ allowed error)",
    )
    errors = [i for i in infos if i.error is not None]
    if errors:  # no comparisons: the row says why, in the structural colour
        ys = [plot_text(row_of[i.index]) for i in errors for _ in names]
        xs = [plot_text(n) for _ in errors for n in names]
        hover = [plot_text(f"{row_of[i.index]}: {i.error}") for i in errors for _ in names]
        fig.add_trace(
            go.Heatmap(
                x=xs, y=ys, z=[1.0] * len(xs), text=hover, hoverinfo="text",
                colorscale=[[0.0, STRUCTURAL_COLOR], [1.0, STRUCTURAL_COLOR]],
                showscale=False, xgap=3, ygap=3, name="could not run",
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="markers+text", text=["error"] * len(xs),
                customdata=[[i.index, n, -1] for i in errors for n in names],
                textfont={"color": FAIL_TEXT, "size": 15}, marker={"size": 28, "opacity": 0},
                hovertext=hover, hoverinfo="text", showlegend=False,
            )
        )  # fmt: skip
    fig.update_layout(height=max(300, 90 + 48 * len(rows)))
    return fig
