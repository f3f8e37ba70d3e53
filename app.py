"""Parity dashboard: `streamlit run app.py`.

`?demo=broken` in the URL runs a demo; `?run=FILE` opens a saved run (no torch needed);
`?sweep=DIR` opens a `parity sweep` folder on the Sweep page.

The frame only: page routing and the shared sidebar. Each page lives in `pages/` and reads
the current run from the session; all the work is done by `core/`.
"""

from __future__ import annotations

import streamlit as st

from pages.access import foreign_host, refuse
from pages.saved_runs import open_initial_run
from pages.sidebar import render_sidebar

PAGES = (
    ("pages/run.py", "Run", ":material/play_arrow:", "run"),
    ("pages/overview.py", "Overview", ":material/table_chart:", "overview"),
    ("pages/inspect_page.py", "Inspect", ":material/grid_on:", "inspect"),
    ("pages/layers.py", "Layers", ":material/account_tree:", "layers"),
    ("pages/tolerances.py", "Tolerances", ":material/tune:", "tolerances"),
    ("pages/sweep.py", "Sweep", ":material/view_list:", "sweep"),
)


def main() -> None:
    st.set_page_config(page_title="Parity", page_icon=":material/compare:", layout="wide")
    first = "sweep" if st.query_params.get("sweep") else "run"  # ?sweep=DIR opens that page
    pages = [
        st.Page(path, title=title, icon=icon, url_path=url, default=(url == first))
        for path, title, icon, url in PAGES
    ]
    host = foreign_host()  # DNS rebinding: checked before anything runs (pages/access.py)
    page = st.navigation(pages, position="hidden" if host is not None else "sidebar")
    if host is not None:
        refuse(host)
    open_initial_run()  # ?run=PATH opens a saved run (no torch, no model needed)
    page.run()
    render_sidebar()  # after the page, so a run started on this rerun shows at once


main()
