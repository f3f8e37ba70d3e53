"""Plotly figures of a run, shared by the dashboard and the HTML report.

Each builder takes small result objects (core.views views, core.results values, numpy
arrays of at most a few thousand points) and returns a `go.Figure`. None of them sees a
raw tensor: heatmaps arrive block-max-pooled and histograms arrive binned, so every figure
stays well under ~2 MB of JSON whatever the output's size. Plotly reads a subset of HTML
(links, <br>, <b>) in every label, so user strings (output names, set labels, titles built
from them) go in through `plot_text`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.labels import set_label, status_label
from core.results import OutputComparison, ValidationRun
from core.text import number_text
from core.tolerances import Tolerance
from core.views import ErrorHistogram, ScatterSample, SliceView, WorstElements, as_2d_shape

PASS_COLOR = "#1a7f37"
FAIL_COLOR = "#cf222e"
ATOL_COLOR = "#0969da"
ERROR_SCALE = "Inferno"
SIGNED_SCALE = "RdBu_r"
VALUE_SCALE = "Viridis"
ZERO_COLOR = "#d0d7de"  # background, seen where a log-coloured error is exactly 0

_KIND_LABEL = {
    "signed": "error (onnx - ref)",
    "abs": "|error|",
    "rel": "relative error",
    "ref": "reference (torch)",
    "onnx": "ONNX Runtime",
}


def plot_text(value: object) -> str:
    """A user string as literal text in a plotly label, title, legend or hover text."""
    return html.escape(str(value), quote=False)


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


def _color_values(view: SliceView, *, log_color: bool) -> tuple[np.ndarray, dict, str]:
    """z values for plotly (float32, no infinities), colour settings, and a colour-bar note.

    Infinite cells (one-sided NaN/Inf) are drawn at the end of the scale and counted.
    """
    v = view.values.astype(np.float64, copy=True)
    note = ""
    if view.n_nonfinite:
        note = f"{view.n_nonfinite} NaN/Inf cells at scale end"
    if view.n_excluded and view.kind not in ("ref", "onnx"):
        note = "; ".join(filter(None, [note, "blank: excluded, not judged"]))
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
        colorbar = {"tickvals": tickvals, "ticktext": ticktext}
        return z.astype(np.float32), {"colorscale": ERROR_SCALE, "colorbar": colorbar}, note
    rng = _finite_range(v) or (0.0, 1.0)
    if view.kind == "signed":
        bound = max(abs(rng[0]), abs(rng[1])) or 1.0
        z = np.clip(v, -bound, bound)
        settings = {"colorscale": SIGNED_SCALE, "zmid": 0.0, "zmin": -bound, "zmax": bound}
    elif signed:
        z = np.clip(v, rng[0], rng[1])
        settings = {"colorscale": VALUE_SCALE}
    else:
        z = np.clip(v, rng[0], rng[1])
        settings = {"colorscale": ERROR_SCALE, "zmin": 0.0}
    return z.astype(np.float32), settings, note


def _cell_axes(view: SliceView) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres in element coordinates, so axes read as the tensor's own indices."""
    nr, nc = view.values.shape
    x = np.arange(nc) * view.col_factor + (view.col_factor - 1) / 2
    y = np.arange(nr) * view.row_factor + (view.row_factor - 1) / 2
    return x, y


def _heatmap_trace(view: SliceView, *, log_color: bool, name: str) -> tuple[go.Heatmap, str]:
    z, settings, note = _color_values(view, log_color=log_color)
    x, y = _cell_axes(view)
    unit = "log10 " if log_color and view.kind in ("abs", "rel") else ""
    hover = (
        f"{_KIND_LABEL[view.kind]}<br>row %{{y}}, col %{{x}}"
        + ("<br>(block max)" if view.pooled else "")
        + f"<br>{unit}value %{{z:.4g}}<extra>{name}</extra>"
    )
    trace = go.Heatmap(z=z, x=x, y=y, hovertemplate=hover, name=name, **settings)
    return trace, note


def _axis_titles(view: SliceView) -> tuple[str, str]:
    return f"axis {view.spec.col_axis}", f"axis {view.spec.row_axis}"


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


def error_heatmap(
    view: SliceView,
    *,
    worst: WorstElements | None = None,
    shape: Sequence[int] | None = None,
    log_color: bool = True,
    title: str = "",
) -> go.Figure:
    """Heatmap of one pooled slice, with the worst elements of that slice marked on top.

    The worst-element markers are a scatter (clickable in Streamlit, unlike heatmap
    cells); `shape` is the output's full shape, needed to place them.
    """
    trace, note = _heatmap_trace(view, log_color=log_color, name="error")
    fig = go.Figure(trace)
    if worst is not None and shape is not None and worst.rows:
        full = as_2d_shape(shape)
        picks = worst_in_slice(view, worst, shape)
        rows = [worst.rows[i] for i in picks]
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
                    customdata=[[str(list(w.index)), w.ref, w.onnx, w.abs_error] for w in rows],
                    hovertemplate=(
                        "index %{customdata[0]}<br>ref %{customdata[1]:.6g}<br>"
                        "onnx %{customdata[2]:.6g}<br>|error| %{customdata[3]:.4g}"
                        "<extra>worst</extra>"
                    ),
                )
            )
    x_title, y_title = _axis_titles(view)
    subtitle = view.pooling_text() + (f"; {note}" if note else "")
    fig.update_layout(
        title={
            "text": f"{title or _KIND_LABEL[view.kind]} {view.spec.describe(view.spec.index)}"
            f"<br><sup>{subtitle}</sup>"
        },
        xaxis={"title": x_title, "constrain": "domain"},
        yaxis={"title": y_title, "autorange": "reversed", "scaleanchor": "x"},
        margin={"l": 60, "r": 20, "t": 70, "b": 50},
        showlegend=False,
        height=520,
        plot_bgcolor=ZERO_COLOR,
    )
    return fig


