"""Overview page: the verdict, one row per (input set, output), the sets x outputs grid."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from parity.dashboard import routes, state
from parity.dashboard.candidates import candidate_selector, candidates_overview, could_not_run
from parity.dashboard.findings_view import findings_section
from parity.dashboard.frame import run_or_invite
from parity.dashboard.sidebar import own_export_words, verdict_badge
from parity.dashboard.tables import (
    fitting_columns,
    one_dtype,
    one_tolerance,
    row_column_config,
    rows_frame,
    status_style,
)
from parity.dashboard.text import md_code, md_text
from parity.dashboard.uploads import shown_path
from parity.dashboard.where_views import failing_sentences
from parity.judge.pass_rule import ALLOWED_TEXT
from parity.labels import WORST_WORDS, set_noun, worst_first
from parity.load.provider_precision import precision_notes
from parity.results import OutputComparison, ValidationRun
from parity.show.cause_labels import INTENDED_WORDS
from parity.show.figures import verdict_grid
from parity.show.format import sample_name
from parity.show.rows import comparison_rows
from parity.show.sentences import failing_outputs
from parity.show.summary import headline, notes
from parity.text import plural_text, sentence_start


def comparison_frame(run: ValidationRun) -> pd.DataFrame:
    """One row per (input set, output), row k being ``run.outputs[k]`` (parity.show.rows)."""
    return rows_frame(comparison_rows(run))


def worst_failure(run: ValidationRun) -> OutputComparison | None:
    """The failing comparison to look at first (parity.labels.badness)."""
    failing = worst_first(c for c in run.outputs if not c.status.passed)
    return failing[0] if failing else None


def _on_table_select() -> None:
    rows = state.selected_rows(state.OVERVIEW_TABLE)
    run = state.current_view()
    if rows and run is not None:
        c = run.outputs[rows[0]]
        state.set_target(c.input_set, c.name)
        state.put(state.GOTO_INSPECT, True)


def _on_grid_select() -> None:
    for p in state.selected_points(state.OVERVIEW_GRID):
        data = p.get("customdata")
        if data:
            state.set_target(int(data[0]), str(data[1]))
            state.put(state.GOTO_INSPECT, True)
            return


def verdict_banner(run: ValidationRun) -> None:
    """The verdict in plain words (parity.show.summary), the same as the HTML report's."""
    st.markdown(verdict_badge(run, size="# "))
    st.markdown(f"#### {md_text(headline(run))}")
    for info in run.infos:  # what the provider really computed, by the verdict
        for note in precision_notes(info.notes):
            who = f"{info.label}: " if run.is_multi_candidate else ""
            st.caption(":material/memory: " + md_text(who + note))
    onnx = (
        f"{len(run.candidates)} candidates"
        if run.is_multi_candidate
        else own_export_words(run)
        if own_export_words(run)
        else md_code(shown_path(run.onnx))
    )
    st.caption(f"model {md_code(shown_path(run.model))} · ONNX {onnx}")


def technical_notes(run: ValidationRun) -> None:
    """The conditions the verdict holds under (tolerances, inputs fed by position): last."""
    st.subheader("Technical notes")
    st.markdown("\n".join(f"- {md_text(line)}" for line in notes(run)))  # candidate notes too


def noise_section(run: ValidationRun) -> None:
    """--noise-floor: per float32 output, whether ONNX's error is float32 rounding (text)."""
    if not any(c.noise is not None for c in run.outputs):
        return
    from parity.judge.noise_floor import noise_lines

    with st.container(border=True):
        st.markdown("**Rounding noise** (against torch run again in float64)")
        for line in noise_lines(run.outputs):
            st.text(line)


def _worst_sample(run: ValidationRun, name: str) -> tuple[int, str] | None:
    """(number, id) of output `name`'s worst sample whose values the run kept (--data), else
    None: a data run keeps those, not its batches, so that is what Inspect can draw."""
    o = run.data.output(name) if run.data is not None else None
    kept = [w for w in o.worst if w.torch is not None and w.onnx is not None] if o else []
    return (kept[0].sample, kept[0].id) if kept else None


