"""`parity dashboard --model demo:broken`, then in Chromium: the Run form shows demo:broken (the
run on screen), ticking Compare layers and pressing Run makes demo:broken again with its
layers, and the Layers page names the `Pad` node where the export starts to diverge; on a
fresh session the Layers page's "Compare layers for this run" does it in one click.

The dashboard is started as a user starts it (`python -m parity dashboard`, the launcher
validating first and handing its run to Streamlit), from this checkout. Screenshots:
test-artifacts/run-form-*.png.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.helpers.browser import ARTIFACTS, ROOT, RUN_TIMEOUT_MS, free_port, nav, serving, settle

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1400, "height": 2000}


@pytest.fixture(scope="module")
def launched() -> Iterator[str]:
    """`python -m parity dashboard --model demo:broken --port P` until the module ends."""
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "run-form-launcher.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "parity", "dashboard", "--model", "demo:broken",
             "--port", str(port)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            url = f"http://localhost:{port}"
            if not serving(url, proc, within_s=600):  # it validates before serving
                pytest.fail(f"parity dashboard did not start:\n{log.read_text()[-3000:]}")
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _open(chromium, url: str, *, timeout_ms: int = RUN_TIMEOUT_MS):
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    page.goto(url)
    page.get_by_text(re.compile(r"\bmask fails\b")).first.wait_for()  # the launcher's run
    settle(page)
    return context, page


def _layers_name_pad(page) -> str:
    nav(page, "Layers")
    page.get_by_text("Values in graph order").first.wait_for()
    settle(page)
    body = page.locator("body").inner_text()
    assert re.search(r"\bPad\b", body), body[:3000]
    return body


def test_run_remakes_the_launchers_run_with_layers_and_the_layers_page_names_pad(
    chromium, launched
):
    context, page = _open(chromium, launched)
    try:
        opened = page.get_by_text(re.compile(r"Opened demo:broken"))
        opened.wait_for()
        sidebar = opened.inner_text()
        assert "Opened demo:broken with its own export, FAIL." in sidebar, sidebar
        assert "parity-dashboard-" not in sidebar and "run.parity.npz" not in sidebar
        form = page.locator('[data-testid="stMain"]')
        page.screenshot(path=str(ARTIFACTS / "run-form-opened.png"), full_page=True)
        demo = form.locator('[data-testid="stSelectbox"]').filter(has_text="Demo").first
        demo.locator("input").first.wait_for(state="attached")  # its code loads lazily
        values = demo.locator("input").evaluate_all("els => els.map(e => e.value)")
        chosen = (demo.text_content() or "") + " ".join(values)
        assert "broken" in chosen and "cnn" not in chosen, chosen  # the run on screen
        form.get_by_text("Compare layers: find the op").click()
        settle(page)
        page.get_by_role("button", name="Run", exact=True).click()
        settle(page)  # the run ends with a rerun that draws its result
        page.get_by_text(re.compile(r"Opened demo:broken")).wait_for(state="detached")
        body = _layers_name_pad(page)
        assert "demo:cnn" not in body
        page.screenshot(path=str(ARTIFACTS / "run-form-layers.png"), full_page=True)
    finally:
        page.screenshot(path=str(ARTIFACTS / "run-form-last.png"), full_page=True)
        context.close()


def test_the_layers_page_compares_layers_of_the_launchers_run_in_one_click(chromium, launched):
    context, page = _open(chromium, launched)
    try:
        nav(page, "Layers")
        page.get_by_role("button", name="Compare layers for this run").click()
        # the run ends with a rerun that draws the page on its layers (its status goes)
        page.get_by_text("Values in graph order").first.wait_for(timeout=RUN_TIMEOUT_MS)
        settle(page)
        body = page.locator("body").inner_text()
        assert re.search(r"\bPad\b", body), body[:3000]
    finally:
        context.close()
