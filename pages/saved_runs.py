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
from parity.launch import RUN_ENV
from parity.results import ValidationRun

PATH_KEY = "parity_saved_open_path"
UPLOAD_KEY = "parity_saved_upload"
SAVE_PATH_KEY = "parity_saved_save_path"
MESSAGE_KEY = "parity_saved_message"
DEFAULT_SAVE_PATH = "run.parity.npz"
BROWSER_DOWNLOAD_LIMIT = 512 << 20
"""Above this many bytes of raw arrays the saved run is offered as save-to-path only:
a browser download holds the whole file in the server's memory."""


OPENED_KEY = "parity_saved_initial"


def open_initial_run() -> None:
    """`?run=PATH` in the URL (or PARITY_RUN=PATH) opens that saved run once per session."""
    import os

    path = st.query_params.get("run") or os.environ.get(RUN_ENV)
    if not path or st.session_state.get(OPENED_KEY) == path:
        return
    st.session_state[OPENED_KEY] = path
    open_and_say(Path(path).expanduser(), shown=path)


def render_saved_run_controls() -> None:
    """Open / save / download controls for the sidebar."""
    st.markdown("#### Saved runs")
    st.text_input(
        "Open a saved run (path on this machine)",
        key=PATH_KEY,
        placeholder="run.parity.npz",
        help="A file written by `parity validate --save-run` or by **Save run** below.",
    )
    st.button("Open", key="parity_saved_open", on_click=_open_path, width="stretch")
    st.file_uploader(
        f"…or upload one (up to {state.upload_limit_mb()} MB)",
        type=["npz", "zip"],
        key=UPLOAD_KEY,
        on_change=_open_upload,
    )
    run = state.current_run()
    if run is not None:
        _save_controls(run)
    message = st.session_state.get(MESSAGE_KEY)
    if message is not None:
        ok, text = message  # markdown, user strings already made text by _say's callers
        st.caption(f":green[✓] {text}" if ok else f":red[✗] {text}")


def _save_controls(run: ValidationRun) -> None:
    st.text_input("Save to (path on this machine)", value=DEFAULT_SAVE_PATH, key=SAVE_PATH_KEY)
    st.button("Save run", key="parity_saved_save", on_click=_save_path, width="stretch")
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


def open_saved_run(path: str | Path) -> ValidationRun:
    """Load a saved run and make it the session's current run (raises SavedRunError)."""
    from parity.reports.saved_run import load_run

    run = load_run(path)
    state.set_run(run)
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
    path = str(st.session_state.get(PATH_KEY, "")).strip()
    if not path:
        _say(False, "Type the path of a saved run first.")
        return
    open_and_say(Path(path).expanduser(), shown=path)


def _open_upload() -> None:
    upload = st.session_state.get(UPLOAD_KEY)
    if upload is None:
        return
    path = upload_path("saved_run", upload)
    open_and_say(path, shown=upload.name)


def open_and_say(path: Path, *, shown: str) -> bool:
    """Open a saved run and say so under the sidebar's controls (`shown`: its name there)."""
    try:
        run = open_saved_run(path)
    except ParityError as exc:
        state.set_failure(exc)
        _say(False, f"Could not open {md_code(shown)}: {md_text(exc.message)}")
        return False
    _say(True, f"Opened {md_code(shown)}: {run.verdict}, {len(run.comparisons)} comparison(s).")
    return True


def _save_path() -> None:
    from parity.reports.saved_run import save_run

    run = state.current_run()
    target = str(st.session_state.get(SAVE_PATH_KEY, "")).strip() or DEFAULT_SAVE_PATH
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
    st.session_state[MESSAGE_KEY] = (ok, text)
