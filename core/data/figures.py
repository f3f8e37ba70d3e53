"""The Samples page's figure: each sample's error as bars on log-spaced bins (binned in
parity.data.answers: the browser gets 24 bars, never the samples); a sample's input as a
thumbnail (the Samples and Inspect pages)."""

from __future__ import annotations

from typing import Any

import numpy as np

from parity.data.result import DataOutput
from parity.text import number_pair_text


def per_sample_figure(o: DataOutput) -> Any:
    """Bars of the per-sample error (|onnx - torch| at the sample's worst element; embedding:
    1 - cosine), with the near-tie scale marked where the output has one."""
    import plotly.graph_objects as go

    edges, counts = o.histogram
    fig = go.Figure()
    if counts:
        e = np.asarray(edges)
        centres = np.sqrt(e[:-1] * e[1:])
        fig.add_bar(x=centres, y=list(counts), width=list(np.diff(e)), name="samples")
        ticks, texts = _ticks(float(e[0]), float(e[-1]))
        fig.update_xaxes(type="log", tickvals=ticks, ticktext=texts)
    if o.typical_error and o.task == "classification":
        fig.add_vline(x=o.typical_error, line_dash="dot")
        fig.add_annotation(  # on a log axis an annotation's x is log10 of the value
            x=float(np.log10(o.typical_error)) if counts else o.typical_error, y=1,
            yref="paper", text="typical error", showarrow=False, xanchor="left", yanchor="bottom",
        )  # fmt: skip
    measure = "1 - cosine" if o.task == "embedding" else "largest |onnx - torch| of the sample"
    fig.update_layout(
        title=f"{o.name}: error per sample ({o.samples} samples)",
        xaxis_title=measure,
        yaxis_title="samples",
        height=320,
        margin={"t": 40, "b": 40},
        showlegend=False,
    )
    return fig


def _ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """The axis's labels from `lo` to `hi` (positive): whole values at 1-2-5 (plotly's own
    minor labels read "5 6 7 8 9 0.1 2 3"); where fewer than two lie inside (every sample's
    error about the same: a bias moved by 6 makes each 6.0 give or take rounding), the
    range's two ends, in as many digits as tell them apart."""
    if not (0 < lo < hi):
        return [], []
    values = [
        float(f"{m}e{k}")
        for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
        for m in (1, 2, 5)
    ]
    inside = [v for v in values if lo <= v <= hi]
    if len(inside) >= 2:
        return inside, [f"{v:g}" for v in inside]
    a, b = number_pair_text(lo, hi)
    return [lo, hi], [a, b]


def thumbnail(array: np.ndarray) -> np.ndarray | None:
    """An input as a greyscale or RGB image in [0, 1] (H x W, 1|3 x H x W, H x W x 3), or None
    for any other shape."""
    a = np.asarray(array, dtype=np.float64)
    if a.ndim == 3 and a.shape[0] in (1, 3):
        a = a[0] if a.shape[0] == 1 else np.moveaxis(a, 0, -1)
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] == 3)) or min(a.shape[:2]) < 2:
        return None
    finite = a[np.isfinite(a)]
    if not finite.size:
        return None
    low, high = float(finite.min()), float(finite.max())
    return np.clip((a - low) / (high - low), 0, 1) if high > low else np.zeros_like(a)
