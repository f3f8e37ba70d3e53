"""The sidebar every page shares: what the current run is, its verdict, its tolerances."""

from __future__ import annotations

import streamlit as st

from parity.dashboard import state
from parity.dashboard.text import md_code, md_text
from parity.dashboard.uploads import shown_path
from parity.labels import set_noun, verdict_label
from parity.results import ValidationRun
from parity.show.cause_labels import CauseLook, run_cause
from parity.show.colors import VERDICT_BADGE
from parity.text import count_text


def verdict_badge(run: ValidationRun, *, size: str = "", candidate: int | None = None) -> str:
    """Markdown for a coloured verdict badge (`size` is a heading prefix like '## '): a run
    (or `candidate`) failing only by what its file was meant to do reads "FAIL · float16
    rounding" in amber (parity.show.cause_labels), never in a bug's red."""
    return badge_of(run_cause(run, candidate), size=size)


def tolerance_text(run: ValidationRun) -> str:
    tol = run.tolerances
    lines = [f"default: atol `{tol.default.atol:g}`, rtol `{tol.default.rtol:g}`"]
    lines += [
        f"{md_code(name)}: atol `{t.atol:g}`, rtol `{t.rtol:g}`" for name, t in tol.outputs.items()
    ]
    return "  \n".join(lines)


def open_saved_run_hook() -> None:
    """Open a saved run, save the current one, download its reports
    (parity.dashboard.saved_runs)."""
    from parity.dashboard.saved_runs import render_saved_run_controls

    render_saved_run_controls()


def render_sidebar() -> None:
    with st.sidebar:
        run = state.current_run()
        st.markdown("#### Current run")
        if run is None:
            st.caption("No run yet: start one on the **Run** page (try a demo).")
        else:
            n_fail = sum(not c.status.passed for c in run.outputs)
            st.markdown(verdict_badge(run, size="### "))
            st.caption(
                "Judged by cause: a bug fails, what the file was meant to do passes."
                if run.judge == "cause"
                else "At the tolerances set on the Tolerances page."
            )
            onnx = (
                f"{len(run.candidates)} ONNX candidates, each with its verdict:"
                if run.is_multi_candidate
                else f"ONNX: {own_export_words(run)}"
                if own_export_words(run)
                else f"ONNX {md_code(_short(shown_path(run.onnx)))}"
            )
            st.caption(
                f"model {md_code(shown_path(run.model))}  \n{onnx}  \n"
                f"{_sets_text(run)}, "
                f"{count_text(len(run.output_names), 'output')}, "
                f"{count_text(n_fail, 'failing comparison')}"
            )
            if run.is_multi_candidate:
                st.markdown(candidate_lines(run))
            with st.expander("Tolerances", expanded=False):
                st.markdown(tolerance_text(run))
        failure = state.last_failure()
        if failure is not None:
            st.caption(f":red[Last run failed:] {md_text(failure.message)}")
        open_saved_run_hook()


def _sets_text(run: ValidationRun) -> str:
    """``2 input sets``; a data run's ``597 samples in 10 batches``."""
    sets = count_text(len(run.input_sets), set_noun(run))
    return sets if run.data is None else f"{count_text(run.data.samples, 'sample')} in {sets}"


def candidate_lines(run: ValidationRun) -> str:
    """One line per candidate of a run with several: its verdict badge, then which file,
    provider and level it is (the sidebar's list)."""
    return "  \n".join(
        f"{verdict_badge(run, candidate=v.index)} {md_text(v.label)}" for v in run.candidates
    )


def badge_of(look: CauseLook, *, size: str = "") -> str:
    said = verdict_label(look.verdict) + (f" · {md_text(look.intended)}" if look.intended else "")
    return f"{size}:{VERDICT_BADGE[look.css]}-background[**{said}**]"


def own_export_words(run: ValidationRun) -> str | None:
    """How to name the ONNX file of a run on an export Parity made itself (a file in the demo
    cache, or an hf: export in a temp folder since removed: of no use to name); else None."""
    from parity.load.specs import is_hf_spec
    from parity.run.config_json import config_of_run
    from parity.show.summary import DEMO_EXPORT, onnx_words

    if onnx_words(run) == DEMO_EXPORT:
        return DEMO_EXPORT
    if is_hf_spec(run.model):
        config = state.run_config_of(run) or config_of_run(run)
        kept = config is not None and config.hf is not None and config.hf.export_path
        if config is not None and not config.onnx_files and not kept:
            return "Parity's own export of the model (removed after the run)"
    return None


def _short(path: str, keep: int = 42) -> str:
    return path if len(path) <= keep else "..." + path[-keep:]
