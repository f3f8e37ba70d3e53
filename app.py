"""Parity dashboard from a checkout: `streamlit run app.py` (installed: `parity dashboard`).

The frame and the pages are the package `parity.dashboard` (the folder pages/). Served, this
file is imported to make the server (`app`, an st.App whose every response says it may not
be framed: parity.dashboard.no_framing), whose sessions run pages/main.py; run as a script
(AppTest) it draws the frame itself.
"""

from streamlit.runtime.scriptrunner import get_script_run_ctx

if get_script_run_ctx(suppress_warning=True) is None:  # the server being made (finds `app`)
    from pathlib import Path

    from streamlit.starlette import App

    from parity.dashboard.no_framing import middleware

    # the sessions run the package's main.py: no pages/ folder beside it (beside this file
    # one would put Streamlit in its pages-folder mode, /run running run.py alone)
    main_script = Path(__file__).resolve().parent / "pages" / "main.py"
    app = App(main_script, middleware=middleware())
else:  # a session's run
    from parity.dashboard.frame import main

    main()
