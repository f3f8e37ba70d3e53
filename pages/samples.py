"""Samples page (runs made with --data): per output, the answer in one sentence, the
per-sample error distribution, the changed samples as a table, and the worst samples with
a thumbnail where an input is an image. Ids and reasons are the user's text: shown in
dataframes and st.text, never as markdown."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from parity.dashboard import state
from parity.dashboard.frame import run_or_invite
from parity.data.figures import per_sample_figure
from parity.data.result import DataOutput, DataResult, WorstSample
from parity.data.words import answer_sentence, skipped_sentence

MAX_ROWS = 5000
"""Changed samples listed (the JSON report has them all)."""


def flip_frame(o: DataOutput) -> pd.DataFrame:
    """One row per changed sample: its number, id, both answers, torch's margin, the kind."""
    what = "class" if o.task == "classification" else "neighbour"
    return pd.DataFrame(
        [
            {
                "sample": f.sample,
                "id": f.id,
                f"torch {what}": f.torch,
                f"ONNX {what}": f.onnx,
                "torch margin": f.torch_margin,
                "": "near tie" if f.near_tie else "real change",
            }
            for f in o.flips[:MAX_ROWS]
        ]
    )


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


def _worst(samples: tuple[WorstSample, ...]) -> None:
    columns = st.columns(min(4, len(samples)))
    for k, w in enumerate(samples):
        with columns[k % len(columns)]:
            st.text(f"sample {w.sample}\n{w.id}\nerror {w.error:.3g}")
            images = [thumbnail(a) for a in w.inputs.values()]
            image = next((i for i in images if i is not None), None)
            if image is not None:
                st.image(image, width=120, clamp=True)
            if w.text:  # a text a tokenizer read: the text, not its token ids
                st.text(w.text[:300] + ("..." if len(w.text) > 300 else ""))
            if w.torch is not None and w.onnx is not None and w.torch.size <= 16:
                st.text(
                    "torch " + np.array2string(w.torch, precision=3)
                    + "\nONNX  " + np.array2string(w.onnx, precision=3)
                )  # fmt: skip


def _output(d: DataResult, o: DataOutput) -> None:
    st.text(answer_sentence(d, o, named=len(d.outputs) > 1))
    st.plotly_chart(per_sample_figure(o), key=f"samples_hist_{o.name}")
    if o.flips:
        st.subheader("Changed samples")
        if o.n_flips > MAX_ROWS:
            st.caption(f"The first {MAX_ROWS:,} of {o.n_flips:,} (the JSON report lists all).")
        st.dataframe(flip_frame(o), hide_index=True)
    if o.worst:
        st.subheader("Worst samples")
        _worst(o.worst)


def render() -> None:
    st.title("Samples")
    run = run_or_invite(hint="Validate on your data (parity validate --data PATH).")
    if run is None:
        return
    d = run.data
    if d is None:
        st.info("This run was not made on a data set: give --data PATH to see your samples.")
        return
    st.text(f"{d.source}: {d.samples} samples ({d.format}, batches of {d.batch_size})")
    names = [o.name for o in d.outputs]
    if not names:
        st.info("No output could be judged per sample.")
        return
    name = st.selectbox("Output", names, key=state.SAMPLES_OUTPUT) if len(names) > 1 else names[0]
    output = d.output(name or names[0])
    if output is not None:
        _output(d, output)
    if d.skipped:
        st.subheader("Skipped samples")
        st.text(skipped_sentence(d))
        st.dataframe(
            pd.DataFrame([{"id": s.id, "reason": s.reason} for s in d.skipped[:MAX_ROWS]]),
            hide_index=True,
        )


render()
