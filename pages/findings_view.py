"""The run's findings (parity.show.findings) as the pages show them: the Run page's result
box and the Overview say the same list in the same words."""

from __future__ import annotations

import streamlit as st

from parity.dashboard.text import dashboard_words, md_text
from parity.results import ValidationRun
from parity.show.findings import run_findings


def findings_section(run: ValidationRun) -> None:
    """What is known about why it fails (a frozen size, where it starts to diverge, rounding
    or a bug), in the HTML report's words, before the numbers."""
    found = [dashboard_words(f.text) for f in run_findings(run)]  # widgets, not flags
    if found:
        st.markdown("**What we found**")
        st.markdown("\n".join(f"- {md_text(line)}" for line in found))
