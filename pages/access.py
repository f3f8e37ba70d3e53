"""Who the dashboard serves and what it trusts: the Host check and `--trust-code`.

Binding to localhost does not keep other web pages out: DNS rebinding lets a page the user
opens reach the dashboard under the page's own host name, which the browser then sends as
Host. So every script run checks the Host the page is served under (localhost names, or the
names in PARITY_ALLOWED_HOSTS) and stops before any page code when it is another.
TorchScript and Python factories are code: the dashboard loads them only when started with
`parity dashboard --trust-code` (from a checkout: `streamlit run app.py -- --trust-code`);
everyone who can reach it can then run code here.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection

import streamlit as st

from parity.dashboard.text import md_code
from parity.launch import HOSTS_ENV

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
TRUST_FLAG = "--trust-code"
_HOST_RE = re.compile(r"^(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]/\s]+))(?::\d{1,5})?$", re.I)


def host_name(host: str) -> str | None:
    """The name in a Host header ('Name:8501' -> 'name', '[::1]:8501' -> '::1'), or None."""
    match = _HOST_RE.match(host.strip())
    return None if match is None else (match["v6"] or match["name"]).lower()


def allowed_hosts(setting: str | None = None) -> frozenset[str]:
    """Localhost names plus the comma-separated names of PARITY_ALLOWED_HOSTS (or `setting`)."""
    setting = os.environ.get(HOSTS_ENV, "") if setting is None else setting
    names = {name.strip().lower().strip("[]") for name in setting.split(",")}
    return LOCAL_HOSTS | {name for name in names if name}


def host_allowed(host: str | None, allowed: Collection[str]) -> bool:
    name = host_name(host) if host else None
    return name is not None and name in allowed


def foreign_host() -> str | None:
    """The Host this page is served under when it is not allowed ('' when none was sent)."""
    headers = st.context.headers
    if not headers:  # no browser behind this run (AppTest, a bare script): no Host to check
        return None
    host = headers.get("host")
    return None if host_allowed(host, allowed_hosts()) else (host or "")


def refuse(host: str) -> None:
    """One line saying why, then stop the script run before any page code."""
    st.error(
        f"Parity does not serve this page under the host name {md_code(host or '(none)')}: "
        f"open it as `http://localhost:PORT/`, or add the name to {HOSTS_ENV}.",
        icon=":material/block:",
    )
    st.stop()


def may_run(spec: str | None) -> bool:
    """Whether this dashboard runs `spec` when it is code (a TorchScript archive, a
    FILE.py:CALLABLE or module:CALLABLE factory): started with --trust-code, or the very spec
    the command line validated (`parity dashboard --model SPEC`: the user typed it)."""
    import os

    from parity.launch import COMMAND_MODEL_ENV

    return trust_code() or (bool(spec) and spec == os.environ.get(COMMAND_MODEL_ENV))


def command_run(path: str | None) -> bool:
    """The saved run at `path` is the launcher's own copy of the run its command validated."""
    import os

    from parity.launch import RUN_ENV, RUN_SCRATCH_ENV

    own = os.environ.get(RUN_ENV)
    return bool(path and own and os.environ.get(RUN_SCRATCH_ENV) and path == own)


def trust_code() -> bool:
    """True when the app was started with `parity dashboard --trust-code` (which passes the
    flag to the script) or `streamlit run app.py -- --trust-code`."""
    return TRUST_FLAG in sys.argv[1:]
