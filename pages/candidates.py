"""The candidate dimension on the dashboard (a run with several ONNX files, providers or
optimisation levels): the selector every page shows, and the Overview's candidates table and
candidates x outputs grid. Names and messages are text (parity.dashboard.text), never markdown."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from parity.dashboard import state
from parity.dashboard.tables import status_style
from parity.dashboard.text import md_text
from parity.results import ValidationRun
from parity.show.candidate_figures import candidate_row_label, candidates_grid
from parity.show.candidate_views import verdict_counts
from parity.show.cause_labels import run_cause
from parity.show.format import reference_text


def _sync(key: str) -> None:
    state.set_candidate(state.get(key))


def candidate_selector(run: ValidationRun, *, key: str) -> ValidationRun:
    """A selectbox over the candidates (the choice is shared by every page); returns `run` as
    the chosen candidate alone. A run with one candidate draws nothing and is returned."""
    if not run.is_multi_candidate:
        return run
    infos = {i.index: i for i in run.infos}
    current = state.candidate_index(run)
    state.put_if_changed(key, current)  # another page (or the grid) chose
    st.selectbox(
        "Candidate",
        list(infos),
        format_func=lambda k: candidate_row_label(run, infos[k]),
        key=key,
        on_change=_sync,
        args=(key,),
        help="This run compared several ONNX files / providers / optimisation levels with "
        "one reference; this page shows one of them. The Overview shows them side by side.",
    )
    return run.for_candidate(state.candidate_index(run))


def could_not_run(view: ValidationRun) -> bool:
    """Say so (one line, as text) when the chosen candidate could not be run: it has no
    outputs to show. True when the page should stop there."""
    info = view.infos[0]
    if info.error is None:
        return False
    st.error(f"{md_text(info.label)} could not be run: {md_text(info.error)}")
    return True


def candidates_frame(run: ValidationRun) -> pd.DataFrame:
    rows = []
    for view in run.candidates:
        i = view.info
        rows.append(
            {
                "#": i.index,
                # ≈ FAIL: float16 rounding where every failure is intended (amber)
                "verdict": run_cause(run, view.index).marked(),
                "ONNX file": i.onnx,
                "provider": i.provider,
                "opt level": i.ort_opt_level,
                "failing": sum(not c.status.passed for c in view.outputs),
                "ORT s": round(i.seconds, 3),
                "error / notes": i.error or "; ".join(i.notes),
            }
        )
    return pd.DataFrame(rows)


def _on_grid_select() -> None:
    for p in state.selected_points(state.CANDIDATES_GRID):
        data = p.get("customdata")
        if data and int(data[2]) >= 0:  # a cell of a candidate that ran
            state.set_candidate(int(data[0]))
            state.set_target(int(data[2]), str(data[1]))
            state.put(state.GOTO_INSPECT, True)
            return


def candidates_overview(run: ValidationRun) -> None:
    """The candidates side by side: verdict counts, one row per candidate, and the grid
    (re-judged with the run: it follows the Tolerances page live)."""
    counts = verdict_counts(run)
    parts = [f"{counts['pass']} of {sum(counts.values())} candidates pass"]
    parts += [f"{counts['fail']} fail"] * bool(counts["fail"])
    parts += [f"{counts['error']} could not be run"] * bool(counts["error"])
    st.subheader("Candidates")
    st.markdown(md_text(f"{', '.join(parts)}; {reference_text(run)}"))
    st.dataframe(
        status_style(candidates_frame(run), ["verdict"]),
        hide_index=True,
        width="stretch",
        key=state.CANDIDATES_TABLE,
    )
    st.caption(
        "Each cell: the candidate's worst input set for that output. Click a cell's mark to "
        "inspect it."
    )
    st.plotly_chart(
        candidates_grid(run),
        width="stretch",
        on_select=_on_grid_select,
        selection_mode="points",
        key=state.CANDIDATES_GRID,
    )
