"""The Run form's data set fields (`parity validate --data` and its flags): the samples of
the user's own data set are the inputs, and the answers on them are judged (the Samples
page). Batches run in this process (a Ray cluster is the command line's: `--engine ray`).

A preprocess function is code: Run runs it only where the dashboard runs a model's code
(started with --trust-code), and says so before the click.
"""

from __future__ import annotations

import streamlit as st

from parity.dashboard import state
from parity.dashboard.access import trust_code
from parity.dashboard.run_form import LIMITS
from parity.data.options import DEFAULT_BATCH_SIZE, DataOptions
from parity.load.specs import TRUST_COMMANDS

PATH_HELP = (
    "Its samples are the run's inputs, read in batches: an .npz or .npy of arrays named by "
    "the ONNX inputs, a table (.parquet, .csv, .jsonl) with a column per input, or a folder "
    "of files read by a preprocess function; a path on this machine or an s3://, gs://, "
    "az:// or http(s):// URI. Empty: generated inputs."
)


def choose_data() -> DataOptions | None:
    """The data set the form names (None: the run is on generated inputs or feeds)."""
    path = str(
        state.form_widget(
            st.text_input,
            "Data set (optional): judge the answers on your own samples",
            key=state.RUN_DATA_PATH,
            default="",
            placeholder="a folder, .npz, .parquet, .csv, .jsonl, or s3://bucket/key",
            help=PATH_HELP,
        )
    ).strip()
    if not path:
        return None
    c1, c2, c3 = st.columns([2, 1, 1])
    labels = state.form_widget(
        c1.text_input,
        "Labels (optional)",
        key=state.RUN_DATA_LABELS,
        default="",
        placeholder="labels.npy, or a table's column",
        help="One label per sample, in the samples' order (.npy), or the name of the table's "
        "label column; an image folder's labels are its sub-folders. With labels, each "
        "output's accuracy is said for both sides.",
    )
    batch = state.form_widget(
        c2.number_input,
        "Batch size",
        *LIMITS["batch"],
        key=state.RUN_DATA_BATCH,
        default=DEFAULT_BATCH_SIZE,
    )
    limit = state.form_widget(
        c3.number_input,
        "Samples to read (0 = all)",
        *LIMITS["limit"],
        key=state.RUN_DATA_LIMIT,
        default=0,
    )
    preprocess = state.form_widget(
        st.text_input,
        "Preprocess (optional): FILE.py:FUNCTION",
        key=state.RUN_DATA_PREPROCESS,
        default="",
        help="A function from one sample's path to a dict of its input arrays (without the "
        "sample axis), for a folder of images or other files. It is code: it runs only when "
        "the dashboard was started with --trust-code.",
    )
    return DataOptions(
        path=path,
        batch_size=int(batch),
        limit=int(limit) or None,
        preprocess=str(preprocess).strip() or None,
        labels=str(labels).strip() or None,
    )


def data_refusal(data: DataOptions | None) -> str | None:
    """Why Run is off for the data set's sake (its preprocess file is code this dashboard was
    not started to run), else None."""
    if data is None or data.preprocess is None or trust_code():
        return None
    return (
        f"the preprocess function {data.preprocess} is code, which runs when called: this "
        f"dashboard runs code only when started with {TRUST_COMMANDS[0]} (from a checkout: "
        f"{TRUST_COMMANDS[1]})."
    )
