"""Launching Debian's Chromium for the browser tests (Playwright cannot download one here).

A missing Chromium fails the test with the install command, rather than skipping it: CI
installs it (.ci/run), so a skip would only hide a missing install step. Set
PARITY_SKIP_BROWSER=1 to skip on purpose.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


def launch(playwright):
    """A headless Chromium browser from a running sync_playwright()."""
    require_chromium()
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
