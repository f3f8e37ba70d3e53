"""Launching Debian's Chromium for the browser tests (Playwright cannot download one here).

A missing Chromium fails the test with the install command, rather than skipping it: CI
installs it (.ci/run), so a skip would only hide a missing install step. Set
PARITY_SKIP_BROWSER=1 to skip on purpose.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

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
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"streamlit did not start; see {log}")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