def page() -> None:
    st.title("Overview")
    if state.pop(state.GOTO_INSPECT, False):
        st.switch_page(routes.INSPECT)
    run = run_or_invite()
    if run is None:
        return
    verdict_banner(run)
    if run.is_multi_candidate:  # candidates side by side, then one candidate in detail
        candidates_overview(run)
        st.subheader("One candidate in detail")
        run = candidate_selector(run, key=state.CANDIDATE_OVERVIEW)
        if could_not_run(run):
            return
    findings_section(run)
    if failing_outputs(run):
        st.subheader("In numbers")
    failing_sentences(run)
    noise_section(run)

    worst = worst_failure(run)
    sample = _worst_sample(run, worst.name) if worst is not None else None
    if worst is not None and sample is not None:  # a data run keeps its worst samples' values
        label = f"Inspect the worst sample: {md_code(worst.name)}, {md_text(sample_name(*sample))}"
        if st.button(label, type="primary", icon=":material/grid_on:", key=state.INSPECT_WORST):
            state.set_sample_target(worst.name, sample[0])
            st.switch_page(routes.INSPECT)
    elif worst is not None:
        label = f"Inspect the worst failure: {md_code(worst.name)} in set {worst.input_set}"
        said = f"The worst failure: {WORST_WORDS} (every page orders failures so)."
        if st.button(
            label, type="primary", icon=":material/grid_on:", key=state.INSPECT_WORST, help=said
        ):
            state.set_target(worst.input_set, worst.name)
            st.switch_page(routes.INSPECT)

    st.subheader("Outputs")
    frame = comparison_frame(run)
    same, dtype = one_tolerance(frame), one_dtype(frame)
    st.caption(
        "Select a row to inspect that output. A shape or dtype reads A vs B if they differ."
        + (f" Every row is judged at atol / rtol {md_text(same)}." if same else "")
        + (f" Every output is {md_text(dtype)} on both sides." if dtype else "")
    )
    st.dataframe(
        status_style(frame),
        hide_index=True,
        width="stretch",
        column_config=row_column_config(frame),
        # fits 1280 px: the smallest passing atol is the Tolerances page's question
        column_order=fitting_columns(frame, leave_out=("min_atol",)),
        on_select=_on_table_select,
        selection_mode="single-row",
        key=state.OVERVIEW_TABLE,
    )

    is_llm = run.is_generation
    if is_llm:
        from parity.hf.steps_text import format_hf_summary

        st.subheader("Generation summary")
        st.caption(
            "Every forward call generate() made (prefill, then each decode step with its "
            "growing cache) was run on torch and ONNX Runtime. Positions the attention mask "
            "excludes (padding) are never attended: they are counted apart, not judged."
        )
        st.code(format_hf_summary(run), language=None)
    st.subheader(f"{sentence_start(plural_text(set_noun(run)))} × outputs")
    st.caption(
        f"Colour: the worst error ÷ allowed error ({ALLOWED_TEXT}), the same scale in every "
        f"run: greens pass (yellow close to the line), reds fail, {INTENDED_WORDS}, purple "
        "cannot be compared element by element (shape, dtype, missing, or error: ONNX Runtime "
        "raised at that size). ✓ / ✗ / ≈ say it without colour. Click a cell's mark to "
        "inspect it."
    )
    grid, frozen = st.columns([3, 2]) if run.frozen else (st.container(), None)
    with grid:
        st.plotly_chart(
            verdict_grid(run),
            width="stretch",
            on_select=_on_grid_select,
            selection_mode="points",
            key=state.OVERVIEW_GRID,
        )
    if frozen is not None:  # parity.judge.frozen: confirmed nodes, their sentences as they are
        with frozen.container(border=True):
            st.markdown("**Frozen at export**")
            st.markdown("\n".join(f"- {md_text(f.text)}" for f in run.frozen))

    st.subheader("Input sets")
    rows = [
        {
            "set": s.index,
            "label": s.label,
            **{name: f"{d['dtype']} {d['shape']}" for name, d in s.describe().items()},
        }
        for s in run.input_sets
    ]
    st.dataframe(rows, hide_index=True, width="stretch")
    technical_notes(run)


page()
