"""The dashboard under attack, in real Chromium: a rebinding host name, markup in names.

Chromium's --host-resolver-rules maps made-up names to 127.0.0.1, which is what DNS
rebinding achieves: a page under a foreign name talking to the local dashboard.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from browser import launch, serve_app
from payloads import FAILING, IMAGE, write_payload_models

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
RUN_TIMEOUT_MS = 180_000
RESOLVE = "--host-resolver-rules=MAP evil.example 127.0.0.1, MAP good.example 127.0.0.1"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[int, Path]]:
    """(port, demo cache folder): a server on a cold demo cache that allows good.example."""
    cache = tmp_path_factory.mktemp("demo-cache")
    env = {"PARITY_CACHE_DIR": str(cache), "PARITY_ALLOWED_HOSTS": " Good.Example ,"}
    with serve_app(ARTIFACTS / "streamlit-security.log", env=env) as url:
        yield urlparse(url).port, cache


@pytest.fixture(scope="module")
def browser():
    from playwright import sync_api

    with sync_api.sync_playwright() as pw:
        chromium = launch(pw, RESOLVE)
        yield chromium
        chromium.close()


def _nav(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
    page.get_by_role("heading", name=re.compile(title)).first.wait_for()
    _settle(page)


def _markup_from_names(page) -> list[str]:
    """<img> and <a> elements (HTML or SVG) that point where the payload names point."""
    return page.evaluate(
        """() => [...document.querySelectorAll('img, a, image')]
            .map(e => e.outerHTML)
            .filter(h => h.includes('127.0.0.1:9') || h.includes('javascript:'))"""
    )


def _settle(page) -> None:
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=RUN_TIMEOUT_MS)


def test_a_page_under_a_foreign_host_name_is_refused_and_runs_nothing(server, browser):
    """Every URL, as the server's first script runs (Streamlit's pages/-folder mode is on
    until st.navigation is first called: /run would otherwise run pages/run.py alone)."""
    port, cache = server
    context = browser.new_context(viewport={"width": 1200, "height": 700})
    page = context.new_page()
    stems = sorted(p.stem for p in (ROOT / "pages").glob("*.py") if p.stem != "__init__")
    for path in ["run", *stems, ""]:
        page.goto(f"http://evil.example:{port}/{path}?demo=cnn&run=/etc/passwd")
        page.get_by_text("does not serve this page").wait_for(timeout=60_000)
        _settle(page)
        body = page.locator("body").inner_text()
        assert "evil.example:" in body and "PARITY_ALLOWED_HOSTS" in body, path
        for drawn in ("Run a validation", "Run demo", "demo:cnn", "Saved runs", "Overview"):
            assert drawn not in body, (path, drawn)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "08-host-refused.png"))
    assert list(cache.iterdir()) == []  # no demo was exported, let alone run
    context.close()


def test_localhost_and_configured_names_are_served(server, browser):
    port, cache = server
    context = browser.new_context(viewport={"width": 1200, "height": 700})
    page = context.new_page()
    page.goto(f"http://good.example:{port}/")
    page.get_by_role("button", name="Run demo:cnn").wait_for(timeout=RUN_TIMEOUT_MS)
    page.get_by_text("symbolic dims").wait_for(timeout=RUN_TIMEOUT_MS)  # the demo's export
    _settle(page)
    page.goto(f"http://localhost:{port}/?demo=cnn")
    page.get_by_text(re.compile(r"demo:cnn: PASS in")).wait_for(timeout=RUN_TIMEOUT_MS)
    assert "does not serve this page" not in page.locator("body").inner_text()
    assert any(cache.iterdir())
    context.close()


def test_output_names_with_markup_render_as_text_on_every_page(server, browser, tmp_path):
    port, _ = server
    pt2, onnx = write_payload_models(tmp_path)
    context = browser.new_context(viewport={"width": 1500, "height": 2400})
    page = context.new_page()
    page.set_default_timeout(60_000)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto(f"http://localhost:{port}/")
    page.get_by_role("button", name="Run demo:cnn").wait_for(timeout=RUN_TIMEOUT_MS)
    _settle(page)
    radio = page.locator('[data-testid="stRadio"]')
    radio.filter(has_text="PyTorch model").get_by_text("Path on this machine").click()
    page.get_by_role("textbox", name="Model", exact=True).fill(str(pt2))
    page.keyboard.press("Enter")
    _settle(page)
    radio.filter(has_text="ONNX file").get_by_text("Path on this machine").click()
    page.get_by_role("textbox", name="ONNX path").fill(str(onnx))
    page.keyboard.press("Enter")
    page.get_by_text("ONNX signature").wait_for()
    _settle(page)
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Failing outputs:").wait_for(timeout=RUN_TIMEOUT_MS)
    _settle(page)
    line = page.get_by_text("Failing outputs:").inner_text()
    assert line == "Failing outputs: " + ", ".join(sorted(FAILING))  # the names, as text
    assert _markup_from_names(page) == []
    page.screenshot(path=str(ARTIFACTS / "09-names-as-text-run.png"))
    for title in ("Overview", "Inspect", "Tolerances"):
        _nav(page, title)
        page.locator(".js-plotly-plot").first.wait_for()
        assert _markup_from_names(page) == [], title
        assert IMAGE in page.locator("body").inner_text() or title == "Tolerances", title
    page.screenshot(path=str(ARTIFACTS / "10-names-as-text-tolerances.png"))
    assert [url for url in fetched if "127.0.0.1:9" in url] == []
    context.close()
