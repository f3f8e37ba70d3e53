"""A browser tab's run and tolerances, kept across a reload.

Streamlit starts a new session when a tab reloads: its session state (the run just made, the
tolerances just tuned) is gone. Each tab that has a run gets a random token in its URL
(`?tab=...`); after every script run the tab's current run and tolerances are kept in this
process under that token (the last MAX_KEPT tabs), and a new session whose URL carries a kept
token starts with them. The token is random (secrets), so a URL nobody was given opens
nothing; a run opened from a file at start (`?run=PATH`, `parity dashboard ...`) does not
replace the kept one on a reload. The Run form shows the kept run's settings again, as it did
before the reload (a `?run=` link's run stays read-only until confirmed): Run makes that run
again, not the form's defaults (its data set too, from the config this dashboard made it
with: a run's own record does not give a data set again).
"""

from __future__ import annotations

import os
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import streamlit as st

from parity.dashboard import state
from parity.results import ValidationRun
from parity.tolerances import Tolerances

KEEP_PARAM = "tab"
MAX_KEPT = 8  # tabs whose run is kept (each holds its run's arrays)
_LOCK = threading.Lock()


@dataclass(frozen=True)
class KeptTab:
    """What a tab gets back on a reload."""

    run: ValidationRun
    tolerances: Tolerances
    linked: bool  # opened by a ?run= link and not yet confirmed: the form is left alone
    config: Any  # the RunConfig this dashboard made the run with, else None


@st.cache_resource
def _kept() -> OrderedDict[str, KeptTab]:
    """token -> its KeptTab, oldest first: one store for the process."""
    return OrderedDict()


def restore() -> None:
    """At a session's first script run: the run and tolerances its URL's token kept."""
    if state.get(state.TAB_RESTORED):
        return
    state.put(state.TAB_RESTORED, True)
    token = st.query_params.get(KEEP_PARAM)
    if not token or state.raw_run() is not None:
        return
    with _LOCK:
        kept = _kept().get(token)
    if kept is None:
        return
    state.set_run(kept.run)
    state.set_tolerances(kept.tolerances)
    state.put(state.TAB_TOKEN, token)
    if kept.linked:
        state.put(state.LINKED_RUN, kept.run)
    else:
        from parity.dashboard.run_form import fill_from_run

        fill_from_run(kept.run, kept.config)
        if kept.config is not None:
            state.set_run_config(kept.run, kept.config)
    from parity.launch import RUN_ENV

    opened = st.query_params.get("run") or os.environ.get(RUN_ENV)
    if opened:  # the run opened at start was this tab's first; the kept one is its latest
        state.put(state.SAVED_OPENED, opened)


def remember() -> None:
    """The tab's current run and tolerances kept under its token (put in the URL)."""
    run = state.raw_run()
    if run is None:
        return
    token = state.get(state.TAB_TOKEN)
    if not token:
        token = secrets.token_urlsafe(12)
        state.put(state.TAB_TOKEN, token)
    if st.query_params.get(KEEP_PARAM) != token:
        st.query_params[KEEP_PARAM] = token
    with _LOCK:
        kept = _kept()
        linked = state.get(state.LINKED_RUN) is run
        kept[token] = KeptTab(run, state.tolerances(), linked, state.run_config_of(run))
        kept.move_to_end(token)
        while len(kept) > MAX_KEPT:
            kept.popitem(last=False)
