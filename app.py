"""Parity dashboard from a checkout: `streamlit run app.py` (installed: `parity dashboard`).

The frame and the pages are the package `parity.dashboard` (the folder pages/). Served, this
file is first imported to make the server (`app`, an st.App whose every response says it may
not be framed: parity.dashboard.no_framing); each session then runs it as the script.
"""

from streamlit.runtime.scriptrunner import get_script_run_ctx

if get_script_run_ctx(suppress_warning=True) is None:  # the server being made (finds `app`)
    from streamlit.starlette import App

    from parity.dashboard.no_framing import middleware

    app = App(__file__, middleware=middleware())
else:  # a session's run
    from parity.dashboard.frame import main

    main()
