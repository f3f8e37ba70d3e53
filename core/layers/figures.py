"""Plotly figures of a layers comparison, shared by the dashboard and the HTML report.

Two pictures: the error along the graph's depth (where the error is born: one line per input
set, log scale, the first divergence marked) and the module tree coloured by its worst value
("layer 3's MLP" in one look). Both are built from the per-value statistics alone, never from
tensors, and long graphs are thinned to at most MAX_POINTS_PER_SET points per set (every
non-passing value kept), so a figure stays well under 2 MB.

Every name drawn (values, nodes, modules) is the user's: it is HTML-escaped, since plotly reads
a subset of HTML in its text.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from parity.labels import OUTSIDE_MODULES
from parity.layers import views
from parity.show.colors import FAIL_COLOR, PASS_COLOR, WARN_COLOR
from parity.text import plot_text

if TYPE_CHECKING:
    from parity.layers.result import LayersResult, LayerValue

SET_COLORS = ("#0969da", "#8250df", "#bf8700", "#1b7c83", "#953800", "#6e7781")
MAX_POINTS_PER_SET = 3000
TREE_MAX_DEPTH = 5
LABEL_MAX = 48


def esc(text: object, limit: int | None = None) -> str:
    """A user string made safe for plotly text (escaped; optionally shortened in the middle)."""
    s = str(text)
    if limit is not None and len(s) > limit:
        keep = (limit - 1) // 2
        s = s[:keep] + "…" + s[-(limit - 1 - keep) :]
    return plot_text(s)


def _log10(x: float | None) -> float:
    if x is None or not (x > 0):
        return math.nan
    return math.log10(x) if math.isfinite(x) else math.inf


def _thin(values: list[LayerValue], metric: str, limit: int) -> list[LayerValue]:
    """At most ~`limit` values of one set: the max of each block of the graph order, plus every
    value where an error is born (so no divergence is thinned away)."""
    if len(values) <= limit:
        return values
    block = math.ceil(len(values) / limit)
    keep: dict[int, LayerValue] = {}
    for start in range(0, len(values), block):
        chunk = values[start : start + block]
        top = max(chunk, key=lambda v: views.metric_of(v, metric) or -1.0)
        keep[id(top)] = top
    for v in values:
        if views.is_divergent(v):
            keep[id(v)] = v
    return sorted(keep.values(), key=lambda v: v.order)


def depth_plot(
    result: LayersResult,
    *,
    metric: str = "error_ratio",
    threshold: float | None = None,
    height: int = 420,
) -> go.Figure:
    """`metric` of every compared value against its graph order, one line per input set (log y).

    `threshold` draws the pass line (the criterion's ratio, or atol for max |error|). The first
    divergence gets a vertical line and its module / op as a label. Values whose metric is
    exactly 0 cannot sit on a log axis: they are left out of the line and counted in the title.
    """
    label = views.METRICS[metric]
    fig = go.Figure()
    ordered = views.ordered(result.values)
    sets = views.input_sets(ordered)
    n_zero = n_undefined = 0
    thinned = False
    finite_logs: list[float] = []
    born: list[tuple[LayerValue, float]] = []  # where an error is born, drawn red on top
    equal: list[LayerValue] = []  # exactly 0: no logarithm, drawn on the axis floor
    per_set: dict[int, list[LayerValue]] = {s: [] for s in sets}
    for v in ordered:
        per_set[int(v.input_set)].append(v)
    for i, s in enumerate(sets):
        vals = per_set[s]
        shown = _thin(vals, metric, MAX_POINTS_PER_SET)
        thinned = thinned or len(shown) < len(vals)
        ys = []
        for v in shown:
            x = views.metric_of(v, metric)
            n_zero += x == 0
            n_undefined += x is None
            ys.append(_log10(x))
        y = np.array(ys, dtype=float)
        born.extend((v, y[k]) for k, v in enumerate(shown) if views.is_divergent(v))
        equal.extend(v for v in shown if views.metric_of(v, metric) == 0)
        finite_logs.extend(y[np.isfinite(y)].tolist())
        fig.add_trace(
            go.Scatter(
                x=[v.order for v in shown],
                y=y,
                mode="lines+markers",
                name=f"input set {s}",
                line={"color": SET_COLORS[i % len(SET_COLORS)], "width": 1.5},
                marker={"size": 4, "color": SET_COLORS[i % len(SET_COLORS)]},
                customdata=_hover_rows(shown),  # an array: plotly checks lists item by item
                hovertemplate=_HOVER + f"<extra>set {s}</extra>",
            )
        )
    lo, hi = (min(finite_logs), max(finite_logs)) if finite_logs else (-8.0, 0.0)
    t = _log10(threshold)
    if math.isfinite(t):
        lo, hi = min(lo, t), max(hi, t)
    lo, hi = math.floor(lo - 0.3), math.ceil(hi + 0.3)
    if equal:
        fig.add_trace(
            go.Scatter(
                x=[v.order for v in equal],
                y=np.full(len(equal), lo + 0.12),
                mode="markers",
                name="exactly equal (0)",
                marker={"size": 7, "symbol": "triangle-down-open", "color": "#6e7781"},
                customdata=_hover_rows(equal),
                hovertemplate=_HOVER + "<extra>exactly equal</extra>",
            )
        )
    if born:
        fig.add_trace(
            go.Scatter(
                x=[v.order for v, _ in born],
                y=[y for _, y in born],
                mode="markers",
                name="error born here",
                marker={"size": 10, "color": FAIL_COLOR, "symbol": "circle"},
                customdata=_hover_rows([v for v, _ in born]),
                hovertemplate=_HOVER + "<extra></extra>",
            )
        )
    # one-sided NaN/Inf errors: drawn at the top of the axis
    for trace in fig.data:
        y = np.asarray(trace.y, dtype=float)
        trace.y = np.where(np.isposinf(y), hi - 0.15, y)
    if math.isfinite(t):
        fig.add_hline(
            y=t,
            line={"color": PASS_COLOR, "dash": "dash", "width": 1.5},
            annotation_text=f"pass line {threshold:.3g}",
            annotation_position="bottom right",
            annotation_font_color=PASS_COLOR,
        )
    first = result.first_divergence
    if first is not None:
        fx = views.metric_of(first, metric)
        fy = _log10(fx)
        fy = hi - 0.15 if math.isinf(fy) else fy
        fig.add_vline(x=first.order, line={"color": FAIL_COLOR, "width": 1.5, "dash": "dot"})
        if math.isfinite(fy):
            fig.add_trace(
                go.Scatter(
                    x=[first.order],
                    y=[fy],
                    mode="markers",
                    marker={
                        "symbol": "star",
                        "size": 16,
                        "color": FAIL_COLOR,
                        "line": {"width": 1, "color": "white"},
                    },  # fmt: skip
                    name="first divergence",
                    customdata=_hover_rows([first]),
                    hovertemplate="first divergence<br>%{customdata[0]} (%{customdata[1]})"
                    "<br>module %{customdata[2]}<extra></extra>",
                )
            )
        fig.add_annotation(
            x=first.order,
            y=fy if math.isfinite(fy) else hi,
            text=f"<b>{esc(first.torch_module or first.onnx_node, LABEL_MAX)}</b>"
            f"<br>{esc(first.onnx_op)}",
            showarrow=True,
            arrowhead=2,
            ax=40 if first.order < _max_order(ordered) * 0.7 else -40,
            ay=-45,
            font={"color": FAIL_COLOR},
            bgcolor="rgba(255,255,255,0.85)",
            bordercolor=FAIL_COLOR,
            align="left",
        )
    notes = [f"{len({v.onnx_value for v in ordered}):,} values in graph order"]
    if n_zero:
        notes.append(f"{n_zero:,} exactly equal (▽ on the axis floor)")
    if n_undefined:
        notes.append(f"{n_undefined:,} undefined")
    if thinned:
        notes.append(f"thinned to the block max of ≤{MAX_POINTS_PER_SET:,} points per set")
    ticks = list(range(int(lo), int(hi) + 1))
    step = max(1, math.ceil(len(ticks) / 8))
    ticks = ticks[::step]
    fig.update_layout(
        title={"text": f"{label} along the graph<br><sup>{'; '.join(notes)}</sup>"},
        xaxis={"title": "graph order (ONNX node order)", "rangemode": "tozero"},
        yaxis={
            "title": f"{label} (log)",
            "range": [lo, hi],
            "zeroline": False,  # y = 0 is 1e0 here, nothing special
            "tickvals": ticks,
            "ticktext": [f"1e{k}" for k in ticks],
        },
        legend={"orientation": "h", "y": -0.22},
        margin={"l": 60, "r": 20, "t": 70, "b": 50},
        height=height,
        hovermode="closest",
    )
    return fig


def _max_order(values: list[LayerValue]) -> int:
    return max((v.order for v in values), default=1) or 1


_HOVER = (
    "#%{x} %{customdata[0]} (%{customdata[1]})<br>module %{customdata[2]}<br>"
    "error ratio %{customdata[3]}<br>max |error| %{customdata[4]}<br>jump %{customdata[5]}×"
    "<br>status %{customdata[6]}"
)


def _hover_rows(values: list[LayerValue]) -> np.ndarray:
    rows = [
        [
            esc(v.onnx_value, 80),
            esc(v.onnx_op),
            esc(v.torch_module or "-", 80),
            views.fmt(views.metric_of(v, "error_ratio")),
            views.fmt(views.metric_of(v, "max_abs")),
            views.fmt(v.jump),
            esc(v.status),
        ]
        for v in values
    ]
    return np.array(rows, dtype=object).reshape(len(rows), 7)


OWN = "#own"  # id suffix of a module's own ops (no named_modules() path contains "#")


def _path_text(path: str) -> str:
    """A tree node's module path in hover text: the root's own ops are outside any module."""
    if path == OWN:
        return OUTSIDE_MODULES
    return (path or views.ROOT_LABEL).replace(OWN, " (own ops)")


def _with_own_leaves(nodes: list[views.ModuleNode]) -> list[views.ModuleNode]:
    """A module with children that also computes values itself (a residual add) gets a leaf
    "(own ops)" for them, so no part of the icicle is left blank."""
    out = []
    for n in nodes:
        out.append(n)
        if n.n_own and n.n_own < n.n_values:
            out.append(
                replace(
                    n,
                    path=n.path + OWN,
                    parent=n.path,
                    label="(own ops)" if n.path else OUTSIDE_MODULES,
                    n_values=n.n_own,
                    worst=n.own_worst,
                    n_divergent=n.own_divergent,
                    on_divergence_path=False,
                )  # fmt: skip
            )
    return out


def module_tree(
    result: LayersResult,
    *,
    metric: str = "error_ratio",
    threshold: float | None = None,
    height: int = 460,
) -> go.Figure:
    """An icicle over `named_modules()` paths: width = compared values in the module, colour =
    the worst `metric` in its subtree (log), green below the pass line, red above it. The
    modules holding the first divergence are outlined."""
    label = views.METRICS[metric]
    nodes = _with_own_leaves(views.module_tree(result, metric))
    logs = [_log10(n.worst) for n in nodes]
    finite = [x for x in logs if math.isfinite(x)]
    t = _log10(threshold)
    lo = min(finite + ([t] if math.isfinite(t) else []), default=-8.0)
    hi = max(finite + ([t] if math.isfinite(t) else []), default=0.0)
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    colors = [hi if math.isinf(x) else (lo if math.isnan(x) else x) for x in logs]
    mid = t if math.isfinite(t) else (lo + hi) / 2
    span = max(hi - mid, mid - lo, 1e-9)
    cmin, cmax = mid - span, mid + span  # the pass line is the scale's middle (yellow)
    ticks = list(range(math.ceil(cmin), math.floor(cmax) + 1))
    step = max(1, math.ceil(len(ticks) / 6))
    ticks = [k for k in ticks[::step] if not abs(k - t) < 0.3]  # room for the pass line's label
    tickvals = [float(k) for k in ticks]
    ticktext = [f"1e{k}" for k in ticks]
    if math.isfinite(t):
        tickvals.append(t)
        ticktext.append(f"pass line {threshold:.3g}")
    fig = go.Figure(
        go.Icicle(
            ids=np.array([n.path or "·" for n in nodes], dtype=object),
            labels=np.array(
                [
                    esc(n.label, LABEL_MAX) + (f" ✗{n.n_divergent}" if n.n_divergent else "")
                    for n in nodes
                ],
                dtype=object,
            ),
            parents=np.array(
                ["" if n.parent is None else (n.parent or "·") for n in nodes], dtype=object
            ),
            values=np.array([n.n_values for n in nodes]),
            branchvalues="total",
            maxdepth=TREE_MAX_DEPTH,
            marker={
                "colors": np.array(colors),
                "colorscale": [[0.0, PASS_COLOR], [0.5, WARN_COLOR], [1.0, FAIL_COLOR]],
                "cmin": cmin,
                "cmax": cmax,
                "showscale": True,
                "colorbar": {
                    "title": f"worst {label}",
                    "tickvals": tickvals,
                    "ticktext": ticktext,
                },  # fmt: skip
                # one colour: per-node colour strings are checked one by one (slow)
                "line": {
                    "color": "#1f2328",
                    "width": np.array([3.0 if n.on_divergence_path else 0.3 for n in nodes]),
                },
            },
            customdata=np.array(
                [
                    [
                        esc(_path_text(n.path), 100),
                        views.fmt(n.worst),
                        esc(n.worst_value, 80),
                        esc(n.worst_op),
                        n.n_divergent,
                    ]
                    for n in nodes
                ],
                dtype=object,
            ),
            hovertemplate="%{customdata[0]}<br>%{value} compared values, "
            "%{customdata[4]} diverging<br>"
            f"worst {label} %{{customdata[1]}}<br>at %{{customdata[2]}} (%{{customdata[3]}})"
            "<extra></extra>",
            tiling={"orientation": "v"},
            sort=False,
        )
    )
    outlined = " (outlined: where the first divergence is)" if result.first_divergence else ""
    fig.update_layout(
        title={
            "text": f"Modules coloured by their worst {label}<br><sup>width: compared values; "
            f"click a module to zoom{outlined}</sup>"
        },
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
        height=height,
    )
    return fig
