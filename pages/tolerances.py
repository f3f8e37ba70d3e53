"""Tolerances page: sliders and per-output overrides that re-judge the run instantly.

Re-judging reads only the per-output error profiles (never raw tensors), and the controls
and their results sit in one `st.fragment`, so moving a slider reruns only that part.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import streamlit as st

from core.figures import mismatch_curve
from core.results import ValidationRun
from core.rows import output_rows
from core.suggest import DEFAULT_MARGIN, ladder, nearest, suggest_tolerances, with_value
from core.tolerances import Tolerance, Tolerances
from pages import state
from pages.candidates import candidate_selector, candidates_frame
from pages.sidebar import verdict_badge
from pages.tables import ROW_COLUMN_CONFIG, rows_frame, status_style
from pages.text import md_code, md_text

ATOL_LADDER = ladder(-9, 1)
RTOL_LADDER = ladder(-9, 0, zero=True)
CURVE_ATOLS = np.logspace(-9, 1, 81)
SYNCED = "tol_synced"
EDITOR_BASE = "tol_editor_base"
EDITOR_COLUMNS = ["output", "override", "atol", "rtol"]
NOT_FIXABLE = "shape/dtype/missing: no tolerance fixes it"


def _fmt(value: float) -> str:
    return "0" if value == 0 else f"{value:g}"


def _editor_frame(run: ValidationRun, tol: Tolerances) -> pd.DataFrame:
    rows = []
    for name in run.output_names:
        t = tol.outputs.get(name)
        rows.append(
            {
                "output": name,
                "override": t is not None,
                "atol": t.atol if t is not None else None,
                "rtol": t.rtol if t is not None else None,
            }
        )
    frame = pd.DataFrame(rows, columns=EDITOR_COLUMNS)
    return frame.astype({"atol": "float64", "rtol": "float64", "override": "bool"})


def _sync_widgets(run: ValidationRun, tol: Tolerances) -> None:
    """Make the widgets show `tol` when it changed from outside them (new run, Suggest)."""
    synced = st.session_state.get(SYNCED)
    if synced is not None and synced[0] is run and synced[1] == tol:
        return
    st.session_state["tol_atol"] = nearest(
        with_value(ATOL_LADDER, tol.default.atol), tol.default.atol
    )
    rtols = with_value(RTOL_LADDER, tol.default.rtol) if tol.default.rtol else RTOL_LADDER
    st.session_state["tol_rtol"] = tol.default.rtol if tol.default.rtol in rtols else rtols[0]
    st.session_state[EDITOR_BASE] = _editor_frame(run, tol)
    st.session_state.pop("tol_editor", None)
    st.session_state[SYNCED] = (run, tol)


def _overrides(edited: pd.DataFrame, default: Tolerance) -> dict[str, Tolerance]:
    """Ticked rows become overrides; a blank cell takes the global value."""
    out: dict[str, Tolerance] = {}
    for row in edited.itertuples(index=False):
        if bool(row.override):
            atol = float(row.atol) if pd.notna(row.atol) and row.atol >= 0 else default.atol
            rtol = float(row.rtol) if pd.notna(row.rtol) and row.rtol >= 0 else default.rtol
            out[str(row.output)] = Tolerance(atol=atol, rtol=rtol)
    return out


def pass_table(run: ValidationRun) -> pd.DataFrame:
    """Per output over every input set (core.rows.output_rows): its worst status, mismatches,
    the smallest atol that passes in every set."""
    rows = output_rows(run)
    frame = rows_frame(rows, leave_out=("set", "shape", "dtype", "message"))
    frame["note"] = ["" if r.can_rejudge else NOT_FIXABLE for r in rows]
    return frame


def _curves(run: ValidationRun, name: str, rtol: float) -> np.ndarray | None:
    """Mismatch fraction against CURVE_ATOLS over every input set, cached for this run
    (~1.5 ms a comparison: an LLM run has hundreds)."""
    box = st.session_state.get("tol_curves")
    if box is None or box["run"] is not run:  # a new run: start over
        box = st.session_state["tol_curves"] = {"run": run}
    key = (name, rtol)
    if key in box:
        return box[key]
    total = None
    n = 0
    for c in run.comparisons:
        if c.name != name or c.profile is None:
            continue
        frac = np.asarray(c.profile.mismatch_curve(CURVE_ATOLS, rtol), dtype=np.float64)
        total = frac * c.n_judged if total is None else total + frac * c.n_judged
        n += c.n_judged
    box[key] = None if total is None or n == 0 else total / n
    return box[key]


def _suggest(run: ValidationRun, margin: float) -> None:
    suggestion = suggest_tolerances(run, margin=margin)
    state.set_tolerances(suggestion.tolerances)
    st.session_state["tol_suggest_notes"] = suggestion.notes


@st.fragment
def controls(raw: ValidationRun) -> None:
    t_start = time.perf_counter()
    st.session_state["tol_fragment_runs"] = st.session_state.get("tol_fragment_runs", 0) + 1
    tol_now = state.tolerances()
    _sync_widgets(raw, tol_now)

    c1, c2 = st.columns(2)
    with c1:
        atol = st.select_slider(
            "Global atol", options=with_value(ATOL_LADDER, st.session_state["tol_atol"]),
            format_func=_fmt, key="tol_atol",
        )  # fmt: skip
    with c2:
        rtol = st.select_slider(
            "Global rtol", options=with_value(RTOL_LADDER, st.session_state["tol_rtol"]),
            format_func=_fmt, key="tol_rtol",
        )  # fmt: skip
    st.markdown(
        "**Per-output overrides** — tick *override* to give an output its own tolerance "
        "(a blank cell takes the global value)"
    )
    edited = st.data_editor(
        st.session_state[EDITOR_BASE],
        key="tol_editor",
        hide_index=True,
        width="stretch",
        disabled=["output"],
        column_config={
            "override": st.column_config.CheckboxColumn("override"),
            "atol": st.column_config.NumberColumn("atol", min_value=0.0, format="%.3g"),
            "rtol": st.column_config.NumberColumn("rtol", min_value=0.0, format="%.3g"),
        },
    )
    default = Tolerance(atol=float(atol), rtol=float(rtol))
    new_tol = Tolerances(default=default, outputs=_overrides(edited, default))
    if new_tol != tol_now:
        state.set_tolerances(new_tol)
        st.session_state[SYNCED] = (raw, new_tol)

    judged, ms = state.timed(raw.rejudge, new_tol)
    n_fail = sum(not c.status.passed for c in judged.comparisons)
    st.markdown(
        verdict_badge(judged, size="## ")
        + f" &nbsp; {len(judged.comparisons) - n_fail} of {len(judged.comparisons)} pass"
    )
    timing = st.empty()
    everything = judged  # Suggest: tolerances under which every candidate passes
    if judged.is_multi_candidate:  # every candidate re-judged live, then one in detail
        st.dataframe(candidates_frame(judged), hide_index=True, width="stretch")
        judged = candidate_selector(judged, key="candidate_tolerances")
        raw = raw.for_candidate(judged.candidates[0].index)
    st.dataframe(
        status_style(pass_table(judged)),
        hide_index=True,
        width="stretch",
        column_config=ROW_COLUMN_CONFIG,
        key="tol_pass_table",
    )

    s1, s2, s3 = st.columns([1, 1, 2])
    margin = s1.number_input("Suggest margin (x min atol)", 1.0, 100.0, DEFAULT_MARGIN, 0.5,
                             key="tol_margin")  # fmt: skip
    s2.button(
        "Suggest", icon=":material/auto_fix_high:", on_click=_suggest, args=(everything, margin),
        help="Per output: margin x the smallest atol that passes in every input set, "
        "rounded up to 1-2-5, at the output's rtol.",
        key="tol_suggest",
    )  # fmt: skip
    with s3:
        st.download_button(
            "Download tolerances JSON",
            data=new_tol.dumps(),
            file_name="tolerances.json",
            mime="application/json",
            icon=":material/download:",
            on_click="ignore",
            key="tol_download",
        )
        st.caption("Use it with `parity validate --tolerances tolerances.json`.")
    notes = st.session_state.get("tol_suggest_notes")
    if notes:
        st.caption("Suggest: " + "; ".join(f"{md_code(k)}: {md_text(v)}" for k, v in notes.items()))

    st.subheader("Mismatch fraction against atol")
    names = list(judged.output_names)
    cols = st.columns(min(len(names), 2) or 1)
    for i, name in enumerate(names):
        t = new_tol.for_output(name)
        curve = _curves(raw, name, t.rtol)
        with cols[i % len(cols)]:
            if curve is None:
                st.caption(f"{md_code(name)}: no curve (nothing comparable element by element)")
                continue
            st.plotly_chart(
                mismatch_curve(CURVE_ATOLS, {name: curve}, atol=t.atol,
                               title=f"{name} (rtol {_fmt(t.rtol)})"),
                width="stretch", key=f"tol_curve_{name}",
            )  # fmt: skip
    total_ms = (time.perf_counter() - t_start) * 1000
    renders = st.session_state["tol_fragment_runs"]
    timing.caption(
        f"Re-judged {len(judged.comparisons)} outputs in {ms:.1f} ms; this section redrawn on "
        f"the server in {total_ms:.0f} ms (fragment render #{renders})"
    )


def page() -> None:
    st.session_state["tol_page_runs"] = st.session_state.get("tol_page_runs", 0) + 1
    st.title("Tolerances")
    raw = state.raw_run()
    if raw is None:
        st.info("No run yet. Start one on the Run page.")
        st.page_link("pages/run.py", label="Go to Run", icon=":material/play_arrow:")
        return
    st.caption(
        "An element passes when |onnx − ref| ≤ atol + rtol·|ref|. Moving a control re-judges "
        "every output from stored error profiles; models are not rerun. "
        f"(page render #{st.session_state['tol_page_runs']})"
    )
    controls(raw)


page()
