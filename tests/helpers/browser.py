"""The browser tests' one set of helpers: Debian's Chromium (Playwright cannot download one
here), a `streamlit run app.py` server, and the moves every browser test makes on the app
(settle, nav, run_demo, shot).

One Chromium and one plain server serve the whole session (the `chromium` and `app_url`
fixtures in tests/conftest.py); each test module opens its own browser context, which is its
own Streamlit session. Servers that need their own environment (a cold demo cache, allowed
host names, a temp folder) still start one with serve_app.

A missing Chromium fails the test with the install command, rather than skipping it: CI
installs it (.ci/run), so a skip would only hide a missing install step. Set
PARITY_SKIP_BROWSER=1 to skip on purpose.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
"""Screenshots and server logs of the browser tests: look at them."""
RUN_TIMEOUT_MS = 180_000
"""How long a run or a rerun may take on a loaded 2-core machine."""
HOST_RULES = "--host-resolver-rules=MAP evil.example 127.0.0.1, MAP good.example 127.0.0.1"
"""Made-up names that resolve to this machine, as DNS rebinding makes them
(tests/test_browser_security.py); the session's Chromium is launched with them."""

CHROMIUM = os.environ.get("PARITY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    if os.environ.get("PARITY_SKIP_BROWSER"):
        pytest.skip(f"no Chromium at {CHROMIUM} (PARITY_SKIP_BROWSER set)")
    pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")


def launch(playwright, *extra_args: str):
    """A headless Chromium browser from a running sync_playwright(), with more flags if given."""
    require_chromium()
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving(url: str, proc: subprocess.Popen, *, within_s: float) -> bool:
    """Whether the Streamlit server at `url` answers its health check within `within_s`;
    False as soon as `proc` (the process serving it) has ended."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.3)


@contextmanager
def serve_app(
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    script_args: Sequence[str] = (),
    server_args: Sequence[str] = (),
) -> Iterator[str]:
    """`streamlit run app.py` on a free localhost port until the block ends; yields its URL.

    `env` is added to this process's environment; `script_args` go after `--` (the app's
    own flags, e.g. --trust-code).
    """
    port = free_port()
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py",
        "--server.port", str(port), "--server.headless", "true",
        "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",  # no test edits the app's files: save the CPU
        *server_args,
    ]  # fmt: skip
    if script_args:
        cmd += ["--", *script_args]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        try:
            url = f"http://127.0.0.1:{port}"
            if not serving(url, proc, within_s=60):
                pytest.fail(f"streamlit did not start; see {log}")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def settle(page, pause_ms: int = 300) -> None:
    """Wait until Streamlit is not running a script (its status widget is hidden) and has
    dropped what the last run did not draw again.

    The pause first lets a rerun that was just started show its status widget."""
    page.wait_for_timeout(pause_ms)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=RUN_TIMEOUT_MS)
    # elements of the previous run that this run has not drawn again yet are still shown,
    # marked stale: a locator may find them beside the new ones until they go
    _no_stale(page)


def _no_stale(page) -> None:
    """Wait until no element of a previous run that this run has not drawn again is shown."""
    page.wait_for_function(
        "() => !document.querySelector('[data-stale=\"true\"]')", timeout=RUN_TIMEOUT_MS
    )


def settle_loaded(page) -> None:
    """After a goto: wait until the new session's first run has ended (the app's script
    state goes from "initial" through "running" to "notRunning") and nothing stale is left.
    No pause is needed, unlike settle() after a click: a fresh page starts in "initial"."""
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(
        state="attached", timeout=RUN_TIMEOUT_MS
    )
    _no_stale(page)


def nav(page, title: str) -> None:
    """Open a page from the sidebar and wait for its title (the page's h1) and its run."""
    page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
    page.locator("h1", has_text=re.compile(title)).first.wait_for()
    settle(page)


def run_demo(page, name: str) -> None:
    """Run demo:NAME from the Run page's demo cards and wait for its verdict."""
    from playwright import sync_api

    nav(page, "Run")
    button = page.get_by_role("button", name=f"Run demo:{name}")
    # after the first run the demo cards move below the verdict: wait for the old ones to go
    sync_api.expect(button).to_have_count(1, timeout=RUN_TIMEOUT_MS)
    button.click()
    page.get_by_text(re.compile(rf"demo:{name}: (PASS|FAIL) in")).wait_for(timeout=RUN_TIMEOUT_MS)
    settle(page)


def shot(page, name: str, *, locator=None, full_page: bool = True) -> Path:
    """A screenshot, test-artifacts/NAME.png, once the page settled (scrolled to `locator`
    first if given). Streamlit scrolls inside its own container, so a full-page screenshot
    is the viewport: a tall viewport shows a page whole."""
    settle(page)
    if locator is not None:
        locator.scroll_into_view_if_needed()
        page.wait_for_timeout(600)
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def open_page(chromium, url: str, *, timeout_ms: int = 60_000, **context_args):
    """A new browser context (a new Streamlit session) with one page on `url`."""
    context = chromium.new_context(**context_args)
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    page.goto(url)
    return page
