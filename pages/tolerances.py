"""Tolerances page: sliders and per-output overrides that re-judge the run instantly.

Re-judging reads only the per-output error profiles (never raw tensors). The session's
tolerances (parity.dashboard.state) are the one truth: the widgets write them in callbacks and are
drawn from them, so no widget holds a value the rest of the app does not see.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st

from parity.dashboard import state
from parity.dashboard.access import command_run
from parity.dashboard.candidates import candidate_selector, candidates_frame
from parity.dashboard.frame import run_or_invite
from parity.dashboard.sidebar import verdict_badge
from parity.dashboard.tables import row_column_config, rows_frame, status_style
from parity.dashboard.text import dashboard_words, md_code, md_text
from parity.dashboard.tolerance_editor import apply_edits, editor_frame, fmt
from parity.judge.pass_rule import RULE_SENTENCE
from parity.judge.suggest import (
    DEFAULT_MARGIN,
    NOISE_MULTIPLES,
    has_noise,
    ladder,
    pooled_mismatch_curve,
    suggestion_lines,
    with_value,
)
from parity.results import ValidationRun
from parity.show.figures import mismatch_curve
from parity.show.findings import HIDDEN_BY_TOLERANCE
from parity.show.forgiven import forgiven, forgiven_text
from parity.show.rows import ComparisonRow, output_rows
from parity.tolerances import Tolerance, Tolerances

ATOL_LADDER = ladder(-9, 1)
RTOL_LADDER = ladder(-9, 0, zero=True)
CURVE_ATOLS = np.logspace(-9, 1, 81)
MULTIPLES = ", ".join(f"{k:g}" for k in NOISE_MULTIPLES)
NOT_FIXABLE = "shape/dtype/missing: no tolerance fixes it"


def _editor_key(run: ValidationRun, tol: Tolerances) -> str:
    """A fresh editor whenever the tolerances change (an edit, Suggest, a new run), so it
    always shows the session's tolerances and never a stale delta of its own."""
    nonce = state.get(state.TOL_EDIT_NONCE, 0)  # a refused edit redraws it too
    digest = hashlib.sha256(f"{id(run)}|{nonce}|{tol.dumps()}".encode()).hexdigest()[:16]
    return state.TOL_EDITOR_PREFIX + digest


def _sync_sliders(tol: Tolerances) -> None:
    """The sliders show the session's tolerances (set before they are drawn; a key Streamlit
    dropped while another page was shown is set again, never read missing)."""
    state.put_if_changed(state.TOL_ATOL, tol.default.atol)
    state.put_if_changed(state.TOL_RTOL, tol.default.rtol)


def _on_slider() -> None:
    tol = state.tolerances()
    atol = float(state.get(state.TOL_ATOL, tol.default.atol))
    rtol = float(state.get(state.TOL_RTOL, tol.default.rtol))
    state.set_tolerances(tol.with_default(Tolerance(atol=atol, rtol=rtol)))


def _on_edit(key: str, names: list[str]) -> None:
    edits = (state.get(key) or {}).get("edited_rows", {})
    tol, errors = apply_edits(state.tolerances(), names, edits)
    state.set_tolerances(tol)
    state.put(state.TOL_EDIT_ERROR, errors)
    state.put(state.TOL_EDIT_NONCE, state.get(state.TOL_EDIT_NONCE, 0) + 1)


def pass_table(rows: Sequence[ComparisonRow]) -> pd.DataFrame:
    """Per output over every input set (parity.show.rows.output_rows): its worst status, mismatches,
    the smallest atol that passes in every set."""
    frame = rows_frame(rows, leave_out=("set", "shape", "dtype", "message"))
    frame["note"] = ["" if r.can_rejudge else NOT_FIXABLE for r in rows]
    return frame


def _curves(run: ValidationRun, name: str, rtol: float) -> np.ndarray | None:
    """Mismatch fraction against CURVE_ATOLS over every input set, cached for this run
    (~1.5 ms a comparison: an LLM run has hundreds)."""
    return state.run_memo(
        state.TOL_CURVES,
        run,
        (name, rtol),
        lambda: pooled_mismatch_curve(run, name, CURVE_ATOLS, rtol),
    )


REOPENED = (
    "a reopened run is not made again here (its files could run code): make it again on the "
    "Run page to check suggestions on fresh inputs"
)


