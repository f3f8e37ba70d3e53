"""Samples page (runs made with --data): per output, the answer in one sentence, the
per-sample error distribution, the changed samples as a table, and the worst samples with
a thumbnail where an input is an image. A changed sample selected (or a worst sample's
button) opens in Inspect where the run kept its arrays. Ids and reasons are the user's
text: shown in dataframes and st.text, never as markdown."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from parity.dashboard import routes, state
from parity.dashboard.frame import run_or_invite
from parity.data.figures import per_sample_figure, thumbnail
from parity.data.result import DataOutput, DataResult, WorstSample
from parity.data.words import answer_sentence, skipped_sentence
from parity.show.format import sample_name

MAX_ROWS = 5000
"""Changed samples listed (the JSON report has them all)."""


def flip_frame(o: DataOutput) -> pd.DataFrame:
    """One row per changed sample: its number, id, both answers, torch's margin, the kind,
    and whether its arrays were kept (a click opens it in Inspect)."""
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
                "opens in Inspect": "✓" if kept(o, f.sample) is not None else "",
            }
            for f in o.flips[:MAX_ROWS]
        ]
    )


def kept(o: DataOutput, sample: int) -> WorstSample | None:
    """Sample `sample` of output `o` with its arrays, where the run kept them (the worst
    samples: parity.data.answers.WORST_KEPT per output, saved with --save-run), else None."""
    return next((w for w in o.worst if w.sample == sample and w.torch is not None), None)


def _open_in_inspect(o: DataOutput, sample: int) -> None:
    """Inspect that sample if its arrays were kept; else say why it cannot be opened."""
    if kept(o, sample) is None:
        state.put(state.SAMPLES_NOT_KEPT, (o.name, sample))
        return
    state.pop(state.SAMPLES_NOT_KEPT, None)
    state.set_sample_target(o.name, sample)
    st.switch_page(routes.INSPECT)


def _worst(o: DataOutput) -> None:
    samples = o.worst
    columns = st.columns(min(4, len(samples)))
    for k, w in enumerate(samples):
        with columns[k % len(columns)]:
            st.text(f"{sample_name(w.sample, w.id)}\nerror {w.error:.3g}")
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
            if w.torch is not None and st.button(
                f"Inspect sample {w.sample}",
                key=f"{state.SAMPLES_INSPECT}{o.name}_{w.sample}",
                icon=":material/grid_on:",
            ):
                _open_in_inspect(o, w.sample)


def _flips(o: DataOutput) -> None:
    """The changed samples; a click on one opens it in Inspect (st.dataframe's row
    selection), where the run kept its arrays."""
    st.subheader("Changed samples")
    if o.n_flips > MAX_ROWS:
        st.caption(f"The first {MAX_ROWS:,} of {o.n_flips:,} (the JSON report lists all).")
    n_kept = sum(kept(o, f.sample) is not None for f in o.flips[:MAX_ROWS])
    st.caption(
        f"Select a row marked ✓ to open that sample in Inspect (its inputs, both outputs, "
        f"the error element by element): {n_kept} of them have their arrays kept by this run "
        f"(the worst {len(o.worst)} samples per output; a saved run keeps them)."
    )
    frame = flip_frame(o)
    event = st.dataframe(
        frame,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key=f"{state.SAMPLES_FLIPS}{o.name}",
    )
    rows = event.selection.rows if event is not None else []
    if rows:
        _open_in_inspect(o, int(frame.iloc[rows[0]]["sample"]))
    picked = state.get(state.SAMPLES_NOT_KEPT)
    if rows and picked is not None and picked[0] == o.name:
        st.info(
            f"Sample {picked[1]} cannot be opened in Inspect: this run kept the arrays of its "
            f"worst {len(o.worst)} samples per output only, and not this one's.",
            icon=":material/info:",
        )


def _output(d: DataResult, o: DataOutput) -> None:
    st.text(answer_sentence(d, o, named=len(d.outputs) > 1))
    st.plotly_chart(per_sample_figure(o), key=f"samples_hist_{o.name}")
    if o.flips:
        _flips(o)
    if o.worst:
        st.subheader("Worst samples")
        _worst(o)


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
