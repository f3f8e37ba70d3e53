"""The dashboard (`parity.dashboard`): the frame, its pages and their helpers.

Installed, Streamlit runs `main.py` here (`parity dashboard`), which has no `pages/` folder
beside it. In a checkout, `streamlit run app.py` has this folder beside app.py, which puts
Streamlit in its old multipage mode until st.navigation is first called in the process: a URL
such as /run would then run run.py on its own, skipping the frame's Host check. Every page
imports this package before it draws, so when that happens this switches the mode off (what
st.navigation does on its first call) and reruns: the frame then runs, checks and routes.
"""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import get_script_run_ctx

if getattr(PagesManager, "uses_pages_directory", False) and get_script_run_ctx() is not None:
    PagesManager.uses_pages_directory = False
    st.rerun()
