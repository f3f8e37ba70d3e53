"""Sweep page: open a `parity sweep --out` folder, look at every pair, open one pair's run.

`?sweep=DIR` in the URL opens that folder. Pair and output names are user text: they appear
only in dataframes and plain text, never in markdown. The folder is read by
core.sweep.folder; the last folder that opened stays when another one fails to.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from core.errors import ParityError
from core.sweep.folder import SweepFolder, load_sweep
from core.text import number_text
from pages.saved_runs import open_saved_run

FOLDER = "parity_sweep_folder"
PATH_KEY = "parity_sweep_path"
ERROR_KEY = "parity_sweep_error"
OPENED_KEY = "parity_sweep_initial"
ONLY_BAD_KEY = "parity_sweep_only_bad"
PAIR_KEY = "parity_sweep_pair"
VERDICT_TEXT = {"pass": "✓ pass", "fail": "✗ fail", "error": "⚠ error"}
CELL_MARK = {"pass": "✓"}


def main() -> None:
    st.title("Sweep")
    _open_from_url()
    st.text_input(
        "Sweep folder (the --out of `parity sweep`, a path on this machine)",
        key=PATH_KEY,
        placeholder="results",
    )
    st.button("Open", key="parity_sweep_open", on_click=_open_typed)
    error = st.session_state.get(ERROR_KEY)
    if error:
        st.error("Could not open that sweep folder.", icon=":material/error:")
        st.text(error)  # paths and messages are text, never markdown
    sweep: SweepFolder | None = st.session_state.get(FOLDER)
    if sweep is None:
        st.caption("Run `parity sweep MANIFEST --out DIR`, then open DIR here (or `?sweep=DIR`).")
        return
    _summary(sweep)
    _pairs_table(sweep)
    _grid(sweep)
    _open_pair_run(sweep)


# ------------------------------------------------------------------------------ opening


def _open_from_url() -> None:
    path = st.query_params.get("sweep")
    if path and st.session_state.get(OPENED_KEY) != path:
        st.session_state[OPENED_KEY] = path
        st.session_state[PATH_KEY] = path
        _open(path)


def _open_typed() -> None:
    path = str(st.session_state.get(PATH_KEY, "")).strip()
    if not path:
        st.session_state[ERROR_KEY] = "type the path of a sweep folder first"
        return
    _open(path)


def _open(path: str) -> None:
    try:
        st.session_state[FOLDER] = load_sweep(Path(path))
    except ParityError as exc:
        st.session_state[ERROR_KEY] = exc.message
        return
    st.session_state.pop(ERROR_KEY, None)


# ------------------------------------------------------------------------------ drawing


def _summary(sweep: SweepFolder) -> None:
    counts = {v: sum(p.verdict == v for p in sweep.pairs) for v in VERDICT_TEXT}
    state = "" if sweep.complete else f" (still running: {len(sweep.pairs)} of {sweep.total})"
    st.text(
        f"{len(sweep.pairs)} pair(s): {counts['pass']} pass, {counts['fail']} fail, "
        f"{counts['error']} error{state}\nfolder {sweep.path}\nmanifest {sweep.manifest}"
    )


def pairs_frame(sweep: SweepFolder, *, only_bad: bool) -> pd.DataFrame:
    rows = [
        {
            "pair": p.name,
            "verdict": VERDICT_TEXT.get(p.verdict, p.verdict),
            "worst output": p.worst.output if p.worst else "",
            "max abs": p.worst.max_abs if p.worst else None,
            "seconds": p.seconds,
            "exit code": p.exit_code,
            "saved run": "yes" if sweep.saved_run(p.name) else "",
            "failing / error": p.error or ", ".join(p.failing),
        }
        for p in sweep.pairs
        if not only_bad or p.verdict != "pass"
    ]
    return pd.DataFrame(rows)


def _pairs_table(sweep: SweepFolder) -> None:
    st.subheader("Pairs")
    only_bad = st.toggle("Only failing and error pairs", key=ONLY_BAD_KEY)
    frame = pairs_frame(sweep, only_bad=only_bad)
    if frame.empty:
        st.caption("No pair to show.")
        return
    st.dataframe(  # click a column header to sort
        frame,
        hide_index=True,
        width="stretch",
        column_config={
            "max abs": st.column_config.NumberColumn("max abs", format="%.3e"),
            "seconds": st.column_config.NumberColumn("seconds", format="%.1f"),
        },
    )


def grid_frame(sweep: SweepFolder) -> pd.DataFrame:
    """Pairs x outputs: '✓' or the status, then the largest max abs over the input sets."""
    names = sweep.output_names()
    rows = {}
    for p in sweep.pairs:
        cells = sweep.outputs.get(p.name, {})
        row = {}
        for name in names:
            cell = cells.get(name)
            if cell is not None:
                mark = CELL_MARK.get(cell.status, f"✗ {cell.status}")
                row[name] = f"{mark} {number_text(cell.max_abs)}"
            else:
                row[name] = ""
        rows[p.name] = row
    return pd.DataFrame.from_dict(rows, orient="index", columns=names)


def _grid(sweep: SweepFolder) -> None:
    st.subheader("Pairs × outputs (max abs error)")
    frame = grid_frame(sweep)
    if frame.empty or not len(frame.columns):
        st.caption("No pair report with outputs yet.")
        return

    def color(value: object) -> str:
        text = str(value)
        if text.startswith("✓"):
            return "color: #1a7f37"
        return "color: #cf222e; font-weight: 600" if text.startswith("✗") else ""

    st.dataframe(frame.style.map(color), width="stretch")


def _open_pair_run(sweep: SweepFolder) -> None:
    st.subheader("Open a pair's saved run")
    with_runs = [p.name for p in sweep.pairs if sweep.saved_run(p.name)]
    if not with_runs:
        st.caption("No pair saved its run: add `--save-run run.parity.npz` to the args.")
        return
    name = st.selectbox("Pair", with_runs, key=PAIR_KEY)
    if st.button("Open in Overview, Inspect and Tolerances", key="parity_sweep_open_run"):
        path = sweep.saved_run(name)
        try:
            open_saved_run(path)
        except ParityError as exc:
            st.error("Could not open that pair's saved run.", icon=":material/error:")
            st.text(f"{name}: {exc.message}")
            return
        st.switch_page("pages/overview.py")


main()
