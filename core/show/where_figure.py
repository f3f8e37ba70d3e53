"""Where one output's mismatches are, as a figure: per axis, the mismatch fraction at each
index (parity.judge.where), pooled to at most MAX_PROFILE_BARS bars."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from parity.judge.where import AxisProfile, WhereProfile
from parity.show.colors import ATOL_COLOR, FAIL_COLOR
from parity.text import plot_text

__all__ = ["MAX_PROFILE_BARS", "where_figure"]


MAX_PROFILE_BARS = 512
"""Bars per axis in a where figure; longer axes are max-pooled into this many (and said so)."""


def where_figure(where: WhereProfile) -> go.Figure:
    """Per axis (size > 1): the mismatch fraction at each index (bars; the concentrated
    indices in red) and the largest error ÷ allowed there (line, log scale, the pass line at
    1); axes carry their ONNX names. The summary sentence goes beside it, as text."""
    axes = [a for a in where.axes if a.size > 1] or list(where.axes[:1])
    fig = make_subplots(
        rows=max(1, len(axes)),
        cols=1,
        specs=[[{"secondary_y": True}] for _ in range(max(1, len(axes)))],
        vertical_spacing=0.12 if len(axes) > 1 else 0.0,
    )
    for row, a in enumerate(axes, start=1):
        starts, fraction, ratio, hot = _profile_bars(a)
        fig.add_trace(
            go.Bar(
                x=starts,
                y=fraction,
                marker_color=np.where(hot, FAIL_COLOR, "#8c959f").tolist(),
                name=plot_text(a.label),
                customdata=ratio,
                hovertemplate=f"{plot_text(a.label)} index %{{x}}<br>%{{y:.3%}} mismatch"
                "<br>max error ÷ allowed %{customdata:.3g}<extra></extra>",
                showlegend=False,
            ),
            row=row,
            col=1,
            secondary_y=False,
        )
        shown = np.where(np.isfinite(ratio) & (ratio > 0), ratio, np.nan)
        fig.add_trace(
            go.Scatter(
                x=starts,
                y=shown,
                mode="lines",
                line={"color": "#8250df", "width": 1.5},
                name="max error ÷ allowed",
                hoverinfo="skip",
                showlegend=row == 1,
            ),
            row=row,
            col=1,
            secondary_y=True,
        )
        fig.add_trace(
            go.Scatter(
                x=[starts[0], starts[-1]] if starts.size else [0, 1],
                y=[1.0, 1.0],
                mode="lines",
                line={"color": ATOL_COLOR, "dash": "dash", "width": 1},
                name="pass line (error = allowed)",
                hoverinfo="name",
                showlegend=row == 1,
            ),
            row=row,
            col=1,
            secondary_y=True,
        )
        pooled = f" (max over blocks of {a.bin * _pool(a)} indices)" if a.bin * _pool(a) > 1 else ""
        fig.update_xaxes(
            title_text=plot_text(a.label) + pooled, row=row, col=1,
            **({"dtick": 1} if starts.size <= 16 else {}),
        )  # fmt: skip
        fig.update_yaxes(
            title_text="mismatch", tickformat=".0%", rangemode="tozero", row=row, col=1,
            secondary_y=False,
        )  # fmt: skip
        fig.update_yaxes(
            title_text="max ÷ allowed", type="log", row=row, col=1, secondary_y=True,
            showgrid=False, dtick=1, exponentformat="e",
        )  # fmt: skip
    fig.update_layout(
        title={"text": "Mismatch fraction and worst error ÷ allowed, per index of each axis"},
        bargap=0.1,
        height=140 + 190 * max(1, len(axes)),
        margin={"l": 60, "r": 60, "t": 90, "b": 40},
        legend={"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"},
    )
    return fig


def _pool(a: AxisProfile) -> int:
    return max(1, math.ceil(a.n_mismatch.size / MAX_PROFILE_BARS))


def _profile_bars(a: AxisProfile) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(first index, mismatch fraction, max ratio, concentrated?) per bar, block-max pooled."""
    fraction = np.nan_to_num(a.fraction, nan=0.0)
    ratio = np.nan_to_num(a.max_ratio, nan=0.0, posinf=np.inf)
    hot = np.zeros(a.n_mismatch.size, dtype=bool)
    if a.concentrated:
        hot[np.asarray(a.concentrated) // a.bin] = True
    k = _pool(a)
    if k > 1:
        n = math.ceil(fraction.size / k) * k
        pad = n - fraction.size
        fraction = np.pad(fraction, (0, pad)).reshape(-1, k).max(axis=1)
        ratio = np.pad(ratio, (0, pad)).reshape(-1, k).max(axis=1)
        hot = np.asarray(np.pad(hot, (0, pad)).reshape(-1, k).any(axis=1))
    starts = np.arange(fraction.size) * k * a.bin
    return starts, fraction, ratio, hot
