"""Plotly figures of a run, shared by the dashboard and the HTML report.

Each builder takes small result objects (parity.show.reductions views, parity.results values, numpy
arrays of at most a few thousand points) and returns a `go.Figure`. None of them sees a
raw tensor: heatmaps arrive block-max-pooled and histograms arrive binned, so every figure
stays well under ~2 MB of JSON whatever the output's size. Plotly reads a subset of HTML
(links, <br>, <b>) in every label, so user strings (output names, set labels, titles built
from them) go in through `plot_text`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from parity.judge.pass_rule import allowed, exceeds
from parity.judge.ratio import element_errors
from parity.show.colors import (
    ATOL_COLOR,
    FAIL_COLOR,
    PASS_COLOR,
    RATIO_COLORBAR,
    RATIO_COLORSCALE,
    RATIO_SPAN,
    ratio_z,
)

# the grid and the where profile are their own modules; their names stay importable from here
from parity.show.grid_figure import GridCell as GridCell
from parity.show.grid_figure import judgement_grid as judgement_grid
from parity.show.grid_figure import verdict_grid as verdict_grid
from parity.show.reductions import (
    JUDGED_KINDS,
    ErrorHistogram,
    ScatterSample,
    SliceView,
    WorstElement,
    WorstElements,
    as_2d_shape,
)
from parity.show.where_figure import MAX_PROFILE_BARS as MAX_PROFILE_BARS
from parity.show.where_figure import where_figure as where_figure
from parity.text import number_text, plot_number_format, plot_text
from parity.tolerances import Tolerance

ERROR_SCALE = "Inferno"
SIGNED_SCALE = "RdBu_r"
VALUE_SCALE = "Viridis"
ZERO_COLOR = "#d0d7de"  # background, seen where a log-coloured error is exactly 0

_KIND_LABEL = {
    "signed": "error (onnx - ref)",
    "abs": "|error|",
    "rel": "relative error",
    "ratio": "error ÷ allowed",
    "fails": "failing elements (error ÷ allowed)",
    "ref": "reference (torch)",
    "onnx": "ONNX Runtime",
}


def _exp_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Integer-exponent ticks between lo and hi (log10 units), labelled like ``1e-5``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [], []
    a, b = math.floor(lo), math.ceil(hi)
    step = max(1, math.ceil((b - a + 1) / 6))
    vals = list(range(a, b + 1, step))
    return [float(v) for v in vals], [f"1e{v}" for v in vals]


def _finite_range(v: np.ndarray) -> tuple[float, float] | None:
    finite = v[np.isfinite(v)]
    if finite.size == 0:
        return None
    return float(finite.min()), float(finite.max())


def _color_values(
    view: SliceView, *, log_color: bool, tolerance: Tolerance | None = None
) -> tuple[np.ndarray, dict, str]:
    """z values for plotly (float32, no infinities), colour settings, and a colour-bar note.

    Infinite cells (one-sided NaN/Inf) are drawn at the end of the scale and counted. Judged
    views (error ÷ allowed) use the one ratio scale of parity.show.colors, the pass line marked;
    the other error views get the tolerance marked on their colour bar when it is given.
    """
    v = view.values.astype(np.float64, copy=True)
    note = ""
    if view.n_nonfinite:
        note = f"{view.n_nonfinite} NaN/Inf cells at scale end"
    if view.n_excluded and view.kind not in ("ref", "onnx"):
        note = "; ".join(filter(None, [note, "blank: excluded, not judged"]))
    if view.kind in JUDGED_KINDS:
        if view.kind == "fails":
            note = "; ".join(filter(None, [note, "blank: passes at this tolerance"]))
        settings = {
            "colorscale": RATIO_COLORSCALE,
            "zmin": -RATIO_SPAN,
            "zmax": RATIO_SPAN,
            "colorbar": dict(RATIO_COLORBAR),
        }
        return ratio_z(v).astype(np.float32), settings, note
    signed = view.kind in ("signed", "ref", "onnx")
    if log_color and not signed:
        pos = v[np.isfinite(v) & (v > 0)]
        top = float(pos.max()) if pos.size else 1.0
        # exact zeros have no logarithm: drawn as gaps over the grey background, and said
        z = np.where(np.isinf(v), top, v)
        z = np.where(z > 0, z, np.nan)
        if view.kind == "rel" and np.any(np.isnan(v) | (v == 0)):
            note = "; ".join(filter(None, [note, "grey: equal, or undefined where ref = 0"]))
        elif np.any(v == 0):
            note = "; ".join(filter(None, [note, "grey: exactly equal"]))
        z = np.log10(z)
        zr = _finite_range(z) or (0.0, 1.0)
        tickvals, ticktext = _exp_ticks(*zr)
        line = _tolerance_mark(view, tolerance)
        if line is not None and line[0] > 0:
            x = math.log10(line[0])
            zr = (min(zr[0], x), max(zr[1], x))
            tickvals, ticktext = _with_mark(tickvals, ticktext, x, line[1])
        colorbar = {"tickvals": tickvals, "ticktext": ticktext}
        settings = {"colorscale": ERROR_SCALE, "colorbar": colorbar, "zmin": zr[0], "zmax": zr[1]}
        return z.astype(np.float32), settings, note
    rng = _finite_range(v) or (0.0, 1.0)
    line = _tolerance_mark(view, tolerance)
    if view.kind == "signed":
        bound = max(abs(rng[0]), abs(rng[1]), line[0] if line else 0.0) or 1.0
        z = np.clip(v, -bound, bound)
        settings = {"colorscale": SIGNED_SCALE, "zmid": 0.0, "zmin": -bound, "zmax": bound}
        if line is not None:
            settings["colorbar"] = {
                "tickvals": [-line[0], 0.0, line[0]],
                "ticktext": [f"-{line[1]}", "0", line[1]],
            }
    elif signed:
        z = np.clip(v, rng[0], rng[1])
        settings = {"colorscale": VALUE_SCALE}
    else:
        top = max(rng[1], line[0] if line else 0.0) or 1.0
        z = np.clip(v, rng[0], rng[1])
        settings = {"colorscale": ERROR_SCALE, "zmin": 0.0, "zmax": top}
        if line is not None:
            settings["colorbar"] = {"tickvals": [0.0, line[0]], "ticktext": ["0", line[1]]}
    return z.astype(np.float32), settings, note


def _tolerance_mark(view: SliceView, tolerance: Tolerance | None) -> tuple[float, str] | None:
    """Where the tolerance sits on an error view's colour bar: atol for |error| and signed
    error, rtol for relative error (the pass rule's own terms)."""
    if tolerance is None:
        return None
    if view.kind in ("abs", "signed") and tolerance.atol > 0:
        return tolerance.atol, f"atol {tolerance.atol:.3g} ◀"
    if view.kind == "rel" and tolerance.rtol > 0:
        return tolerance.rtol, f"rtol {tolerance.rtol:.3g} ◀"
    return None


def _with_mark(
    tickvals: list[float], ticktext: list[str], at: float, label: str
) -> tuple[list[float], list[str]]:
    """The ticks with one marked value added (ticks too close to it dropped)."""
    keep = [(v, t) for v, t in zip(tickvals, ticktext, strict=True) if abs(v - at) > 0.3]
    keep.append((at, label))
    keep.sort()
    return [v for v, _ in keep], [t for _, t in keep]


def _cell_axes(view: SliceView) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres in element coordinates, so axes read as the tensor's own indices."""
    nr, nc = view.values.shape
    x = np.arange(nc) * view.col_factor + (view.col_factor - 1) / 2
    y = np.arange(nr) * view.row_factor + (view.row_factor - 1) / 2
    return x, y


_VALUE_WORDS = {  # the hover's words for a cell's own value, in its real units
    "signed": "error (onnx - ref)",
    "abs": "|error|",
    "rel": "relative error",
    "ratio": "error ÷ allowed",
    "fails": "error ÷ allowed",
}


def _cell_hover(
    view: SliceView, names: Sequence[str | None] | None = None, *, extra: str = ""
) -> tuple[np.ndarray, str]:
    """(customdata, hovertemplate) of a heatmap's cells: the element's index, the view's value
    in its real units (never the colour's logarithm), and the reference and ONNX values.

    A pooled cell shows its block's worst element (block max pooling), its index given as
    the block's centre. customdata is float32 [value, ref, onnx] per cell ([ref, onnx] for a
    ref or ONNX view), which plotly sends as binary.
    """
    values = view.values
    ref = view.ref_values if view.ref_values is not None else np.full_like(values, np.nan)
    onnx = view.onnx_values if view.onnx_values is not None else np.full_like(values, np.nan)
    own = view.kind in _VALUE_WORDS  # ref and ONNX views: their value is one of the two
    custom = np.stack([values, ref, onnx] if own else [ref, onnx], axis=-1).astype(np.float32)
    spec = view.spec
    pad = len(spec.index) - len(view.shape) if view.shape else 0
    fmt = ":.0f" if view.pooled else ""
    parts = [
        f"%{{y{fmt}}}" if a == spec.row_axis else f"%{{x{fmt}}}" if a == spec.col_axis else str(i)
        for a, i in enumerate(spec.index)
        if a >= pad
    ]
    col_title, row_title = view.axis_titles(names)
    at = "≈" if view.pooled else ""
    lines = [f"index {at}[{', '.join(parts)}]"]
    if names is not None:  # the two axes by name, where the slice has them
        named = [
            f"{plot_text(t.split(' (')[0])} {at}%{{{c}{fmt}}}"
            for t, c in ((row_title, "y"), (col_title, "x"))
            if t
        ]
        lines.append(", ".join(named))
    if view.pooled:
        lines.append(f"(worst of a {view.row_factor}×{view.col_factor} block)")
    err, val = plot_number_format(), plot_number_format(6)
    if own:
        unit = "×" if view.kind in JUDGED_KINDS else ""
        lines.append(f"{_VALUE_WORDS[view.kind]} %{{customdata[0]:{err}}}{unit}")
    lines.append(f"ref %{{customdata[{int(own)}]:{val}}}")
    lines.append(f"ONNX %{{customdata[{int(own) + 1}]:{val}}}")
    return custom, "<br>".join(lines) + f"<extra>{extra}</extra>"


def _heatmap_trace(
    view: SliceView,
    *,
    log_color: bool,
    name: str,
    tolerance: Tolerance | None = None,
    names: Sequence[str | None] | None = None,
) -> tuple[go.Heatmap, str]:
    z, settings, note = _color_values(view, log_color=log_color, tolerance=tolerance)
    x, y = _cell_axes(view)
    custom, hover = _cell_hover(view, names)
    trace = go.Heatmap(z=z, x=x, y=y, customdata=custom, hovertemplate=hover, name=name, **settings)
    return trace, note


def worst_in_slice(view: SliceView, worst: WorstElements, shape: Sequence[int]) -> list[int]:
    """Positions in `worst.rows` of the elements lying in the view's slice."""
    full = as_2d_shape(shape)
    keep = []
    for i, w in enumerate(worst.rows):
        idx = (0,) * (len(full) - len(w.index)) + tuple(w.index)
        if all(
            idx[ax] == view.spec.index[ax]
            for ax in range(len(full))
            if ax not in (view.spec.row_axis, view.spec.col_axis)
        ):
            keep.append(i)
    return keep


MARKED_FRACTION = 0.1
"""At most this fraction of a slice's elements get a worst-element cross (at least one)."""


def marked_worst(
    view: SliceView,
    worst: WorstElements,
    shape: Sequence[int],
    tolerance: Tolerance | None = None,
) -> list[WorstElement]:
    """The worst elements to mark with a cross in the view's slice: those that fail at
    `tolerance` (only the single worst when none fails), at most MARKED_FRACTION of the
    slice's elements, so a small output is not crossed out element by element."""
    rows = [worst.rows[i] for i in worst_in_slice(view, worst, shape)]
    if tolerance is not None and rows:
        ref = np.array([w.ref for w in rows], dtype=np.float64)
        onnx = np.array([w.onnx for w in rows], dtype=np.float64)
        _, _, fails = element_errors(ref, onnx, tolerance)
        rows = [w for w, f in zip(rows, fails, strict=True) if f] or rows[:1]
    cells = view.slice_shape[0] * view.slice_shape[1]
    return rows[: max(1, int(cells * MARKED_FRACTION))]


FIGURE_WIDTH = 450
"""The width a heatmap is sized for (the Inspect page's column at 1280 px; wider screens
only widen it): its height follows the slice's aspect ratio so the plot fills the width."""
SQUARE_ASPECT = 3.0
"""Slices at most this far from square keep square cells; longer ones fill the box."""


def whole_ticks(n: int) -> dict:
    """A short index axis (at most 8 cells): ticks at whole indices only (plotly put 0.5
    steps between 2 rows: "-0.5, 0, 0.5, 1, 1.5")."""
    return {"tick0": 0, "dtick": 1} if n <= 8 else {}


def heatmap_layout(view: SliceView, *, top: int, bottom: int, colorbar: int = 115) -> dict:
    """Axis and size settings that fill the width: square cells (and a figure as tall as
    the slice is, relative to its width) near square, free cells for long slices."""
    rows, cols = (max(1, n) for n in view.slice_shape)
    aspect = rows / cols
    plot_w = FIGURE_WIDTH - 75 - colorbar  # margins, and the colour bar with its labels
    square = 1 / SQUARE_ASPECT <= aspect <= SQUARE_ASPECT
    plot_h = plot_w * aspect if square else plot_w * min(max(aspect, 0.4), 1.6)
    height = int(min(max(plot_h + top + bottom, 260), 640))
    # the ranges end at the cells' edges: no grey bands beyond the data (markers padded them)
    nr, nc = view.values.shape
    xaxis: dict = {"range": [-0.5, nc * view.col_factor - 0.5]}
    yaxis: dict = {"range": [nr * view.row_factor - 0.5, -0.5]}  # row 0 at the top
    for axis, n in ((xaxis, cols), (yaxis, rows)):
        axis.update(whole_ticks(n))
    if square:  # square cells, extra room left empty (never grey bands past the data)
        yaxis.update(scaleanchor="x", constrain="domain")
        xaxis.update(constrain="domain")
    return {"xaxis": xaxis, "yaxis": yaxis, "height": height}


def error_heatmap(
    view: SliceView,
    *,
    worst: WorstElements | None = None,
    shape: Sequence[int] | None = None,
    log_color: bool = True,
    title: str = "",
    tolerance: Tolerance | None = None,
    names: Sequence[str | None] | None = None,
) -> go.Figure:
    """Heatmap of one pooled slice, the worst (failing) elements of that slice marked on top.

    The worst-element markers are a scatter (clickable in Streamlit, unlike heatmap
    cells); `shape` is the output's full shape, needed to place them. `tolerance` marks
    atol (rtol for relative error) on the colour bar; ratio views mark the pass line.
    `names`: the ONNX dim name of each axis (ValidationRun.dim_names), for the axis titles
    and the hover. `title` is plain text (a user string: escaped here).
    """
    trace, note = _heatmap_trace(
        view, log_color=log_color, name="error", tolerance=tolerance, names=names
    )
    trace.colorbar.thickness = 14  # a slim bar leaves the cells the room
    fig = go.Figure(trace)
    if worst is not None and shape is not None and worst.rows:
        full = as_2d_shape(shape)
        rows = marked_worst(view, worst, shape, tolerance)
        if rows:
            idx = [(0,) * (len(full) - len(w.index)) + tuple(w.index) for w in rows]
            fig.add_trace(
                go.Scatter(
                    x=[i[view.spec.col_axis] for i in idx],
                    y=[i[view.spec.row_axis] for i in idx],
                    mode="markers",
                    marker={
                        "symbol": "x-thin-open",
                        "size": 11,
                        "color": "#00e5ff",
                        "line": {"width": 2, "color": "#00e5ff"},
                    },
                    name="worst elements",
                    hovertext=[_worst_hover(w) for w in rows],
                    hoverinfo="text",
                )
            )
    x_title, y_title = (plot_text(t) for t in view.axis_titles(names))
    subtitle = view.pooling_text() + (f"; {note}" if note else "")
    head = plot_text(title) if title else _KIND_LABEL[view.kind]
    top, bottom = 70, 50
    layout = heatmap_layout(view, top=top, bottom=bottom)
    fig.update_layout(
        title={"text": f"{head} {view.spec.describe(view.spec.index)}<br><sup>{subtitle}</sup>"},
        xaxis={"title": x_title, **layout["xaxis"]},
        yaxis={"title": y_title, **layout["yaxis"]},
        margin={"l": 60, "r": 15, "t": top, "b": bottom},
        showlegend=False,
        height=layout["height"],
        plot_bgcolor=ZERO_COLOR,
    )
    return fig


def _worst_hover(w: WorstElement) -> str:
    """A marked worst element's hover: index, |error|, both values (parity.text numbers)."""
    return (
        f"worst element [{', '.join(str(i) for i in w.index)}]<br>"
        f"|error| {number_text(w.abs_error)}<br>"
        f"ref {number_text(w.ref, 6)}<br>ONNX {number_text(w.onnx, 6)}"
    )


def slice_panels(
    ref_view: SliceView,
    onnx_view: SliceView,
    error_view: SliceView,
    *,
    log_color: bool = True,
    tolerance: Tolerance | None = None,
    names: Sequence[str | None] | None = None,
) -> go.Figure:
    """Reference, ONNX and error of the same slice side by side, zoom linked.

    Reference and ONNX share one colour scale so a difference in colour is a difference in
    value; the error has its own. `names`: the ONNX dim names (axis titles, hover).
    """
    fig = make_subplots(
        rows=1,
        cols=3,
        shared_xaxes="all",
        shared_yaxes="all",
        subplot_titles=("reference (torch)", "ONNX Runtime", _KIND_LABEL[error_view.kind]),
        horizontal_spacing=0.08,
    )
    ranges = [r for v in (ref_view, onnx_view) if (r := _finite_range(v.values)) is not None]
    lo = min((r[0] for r in ranges), default=0.0)
    hi = max((r[1] for r in ranges), default=1.0)
    for col, view in ((1, ref_view), (2, onnx_view)):
        x, y = _cell_axes(view)
        z = np.clip(np.nan_to_num(view.values, nan=np.nan, posinf=hi, neginf=lo), lo, hi)
        custom, hover = _cell_hover(view, names)
        fig.add_trace(
            go.Heatmap(
                z=z.astype(np.float32),
                x=x,
                y=y,
                coloraxis="coloraxis",
                customdata=custom,
                hovertemplate=hover,
            ),
            row=1,
            col=col,
        )
    err, note = _heatmap_trace(
        error_view, log_color=log_color, name="error", tolerance=tolerance, names=names
    )
    err.update(coloraxis="coloraxis2")
    settings = {k: err[k] for k in ("colorscale", "zmin", "zmax", "zmid") if err[k] is not None}
    colorbar = err.colorbar.to_plotly_json() if err.colorbar else {}
    for key in ("colorscale", "zmin", "zmax", "zmid", "colorbar"):
        err[key] = None
    fig.add_trace(err, row=1, col=3)
    fig.update_layout(
        coloraxis={"colorscale": VALUE_SCALE, "cmin": lo, "cmax": hi, "colorbar": {"x": 0.62}},
        coloraxis2={
            "colorscale": settings.get("colorscale", ERROR_SCALE),
            "colorbar": {"x": 1.0, **colorbar},
            **({"cmid": settings["zmid"]} if "zmid" in settings else {}),
            **({"cmin": settings["zmin"]} if "zmin" in settings else {}),
            **({"cmax": settings["zmax"]} if "zmax" in settings else {}),
        },
        title={"text": f"<sup>{error_view.pooling_text()}{'; ' + note if note else ''}</sup>"},
        margin={"l": 50, "r": 20, "t": 80, "b": 40},
        height=380,
        plot_bgcolor=ZERO_COLOR,
    )
    x_title, y_title = (plot_text(t) for t in error_view.axis_titles(names))
    fig.update_yaxes(autorange="reversed")
    rows, cols = (max(1, n) for n in error_view.slice_shape)
    fig.update_xaxes(whole_ticks(cols))
    fig.update_yaxes(whole_ticks(rows))
    fig.update_yaxes(title_text=y_title, row=1, col=1)
    fig.update_xaxes(title_text=x_title)
    return fig


def error_histogram(
    hist: ErrorHistogram, *, atol: float | None = None, worst: float | None = None
) -> go.Figure:
    """|error| on log-spaced bins (bars, log counts) and the cumulative fraction (line).

    The x axis is in log10 units with ticks labelled ``1e-5`` etc., so bars keep their true
    widths; zero errors and one-sided NaN/Inf are said in the title (log bins cannot hold them).
    """
    lx = np.log10(hist.edges)
    centers = (lx[:-1] + lx[1:]) / 2
    widths = np.diff(lx)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(
        go.Bar(
            x=centers,
            y=hist.counts,
            width=widths,
            marker_color="#6e7781",
            name="elements",
            customdata=np.stack([hist.edges[:-1], hist.edges[1:]], axis=1),
            hovertemplate="|error| %{customdata[0]:.3g} .. %{customdata[1]:.3g}<br>"
            "%{y} elements<extra></extra>",
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=lx[1:],
            y=hist.cumulative,
            mode="lines",
            line={"color": "#8250df"},
            name="fraction with |error| ≤ x",
            hovertemplate="%{y:.4%} of elements ≤ %{customdata:.3g}<extra></extra>",
            customdata=hist.edges[1:],
        ),
        secondary_y=True,
    )
    lo, hi = float(lx[0]), float(lx[-1])
    marks = ((atol, "atol", ATOL_COLOR, 0), (worst, "worst", FAIL_COLOR, 16))
    for value, label, color, shift in marks:
        if value is None or not (value > 0 and math.isfinite(value)):
            continue
        x = math.log10(value)
        lo, hi = min(lo, x - 0.2), max(hi, x + 0.2)
        fig.add_trace(
            go.Scatter(
                x=[x, x],
                y=[0, 1.05],
                mode="lines",
                line={"color": color, "dash": "dash", "width": 2},
                name=f"{label} = {number_text(value)}",
                hoverinfo="name",
            ),
            secondary_y=True,
        )
        # the label above the plot area, at two heights: never clipped by the plot's top,
        # never drawn over the curve, never over the other label
        fig.add_annotation(
            x=x, xref="x", y=1.0, yref="paper", yanchor="bottom", yshift=shift,
            text=f"{label} {number_text(value)}", showarrow=False,
            font={"color": color, "size": 12}, bgcolor="rgba(255,255,255,0.85)",
        )  # fmt: skip
    tickvals, ticktext = _exp_ticks(lo, hi)
    parts = [f"{hist.n_total:,} elements"]
    if hist.n_zero:
        parts.append(f"{hist.n_zero:,} exactly equal")
    if hist.n_nonfinite:
        parts.append(f"{hist.n_nonfinite:,} NaN/Inf mismatches (not binned)")
    fig.update_layout(
        title={"text": "|error| histogram<br><sup>" + "; ".join(parts) + "</sup>"},
        xaxis={"title": "|onnx - ref|", "tickvals": tickvals, "ticktext": ticktext},
        bargap=0.05,
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 60, "r": 60, "t": 100, "b": 40},
        height=400,
    )
    fig.update_yaxes(title_text="elements", type="log", dtick=1, secondary_y=False)
    fig.update_yaxes(
        title_text="cumulative fraction",
        range=[0, 1.05],
        tickvals=[0, 0.25, 0.5, 0.75, 1.0],
        tickformat=".0%",
        secondary_y=True,
        showgrid=False,
    )
    return fig


