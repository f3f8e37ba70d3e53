"""Sidebar controls for saved runs: open one, save the current run, download reports.

Call `render_saved_run_controls()` inside the sidebar
(parity.dashboard.sidebar.open_saved_run_hook).
Opening needs neither torch nor the model: `parity.reports.saved_run.load_run` maps the arrays from
the file, and the run becomes the session's current run through `parity.dashboard.state.set_run`.
Work happens in widget callbacks, so a file is read once per click or upload, not on
every rerun.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import streamlit as st

from parity.dashboard import state
from parity.dashboard.text import md_code, md_text
from parity.dashboard.uploads import upload_path
from parity.errors import ParityError
from parity.labels import verdict_label
from parity.launch import RUN_ENV, RUN_SCRATCH_ENV
from parity.results import ValidationRun

DEFAULT_SAVE_PATH = "run.parity.npz"
BROWSER_DOWNLOAD_LIMIT = 512 << 20
"""Above this many bytes of raw arrays the saved run is offered as save-to-path only:
a browser download holds the whole file in the server's memory."""


def open_initial_run() -> None:
    """`?run=PATH` in the URL (or PARITY_RUN=PATH) opens that saved run once per session."""
    import os

    path = st.query_params.get("run") or os.environ.get(RUN_ENV)
    if not path or state.get(state.SAVED_OPENED) == path:
        return
    state.put(state.SAVED_OPENED, path)
    linked = "run" in st.query_params  # a link anyone could have made: read-only until confirmed
    scratch = not linked and os.environ.get(RUN_SCRATCH_ENV)
    # the launcher's own copy, written just now in its private folder: no need to hash it again
    shown = None if scratch else path
    open_and_say(Path(path).expanduser(), shown=shown, verify=not scratch, fill=not linked)


def linked_run() -> ValidationRun | None:
    """The current run when a `?run=` link opened it and the user has not yet confirmed it:
    it is shown, but its settings are not in the Run form and nothing re-runs it."""
    run = state.get(state.LINKED_RUN)
    return run if run is not None and run is state.raw_run() else None


def confirm_linked_run() -> None:
    """The user's "use this run's settings": the Run form shows them (what it may take)."""
    from parity.dashboard.run_form import fill_from_run

    run = linked_run()
    state.pop(state.LINKED_RUN)
    if run is not None:
        fill_from_run(run)


def render_saved_run_controls() -> None:
    """Open / save / download controls for the sidebar."""
    st.markdown("#### Saved runs")
    st.text_input(
        "Open a saved run (path on this machine)",
        key=state.SAVED_OPEN_PATH,
        placeholder="run.parity.npz",
        help="A file written by `parity validate --save-run` or by **Save run** below.",
    )
    st.button("Open", key=state.SAVED_OPEN, on_click=_open_path, width="stretch")
    st.file_uploader(
        f"…or upload one (up to {state.upload_limit_mb()} MB)",
        type=["npz", "zip"],
        key=state.SAVED_UPLOAD,
        on_change=_open_upload,
    )
    run = state.current_run()
    if run is not None:
        _save_controls(run)
    message = state.get(state.SAVED_MESSAGE)
    if message is not None:
        ok, text = message  # markdown, user strings already made text by _say's callers
        st.caption(f":green[✓] {text}" if ok else f":red[✗] {text}")


def _save_controls(run: ValidationRun) -> None:
    st.text_input(
        "Save to (path on this machine)", value=DEFAULT_SAVE_PATH, key=state.SAVED_SAVE_PATH
    )
    st.button("Save run", key=state.SAVED_SAVE, on_click=_save_path, width="stretch")
    if raw_bytes(run) <= BROWSER_DOWNLOAD_LIMIT:
        st.download_button(
            "Download saved run",
            data=lambda: saved_run_bytes(run),
            file_name="run.parity.npz",
            mime="application/zip",
            on_click="ignore",
            width="stretch",
        )
    else:
        st.caption("This run is large: save it to a path instead of downloading it.")
    st.download_button(
        "Download HTML report",
        data=lambda: html_report_bytes(run),
        file_name="parity-report.html",
        mime="text/html",
        on_click="ignore",
        width="stretch",
    )


# --------------------------------------------------------------------------- actions


