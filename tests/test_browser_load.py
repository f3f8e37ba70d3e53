"""Three browser sessions on a cold demo cache at once, in real Chromium: the exports queue
behind one lock and each session shows its own demo's verdict (its own server and cache).

Kept apart from tests/test_browser_security.py so that the suite's workers can run the two
long modules side by side.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.browser import ARTIFACTS, serve_app, settle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PAUSE_MS = 1000
"""settle()'s pause here: long enough for the running indicator to show, under load."""

LOAD_TIMEOUT_MS = 600_000  # a shared 2-core machine: five sessions' exports queue up
LOAD_SESSIONS = {  # demo -> the verdict it must show; repeated demos share one export
    "cnn": "PASS",
    "broken": "FAIL",
}


def test_concurrent_sessions_on_a_cold_cache_each_get_their_own_demo_verdict(chromium, tmp_path):
    """Three browser sessions open demos at once on a cold demo cache (every export starts
    together, two of them of the same demo): none fails, and each shows the verdict of its
    own demo. (Every demo's export and verdict: tests/test_demos.py.)"""
    demos = [*LOAD_SESSIONS, "broken"]
    env = {"PARITY_CACHE_DIR": str(tmp_path / "cold-cache"), "PARITY_DEMO_SHIPPED": "0"}
    with serve_app(ARTIFACTS / "streamlit-load.log", env=env) as url:
        pages = []
        for demo in demos:
            page = chromium.new_context(viewport={"width": 1400, "height": 1600}).new_page()
            page.goto(f"{url}/?demo={demo}")  # returns once loaded; the runs overlap
            pages.append(page)
        for demo, page in zip(demos, pages, strict=True):
            verdict = LOAD_SESSIONS[demo]
            done = page.get_by_text(re.compile(rf"(demo:{demo}: (PASS|FAIL) in)|Run failed"))
            done.first.wait_for(timeout=LOAD_TIMEOUT_MS)
            settle(page, PAUSE_MS)
            body = page.locator("body").inner_text()
            assert f"demo:{demo}: {verdict} in" in body, (demo, body[:2000])
            assert "Run failed" not in body and "Traceback" not in body, demo
            # the sidebar is drawn after the page: wait for it to name this session's run
            page.wait_for_function(
                """want => document.querySelector('[data-testid="stSidebar"]').innerText
                    .split(/\\s+/).join(' ').includes(want)""",
                arg=f"model demo:{demo}",
                timeout=LOAD_TIMEOUT_MS,
            )
            sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
            sidebar = " ".join(sidebar.split())
            assert f"model demo:{demo}" in sidebar, (demo, sidebar[:600])
            for other in set(LOAD_SESSIONS) - {demo}:
                assert f"demo:{other}:" not in body, (demo, other)
        pages[0].screenshot(path=str(ARTIFACTS / "11-load-session-cnn.png"))
        for page in pages:
            page.context.close()
    log = (ARTIFACTS / "streamlit-load.log").read_text()
    assert "Traceback" not in log and "export failed" not in log