def onnx_vs_ref_scatter(sample: ScatterSample, *, tolerance: Tolerance) -> go.Figure:
    """ONNX against reference values, points outside the pass band in red, band drawn."""
    r, o = sample.ref, sample.onnx
    fail = exceeds(np.abs(o - r), np.abs(r), tolerance.atol, tolerance.rtol)
    fig = go.Figure()
    if r.size:
        lo, hi = float(min(r.min(), o.min())), float(max(r.max(), o.max()))
    else:
        lo, hi = -1.0, 1.0
    if hi <= lo:
        lo, hi = lo - 1.0, hi + 1.0
    xs = np.linspace(lo, hi, 201)
    band = allowed(np.abs(xs), tolerance.atol, tolerance.rtol)
    fig.add_trace(
        go.Scatter(
            x=np.concatenate([xs, xs[::-1]]),
            y=np.concatenate([xs + band, (xs - band)[::-1]]),
            fill="toself",
            fillcolor="rgba(26,127,55,0.18)",
            line={"width": 0},
            name=f"pass band (atol {tolerance.atol:.3g}, rtol {tolerance.rtol:.3g})",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[lo, hi],
            y=[lo, hi],
            mode="lines",
            line={"color": "#6e7781", "dash": "dot"},
            name="onnx = ref",
            hoverinfo="skip",
        )
    )
    for mask, label, color in ((~fail, "pass", PASS_COLOR), (fail, "fail", FAIL_COLOR)):
        if mask.any():
            fig.add_trace(
                go.Scatter(
                    x=r[mask],
                    y=o[mask],
                    mode="markers",
                    name=f"{label} ({int(mask.sum())})",
                    marker={"color": color, "size": 4, "opacity": 0.7},
                    hovertemplate="ref %{x:.6g}<br>onnx %{y:.6g}<extra></extra>",
                )
            )
    shown = f"{len(r):,} of {sample.n_total:,} elements" + (" (sampled)" if sample.sampled else "")
    if sample.n_nonfinite:
        shown += f"; {sample.n_nonfinite:,} NaN/Inf pairs not drawn"
    fig.update_layout(
        title={"text": f"ONNX vs reference<br><sup>{shown}</sup>"},
        xaxis={"title": "reference (torch)"},
        yaxis={"title": "ONNX Runtime"},
        legend={"orientation": "h", "y": -0.2},
        margin={"l": 60, "r": 20, "t": 70, "b": 40},
        height=420,
    )
    return fig


def mismatch_curve(
    atols: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    atol: float | None = None,
    title: str = "mismatch fraction vs atol",
) -> go.Figure:
    """Fraction of mismatching elements against atol, one line per output (log x)."""
    fig = go.Figure()
    for name, fractions in curves.items():
        fig.add_trace(
            go.Scatter(
                x=atols,
                y=fractions,
                mode="lines",
                name=plot_text(name),
                line_shape="hv",
                hovertemplate="atol %{x:.3g}<br>%{y:.4%} mismatch<extra>%{fullData.name}</extra>",
            )
        )
    if atol is not None and atol > 0:
        fig.add_trace(
            go.Scatter(
                x=[atol, atol],
                y=[0, 1],
                mode="lines",
                line={"color": ATOL_COLOR, "dash": "dash"},
                name=f"atol {atol:.3g}",
                hoverinfo="name",
            )
        )
    fig.update_layout(
        title={"text": plot_text(title)},
        xaxis={"title": "atol", "type": "log", "exponentformat": "e"},
        yaxis={"title": "mismatch fraction", "range": [0, 1.02], "tickformat": ".0%"},
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        height=340,
    )
    return fig