def _suggest(run: ValidationRun, basis: str, margin: float) -> None:
    """Fit per-output tolerances on the run's input sets, check them on as many fresh ones
    (the pipeline's suggestion stage: the model run again), and apply only what passed."""
    from parity.pipeline import check_suggestion
    from parity.run.config_json import config_of_run

    # a reopened run is not made again (its files could run code), except the run this
    # dashboard's command line validated: the user typed that model
    own = run.saved is None or command_run(run.saved.path)
    config = config_of_run(run) if own else None
    with st.spinner("Checking the suggestion on fresh input sets (the model runs again)..."):
        found = check_suggestion(
            run, config, basis=basis, margin=margin, loaders=state.cached_loaders()
        )
    if not own:
        found = replace(found, withheld={k: REOPENED for k in found.withheld})
    state.set_tolerances(found.tolerances(state.tolerances()))
    state.put(state.TOL_SUGGESTED, (id(state.raw_run()), found))  # this run's only


def suggestion_shown() -> None:
    """The last checked suggestion, in the words the terminal uses (parity.judge.suggest)."""
    held = state.get(state.TOL_SUGGESTED)
    found = held[1] if held is not None and held[0] == id(state.raw_run()) else None
    lines = suggestion_lines(found) if found is not None else []
    if not lines:
        return
    head, *rest = lines
    st.caption(md_text(dashboard_words(head)))
    # no "As flags: --tol ..." here: the page has applied them (the editor shows them), and
    # the download gives the file for the command line
    rest = [line for line in rest if not line.startswith("As flags:")]
    with st.expander("Suggested tolerance per output"):
        st.text("\n".join(dashboard_words(line) for line in rest))


def noise_suggestion(judged: ValidationRun, margin: float) -> None:
    """--noise-floor: "k x rounding noise" per output (parity.judge.suggest), checked on fresh
    input sets before it is applied; none for an output with a bug finding."""
    if not has_noise(judged):
        return
    # no k on the button: the fit's k can be raised by the check on fresh input sets (a
    # button said "2×" above the "5×" it applied)
    st.button(
        "Suggest from the rounding noise", icon=":material/blur_on:", on_click=_suggest,
        args=(judged, "rounding", margin), key=state.TOL_SUGGEST_NOISE,
        help="Per output: atol = k × torch's own error at the file's precision (against torch "
        f"run again in float64), rtol 0; k the smallest of {MULTIPLES} that passes every "
        "output whose error looks like rounding; then checked on as many fresh input sets "
        "(another seed, larger sizes). None for an output with a bug finding.",
    )  # fmt: skip


