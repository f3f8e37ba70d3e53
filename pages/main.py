"""The script `parity dashboard` hands to Streamlit: the packaged dashboard's frame.

Served, this file is first imported to make the server (`app`, an st.App whose every response
says it may not be framed: parity.dashboard.no_framing); each session then runs it.
"""

from streamlit.runtime.scriptrunner import get_script_run_ctx

if get_script_run_ctx(suppress_warning=True) is None:  # the server being made (finds `app`)
    from streamlit.starlette import App

    from parity.dashboard.no_framing import middleware

    app = App(__file__, middleware=middleware())
else:  # a session's run
    from parity.dashboard.frame import main

    main()