def open_saved_run(path: str | Path, *, verify: bool = True, fill: bool = True) -> ValidationRun:
    """Load a saved run and make it the session's current run, its settings the Run form's
    (raises SavedRunError). `fill=False` (a `?run=` link): shown read-only until the user
    confirms (`confirm_linked_run`)."""
    from parity.dashboard.run_form import fill_from_run
    from parity.reports.saved_run import load_run

    run = load_run(path, verify=verify)
    state.set_run(run)
    if fill:
        state.pop(state.LINKED_RUN)
        fill_from_run(run)
    else:
        state.pop(state.FORM_BASE)
        state.put(state.LINKED_RUN, run)
    return run


def saved_run_bytes(run: ValidationRun) -> bytes:
    """The run as a saved-run file's bytes (for a browser download)."""
    from parity.reports.saved_run import save_run

    with tempfile.TemporaryDirectory(prefix="parity-save-") as folder:
        path = save_run(run, Path(folder) / "run.parity.npz")
        return path.read_bytes()


def html_report_bytes(run: ValidationRun) -> bytes:
    from parity.reports.html_report import render_html_report

    return render_html_report(run).encode("utf-8")


def raw_bytes(run: ValidationRun) -> int:
    """Bytes of raw arrays a saved run would hold (inputs and both sides' outputs)."""
    arrays = [a for s in run.input_sets for a in s.feeds.values()]
    arrays += [
        a for side in (run.ref_outputs, run.onnx_outputs) for s in side for a in s.arrays.values()
    ]
    return sum(int(getattr(a, "nbytes", 0)) for a in arrays)


def _open_path() -> None:
    path = str(state.get(state.SAVED_OPEN_PATH, "")).strip()
    if not path:
        _say(False, "Type the path of a saved run first.")
        return
    open_and_say(Path(path).expanduser(), shown=path)


def _open_upload() -> None:
    upload = state.get(state.SAVED_UPLOAD)
    if upload is None:
        return
    path = upload_path("saved_run", upload)
    if path is None:  # not None for an upload given
        return
    open_and_say(path, shown=upload.name)


def open_and_say(path: Path, *, shown: str | None, verify: bool = True, fill: bool = True) -> bool:
    """Open a saved run and say so under the sidebar's controls: the run's model and files,
    and `shown` (the file's name as the user gave it; None for the launcher's own copy of the
    run it validated, a temp file of no use to the user)."""
    try:
        run = open_saved_run(path, verify=verify, fill=fill)
    except ParityError as exc:
        state.set_failure(exc)
        what = md_code(shown) if shown is not None else "the run"
        _say(False, f"Could not open {what}: {md_text(exc.message)}")
        return False
    said = f"{md_code(shown)}: " if shown is not None else ""
    _say(True, f"Opened {said}{md_text(run_words(run))}, {verdict_label(run.verdict)}.")
    return True


def run_words(run: ValidationRun) -> str:
    """A run named by its model and files, as a user gave them: "demo:broken (its demo's
    export)", "m.pt2 against m.onnx", "3 ONNX files against ref.onnx"."""
    from parity.run.config_json import config_of_run

    config = config_of_run(run)
    files = config.onnx_files if config is not None else (run.onnx,)
    names = [Path(f).name for f in files]
    if config is not None and config.model is None and config.reference_file is None:
        return f"{names[0]} against {', '.join(names[1:]) or 'itself'}"  # ONNX against ONNX
    model = shown_model(run.model)
    if not names:
        return f"{model} with its own export"
    return f"{model} against {', '.join(names)}"


def shown_model(spec: str) -> str:
    """A model as named on screen: a spec (demo:, hf:) as it is, a file by its name."""
    from parity.load.specs import reference_path

    if ":" in spec.split("/")[0] and not Path(spec).exists():
        ref = reference_path(spec)
        return f"reference outputs {Path(ref).name}" if ref else spec
    return Path(spec).name


def _save_path() -> None:
    from parity.reports.saved_run import save_run

    run = state.current_run()
    target = str(state.get(state.SAVED_SAVE_PATH, "")).strip() or DEFAULT_SAVE_PATH
    if run is None:
        _say(False, "No run to save yet.")
        return
    try:
        path = save_run(run, Path(target).expanduser())
    except ParityError as exc:
        _say(False, f"Could not save: {md_text(exc.message)}")
        return
    _say(True, f"Saved to {md_code(path.resolve())}")


def _say(ok: bool, text: str) -> None:
    state.put(state.SAVED_MESSAGE, (ok, text))
