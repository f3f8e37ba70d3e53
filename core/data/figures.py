"""The Samples page's figure: each sample's error as bars on log-spaced bins (binned in
parity.data.answers: the browser gets 24 bars, never the samples)."""

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