def controls(raw: ValidationRun) -> None:
    """The controls and what they decide. Every change goes to the session's tolerances in
    a callback, before the script reruns, so this page, the sidebar's badge and its reports
    are drawn from the same tolerances in the same rerun."""
    tol = state.tolerances()
    _sync_sliders(tol)
    c1, c2 = st.columns(2)
    with c1:
        st.select_slider(
            "Global atol", options=with_value(ATOL_LADDER, tol.default.atol),
            format_func=fmt, key=state.TOL_ATOL, on_change=_on_slider,
        )  # fmt: skip
    with c2:
        st.select_slider(
            "Global rtol", options=with_value(RTOL_LADDER, tol.default.rtol),
            format_func=fmt, key=state.TOL_RTOL, on_change=_on_slider,
        )  # fmt: skip
    st.markdown(
        "**Per-output overrides** — type an atol or rtol in an output's row to give it its own "
        "tolerance (`5e-3`, `0.005`); untick *override* to return it to the global values"
    )
    key = _editor_key(raw, tol)
    names = list(raw.output_names)
    st.data_editor(
        editor_frame(raw, tol),
        key=key,
        hide_index=True,
        width="stretch",
        disabled=["output"],
        on_change=_on_edit,
        args=(key, names),
        column_config={
            "override": st.column_config.CheckboxColumn("override"),
            "atol": st.column_config.TextColumn("atol", help="blank: the global atol"),
            "rtol": st.column_config.TextColumn("rtol", help="blank: the global rtol"),
        },
    )
    for line in state.get(state.TOL_EDIT_ERROR) or ():
        st.error(f"Not applied: {md_text(line)}", icon=":material/error:")

    judged, ms = state.timed(raw.rejudge, tol)
    everything = judged  # Suggest: tolerances under which every candidate passes
    if judged.is_multi_candidate:  # every candidate re-judged live, then one in detail
        st.markdown(verdict_badge(judged, size="## ") + " &nbsp; over every candidate")
        st.dataframe(candidates_frame(judged), hide_index=True, width="stretch")
        judged = candidate_selector(judged, key=state.CANDIDATE_TOLERANCES)
        raw = raw.for_candidate(judged.candidates[0].index)
    rows = output_rows(judged)
    table = pass_table(rows)
    # passing the tolerance, a bug it hides too (its row reads "✗ pass: a bug ...")
    n_pass = sum(r.status.passed for r in rows)
    st.markdown(
        verdict_badge(judged, size="## " if not everything.is_multi_candidate else "#### ")
        + (" &nbsp; by cause;" if judged.judge == "cause" else " &nbsp;")
        + f" {n_pass} of {len(table)} output(s) pass the tolerance in every input set"
    )
    st.dataframe(
        status_style(table),
        hide_index=True,
        width="stretch",
        column_config=row_column_config(table),
        key=state.TOL_PASS_TABLE,
    )
    st.caption(f"Re-judged {len(judged.outputs)} comparison(s) in {ms:.1f} ms.")
    forgiveness(judged)

    s1, s2, s3 = st.columns([1, 1, 2])
    margin = s1.number_input("Suggest margin (x min atol)", 1.0, 100.0, DEFAULT_MARGIN, 0.5,
                             key=state.TOL_MARGIN)  # fmt: skip
    s2.button(
        "Suggest", icon=":material/auto_fix_high:", on_click=_suggest,
        args=(everything, "observed", margin),
        help="Per output: margin x the smallest atol that passes in every input set, "
        "rounded up to 1-2-5, at the output's rtol; then checked on as many fresh input sets "
        "(another seed, larger sizes). Nothing tells such a tolerance from one that passes a "
        "bug unless rounding noise is measured. None for an output with a bug finding.",
        key=state.TOL_SUGGEST,
    )  # fmt: skip
    with s3:
        st.download_button(
            "Download tolerances JSON",
            data=tol.dumps(),
            file_name="tolerances.json",
            mime="application/json",
            icon=":material/download:",
            on_click="ignore",
            key=state.TOL_DOWNLOAD,
        )
        st.caption("Use it with `parity validate --tolerances tolerances.json`.")
    noise_suggestion(everything, margin)
    suggestion_shown()

    st.subheader("Mismatch fraction against atol")
    cols = st.columns(min(len(names), 2) or 1)
    for i, name in enumerate(names):
        t = tol.for_output(name)
        curve = _curves(raw, name, t.rtol)
        with cols[i % len(cols)]:
            if curve is None:
                st.caption(f"{md_code(name)}: no curve (nothing comparable element by element)")
                continue
            st.plotly_chart(
                mismatch_curve(CURVE_ATOLS, {name: curve}, atol=t.atol,
                               title=f"{name} (rtol {fmt(t.rtol)})"),
                width="stretch", key=f"{state.TOL_CURVE_PREFIX}{name}",
            )  # fmt: skip


def forgiveness(judged: ValidationRun) -> None:
    """What the tolerances set here forgive against each output's measured rounding noise,
    and a bug one of them passes (a finding: the run fails under the verdict by cause)."""
    hidden = [f for f in judged.findings if HIDDEN_BY_TOLERANCE in f.text]
    for f in hidden:
        st.error(md_text(f.text), icon=":material/bug_report:")
    lines = [forgiven_text(f) for f in forgiven(judged)]
    if lines:
        st.markdown("**What these tolerances forgive**")
        for line in lines:
            st.caption(md_text(line))
        return
    tuned = judged.tolerances.outputs or judged.tolerances.default != Tolerance()
    if tuned and not any(c.noise is not None for c in judged.outputs):
        st.caption(
            "What these tolerances forgive is not known: this run did not measure rounding "
            "noise (tick \u201cMeasure rounding noise\u201d on the Run page and run again)."
        )


def page() -> None:
    st.title("Tolerances")
    raw = run_or_invite(raw=True)
    if raw is None:
        return
    st.caption(
        f"{RULE_SENTENCE} Moving a control re-judges every output from stored error "
        "profiles (models are not rerun); every page, the sidebar and its reports follow "
        "these tolerances."
    )
    controls(raw)


page()
