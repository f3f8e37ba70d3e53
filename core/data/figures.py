"""The Samples page's figure: each sample's error as bars on log-spaced bins (binned in
parity.data.answers: the browser gets 24 bars, never the samples); a sample's input as a
thumbnail (the Samples and Inspect pages)."""

from __future__ import annotations

from typing import Any

import numpy as np

from parity.data.result import DataOutput


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
        fig.update_xaxes(type="log")
    if o.typical_error and o.task == "classification":
        fig.add_vline(x=o.typical_error, line_dash="dot", annotation_text="typical error")
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
