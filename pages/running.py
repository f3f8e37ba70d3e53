"""Running a validation from the dashboard (the Run page's form and demos, the Layers page's
"Compare layers for this run"): live progress, and on success the current run."""

from __future__ import annotations

import gc

import streamlit as st

from parity.dashboard import state
from parity.dashboard.text import md_text
from parity.labels import wrong_pair_note


def run_config(**kwargs):
    from parity.pipeline import RunConfig

    return RunConfig(**kwargs)


def execute(config, *, label: str) -> bool:
    """Run `config` with live progress; on success it becomes the current run.

    Then one full garbage collection: the server runs with `runner.postScriptGC = false`
    (parity.launch), so the cycles a run leaves (an export's graph, the replaced run) are
    collected here, where they are made, not after every click."""
    try:
        return _execute(config, label)
    finally:
        gc.collect()


def _execute(config, label: str) -> bool:
    from parity.pipeline import run_validation

    shown = md_text(label)
    if config.layers:
        state.put(state.LAYERS_DONE, True)
    with st.status(f"Running {shown} ...", expanded=True) as status:
        bar = st.progress(0.0, text="starting")
        log = st.empty()
        lines: list[str] = []

        def on_progress(event) -> None:
            if event.fraction is not None:
                bar.progress(min(max(event.fraction, 0.0), 1.0), text=md_text(event.message))
            lines.append(f"{event.elapsed:7.2f}s  {event.step:<8} {event.message}")
            log.code("\n".join(lines[-14:]), language=None)

        try:
            run = run_validation(config, progress=on_progress, loaders=state.cached_loaders())
        except Exception as exc:  # a ParityError, or a bug: either way keep the last good run
            state.set_failure(exc)
            status.update(label=f"Run of {shown} failed", state="error", expanded=False)
            return False
        total = sum(run.timings.values())
        status.update(  # the icon says the verdict too: never a tick next to FAIL
            label=f"{shown}: {run.verdict.upper()} in {total:.2f} s",
            state="complete" if run.verdict == "pass" else "error",
            expanded=False,
        )
    if wrong_pair_note(run) is not None and state.raw_run() is not None:
        state.set_suspect(run)  # the last good run stays current; shown with a way to open it
    else:
        state.set_run(run)
        state.set_run_config(run, config)
    return True
