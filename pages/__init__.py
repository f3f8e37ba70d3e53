"""The dashboard's pages and their helpers; app.py is the one entry point and runs first.

A `pages/` folder beside app.py puts Streamlit in its old multipage mode until st.navigation
is first called in the process: a URL such as /run would then run pages/run.py on its own,
skipping app.py's Host check. Every page file imports this package before it draws, so
when that happens this switches the mode off and reruns: app.py then runs, checks and routes.
"""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import get_script_run_ctx

if PagesManager.uses_pages_directory and get_script_run_ctx() is not None:
    PagesManager.uses_pages_directory = False  # what st.navigation does on its first call
    st.rerun()
