"""The frame: page routing and the shared sidebar. Each page reads the current run from the
session; all the work is done by the core (`parity`).

`?demo=broken` in the URL runs a demo; `?run=FILE` opens a saved run (no torch needed);
`?sweep=DIR` opens a `parity sweep` folder on the Sweep page.
"""

from __future__ import annotations

import os

import numpy as np
import streamlit as st
from PIL import Image

from parity.dashboard import keep, state
from parity.dashboard.access import foreign_host, refuse
from parity.dashboard.routes import GENERATION_PAGE, PAGES, RUN, SAMPLES_PAGE
from parity.dashboard.saved_runs import open_initial_run
from parity.dashboard.sidebar import render_sidebar
from parity.launch import SWEEP_ENV
from parity.results import ValidationRun


def page_icon() -> Image.Image:
    """The browser tab's icon, drawn here: a 2 x 2 verdict grid (three passing cells, one
    failing). Streamlit fetches a `:material/...:` page icon from fonts.gstatic.com, a
    network request the app must never make."""
    icon = np.full((32, 32, 3), 255, dtype=np.uint8)
    green, red = (90, 174, 97), (224, 57, 43)
    for row, col, color in ((0, 0, green), (0, 1, green), (1, 0, green), (1, 1, red)):
        icon[2 + 15 * row : 15 + 15 * row, 2 + 15 * col : 15 + 15 * col] = color
    return Image.fromarray(icon)


def initial_sweep() -> str | None:
    """`?sweep=DIR` in the URL, or the folder `parity dashboard DIR` was started on."""
    return st.query_params.get("sweep") or os.environ.get(SWEEP_ENV) or None


def land_on_sweep(at_root: bool, sweep_page: st.Page) -> None:
    """`/?sweep=DIR` (or `parity dashboard DIR`) opens the Sweep page, once per session:
    after that the root URL is the Run page again."""
    if not initial_sweep() or state.get(state.SWEEP_LANDED):
        return
    state.put(state.SWEEP_LANDED, True)
    if at_root:
        st.switch_page(sweep_page, query_params=st.query_params.to_dict())


def listed_pages() -> tuple[tuple[str, str, str, str], ...]:
    """PAGES, with the Generation page after Layers while the current run has free-running
    generation (a causal LM's hf: run), the Samples page after Overview while it was made on
    a data set (--data)."""
    run = state.raw_run()
    pages: tuple[tuple[str, str, str, str], ...] = PAGES
    if run is not None and run.data is not None:
        at = [url for *_, url in pages].index("overview") + 1
        pages = (*pages[:at], SAMPLES_PAGE, *pages[at:])
    g = run.generation if run is not None else None
    if g is None or not g.prompts:
        return pages
    at = [url for *_, url in pages].index("layers") + 1
    return (*pages[:at], GENERATION_PAGE, *pages[at:])


def main() -> None:
    st.set_page_config(page_title="Parity", page_icon=page_icon(), layout="wide")
    # The Run page is always the default (served at /): were the Sweep page the default
    # when ?sweep=DIR is given, /sweep?sweep=DIR would name no page ("Page not found").
    host = foreign_host()  # DNS rebinding: checked before anything runs (access.py)
    if host is None:  # before the pages are listed: a saved LLM run lists Generation at once
        keep.restore()  # a reloaded tab: its run and tolerances (parity.dashboard.keep)
        open_initial_run()  # ?run=PATH opens a saved run (no torch, no model needed)
        keep.remember()  # what the last script run made (a Run ends with st.rerun)
    pages = {
        url: st.Page(path, title=title, icon=icon, url_path=url, default=(url == "run"))
        for path, title, icon, url in listed_pages()
    }
    page = st.navigation(list(pages.values()), position="hidden" if host is not None else "sidebar")
    if host is not None:
        refuse(host)
    land_on_sweep(page is pages["run"], pages["sweep"])
    try:
        page.run()
    except Exception:  # a page's bug: Streamlit shows it; the sidebar still shows the run
        render_sidebar()
        raise
    render_sidebar()  # after the page, so a run started on this rerun shows at once
    if host is None:
        keep.remember()


def run_or_invite(
    *, raw: bool = False, hint: str = "Start one on the Run page."
) -> ValidationRun | None:
    """Every page's preamble, once: the current run (`raw`: before the Tolerances page's
    re-judge), or None after saying there is none yet and linking the Run page."""
    run = state.raw_run() if raw else state.current_run()
    if run is None:
        st.info(f"No run yet. {hint}")
        st.page_link(RUN, label="Go to Run", icon=":material/play_arrow:")
    return run