def slice_panels(
    ref_view: SliceView, onnx_view: SliceView, error_view: SliceView, *, log_color: bool = True
) -> go.Figure:
    """Reference, ONNX and error of the same slice side by side, zoom linked.

    Reference and ONNX share one colour scale so a difference in colour is a difference in
    value; the error has its own.
    """
    fig = make_subplots(
        rows=1,
        cols=3,
        shared_xaxes="all",
        shared_yaxes="all",
        subplot_titles=("reference (torch)", "ONNX Runtime", _KIND_LABEL[error_view.kind]),
        horizontal_spacing=0.08,
    )
    ranges = [_finite_range(v.values) for v in (ref_view, onnx_view)]
    ranges = [r for r in ranges if r is not None]
    lo = min((r[0] for r in ranges), default=0.0)
    hi = max((r[1] for r in ranges), default=1.0)
    for col, view in ((1, ref_view), (2, onnx_view)):
        x, y = _cell_axes(view)
        z = np.clip(np.nan_to_num(view.values, nan=np.nan, posinf=hi, neginf=lo), lo, hi)
        fig.add_trace(
            go.Heatmap(
                z=z.astype(np.float32),
                x=x,
                y=y,
                coloraxis="coloraxis",
                hovertemplate="row %{y}, col %{x}<br>value %{z:.6g}<extra></extra>",
            ),
            row=1,
            col=col,
        )
    err, note = _heatmap_trace(error_view, log_color=log_color, name="error")
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
    fig.update_yaxes(autorange="reversed")
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
    for value, label, color in ((atol, "atol", ATOL_COLOR), (worst, "worst", FAIL_COLOR)):
        if value is None or not (value > 0 and math.isfinite(value)):
            continue
        x = math.log10(value)
        lo, hi = min(lo, x - 0.2), max(hi, x + 0.2)
        fig.add_trace(
            go.Scatter(
                x=[x, x],
                y=[0, 1],
                mode="lines+text",
                text=["", f"{label} {value:.3g}"],
                textposition="top left" if label == "worst" else "top right",
                line={"color": color, "dash": "dash", "width": 2},
                name=f"{label} = {value:.3g}",
                hoverinfo="name",
            ),
            secondary_y=True,
        )
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
        margin={"l": 60, "r": 60, "t": 70, "b": 40},
        height=380,
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
    fail = np.abs(o - r) > tolerance.atol + tolerance.rtol * np.abs(r)
    fig = go.Figure()
    if r.size:
        lo, hi = float(min(r.min(), o.min())), float(max(r.max(), o.max()))
    else:
        lo, hi = -1.0, 1.0
    if hi <= lo:
        lo, hi = lo - 1.0, hi + 1.0
    xs = np.linspace(lo, hi, 201)
    band = tolerance.atol + tolerance.rtol * np.abs(xs)
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


def verdict_grid(run: ValidationRun) -> go.Figure:
    """Input sets x outputs, coloured by log10 max |error|, each cell marked pass/fail.

    A failure that appears only at some input sizes stands out as one odd row. Cell markers
    are a scatter whose `customdata` is (input set, output name), so a click can select it.
    """
    names = list(run.output_names)
    sets = [s.index for s in run.input_sets] or sorted({c.input_set for c in run.comparisons})
    z = np.full((len(sets), len(names)), np.nan)
    text: list[list[str]] = [["" for _ in names] for _ in sets]
    by_key: dict[tuple[int, str], OutputComparison] = {
        (c.input_set, c.name): c for c in run.comparisons
    }
    xs, ys, marks, colors, custom = [], [], [], [], []
    for i, s in enumerate(sets):
        for j, name in enumerate(names):
            c = by_key.get((s, name))
            if c is None:
                continue
            m = c.stats.max_abs if c.stats is not None else None
            if m is not None and math.isfinite(m):
                z[i, j] = math.log10(m) if m > 0 else np.nan
            value = number_text(m, 2)
            text[i][j] = (
                f"set {s} · {plot_text(name)}<br>{status_label(c.status)}<br>max |error| {value}"
            )
            xs.append(plot_text(name))
            ys.append(plot_text(set_label(run, s)))
            marks.append(status_label(c.status, "mark"))
            colors.append(PASS_COLOR if c.status.passed else "white")
            custom.append([s, name])
    finite = z[np.isfinite(z)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-8.0, 0.0)
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    tickvals, ticktext = _exp_ticks(lo, hi)
    ylabels = [plot_text(set_label(run, s)) for s in sets]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[plot_text(name) for name in names],
            y=ylabels,
            text=text,
            hoverinfo="text",
            zmin=lo,
            zmax=hi,
            colorscale="YlOrRd",
            xgap=3,
            ygap=3,
            colorbar={"title": "max |error|", "tickvals": tickvals, "ticktext": ticktext},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers+text",
            text=marks,
            customdata=custom,
            textfont={"color": colors, "size": 16},
            marker={"size": 28, "opacity": 0},
            hovertext=[t for row in text for t in row if t],
            hoverinfo="text",
            showlegend=False,
        )
    )
    fig.update_layout(
        title={"text": f"{_rows_name(run)} × outputs (colour: log10 max |error|)"},
        xaxis={"title": "output", "type": "category"},
        yaxis={"title": "", "type": "category", "autorange": "reversed"},
        margin={"l": 80, "r": 20, "t": 50, "b": 50},
        height=max(300, 90 + 56 * len(sets)),
    )
    return fig


def _rows_name(run: ValidationRun) -> str:
    return "generate() steps" if run.is_generation else "input sets"
