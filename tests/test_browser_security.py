"""The dashboard under attack, in real Chromium: a rebinding host name, markup in names.

The session's Chromium maps made-up names to 127.0.0.1 (--host-resolver-rules, see
tests.helpers.browser.HOST_RULES), which is what DNS rebinding achieves: a page under a foreign name
talking to the local dashboard. The servers here are the module's own: a cold demo cache,
allowed host names, a private temp folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from parity.dashboard.routes import PAGES
from tests.helpers.browser import ARTIFACTS, RUN_TIMEOUT_MS, nav, serve_app, settle, settle_loaded
from tests.helpers.payloads import FAILING, IMAGE, write_payload_models

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # slow: a minute of pages, first of its group

ROOT = Path(__file__).resolve().parents[1]
PAUSE_MS = 1000
"""settle()'s pause here: long enough for the running indicator to show, under load."""


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[int, Path]]:
    """(port, demo cache folder): a server on a cold demo cache that allows good.example."""
    cache = tmp_path_factory.mktemp("demo-cache")
    env = {"PARITY_CACHE_DIR": str(cache), "PARITY_ALLOWED_HOSTS": " Good.Example ,"}
    with serve_app(ARTIFACTS / "streamlit-security.log", env=env) as url:
        yield urlparse(url).port, cache


def _markup_from_names(page) -> list[str]:
    """<img> and <a> elements (HTML or SVG) that point where the payload names point."""
    return page.evaluate(
        """() => [...document.querySelectorAll('img, a, image')]
            .map(e => e.outerHTML)
            .filter(h => h.includes('127.0.0.1:9') || h.includes('javascript:'))"""
    )


def test_a_page_under_a_foreign_host_name_is_refused_and_runs_nothing(server, chromium):
    """Every kind of URL. The first is the server's first script, which Streamlit routes in
    its pages/-folder mode (on until st.navigation is first called: /run would otherwise run
    pages/run.py alone); after it every path goes through st.navigation, so each page's
    URL, the root, and modules of pages/ that are not pages (unknown paths) stand for all."""
    port, cache = server
    context = chromium.new_context(viewport={"width": 1200, "height": 700})
    page = context.new_page()
    urls = [url for _, _, _, url in PAGES]
    stems = sorted(p.stem for p in (ROOT / "pages").glob("*.py") if p.stem != "__init__")
    not_pages = [stem for stem in stems if stem not in urls]
    assert "run" in urls and {"frame", "access"} <= set(not_pages)
    for path in ["run", *urls, "frame", "access", "no-such-page", ""]:
        page.goto(f"http://evil.example:{port}/{path}?demo=cnn&run=/etc/passwd")
        page.get_by_text("does not serve this page").wait_for(timeout=60_000)
        settle_loaded(page)
        body = page.locator("body").inner_text()
        assert "evil.example:" in body and "PARITY_ALLOWED_HOSTS" in body, path
        for drawn in ("Run a validation", "Run demo", "demo:cnn", "Saved runs", "Overview"):
            assert drawn not in body, (path, drawn)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "08-host-refused.png"))
    assert list(cache.iterdir()) == []  # no demo was exported, let alone run
    context.close()


def test_localhost_and_configured_names_are_served(server, chromium):
    port, cache = server
    context = chromium.new_context(viewport={"width": 1200, "height": 700})
    page = context.new_page()
    page.goto(f"http://good.example:{port}/")
    page.get_by_role("button", name="Run demo:cnn").wait_for(timeout=RUN_TIMEOUT_MS)
    # the demo's export is read and its signature shown
    page.get_by_text("Sizes of the symbolic dims").wait_for(timeout=RUN_TIMEOUT_MS)
    settle(page, PAUSE_MS)
    page.goto(f"http://localhost:{port}/?demo=cnn")
    page.get_by_text(re.compile(r"demo:cnn: PASS in")).wait_for(timeout=RUN_TIMEOUT_MS)
    assert "does not serve this page" not in page.locator("body").inner_text()
    assert any(cache.iterdir())
    context.close()


def test_output_names_with_markup_render_as_text_on_every_page(server, chromium, tmp_path):
    port, _ = server
    pt2, onnx = write_payload_models(tmp_path)
    context = chromium.new_context(viewport={"width": 1500, "height": 2400})
    page = context.new_page()
    page.set_default_timeout(60_000)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto(f"http://localhost:{port}/")
    page.get_by_role("button", name="Run demo:cnn").wait_for(timeout=RUN_TIMEOUT_MS)
    settle(page, PAUSE_MS)
    radio = page.locator('[data-testid="stRadio"]')
    radio.filter(has_text="PyTorch model").get_by_text("Path on this machine").click()
    page.get_by_text("The demo's export").wait_for(state="detached")  # its ONNX radio is gone
    page.get_by_role("textbox", name="Model", exact=True).fill(str(pt2))
    page.keyboard.press("Enter")
    settle(page, PAUSE_MS)
    radio.filter(has_text="ONNX file").get_by_text("Path on this machine").click()
    page.get_by_role("textbox", name="ONNX path").fill(str(onnx))
    page.keyboard.press("Enter")
    page.get_by_text("ONNX signature").wait_for()
    settle(page, PAUSE_MS)
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Failing outputs, worst first:").wait_for(timeout=RUN_TIMEOUT_MS)
    settle(page, PAUSE_MS)
    shown = page.locator("body").inner_text().replace("\u2060", "")  # md_text's joiners
    for name in FAILING:  # one sentence each, leading with the name as text
        assert f"{name} fails" in shown, name
    assert _markup_from_names(page) == []
    page.screenshot(path=str(ARTIFACTS / "09-names-as-text-run.png"))
    for title in ("Overview", "Inspect", "Tolerances"):
        nav(page, title)
        page.locator(".js-plotly-plot >> visible=true").first.wait_for()  # not a folded one
        assert _markup_from_names(page) == [], title
        assert IMAGE in page.locator("body").inner_text() or title == "Tolerances", title
    page.screenshot(path=str(ARTIFACTS / "10-names-as-text-tolerances.png"))
    assert [url for url in fetched if "127.0.0.1:9" in url] == []
    context.close()


def _upload_onnx(page, path: Path) -> None:
    radio = page.locator('[data-testid="stRadio"]').filter(has_text="ONNX file")
    radio.get_by_text("Upload").click()
    uploader = page.locator('[data-testid="stFileUploader"]').filter(has_text="ONNX file")
    uploader.locator('input[type="file"]').set_input_files(path)
    page.get_by_text("ONNX signature").wait_for()
    settle(page, PAUSE_MS)


def _eventually(condition, timeout: float = 30.0) -> None:
    """Poll a file-system condition the server reaches after the page settled."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the server"
        time.sleep(0.25)


def _session_folders(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("parity-uploads-*"))


def test_uploads_are_private_per_session_written_once_and_removed_with_it(chromium, tmp_path):
    import hashlib

    _, onnx = write_payload_models(tmp_path / "models")
    data = onnx.read_bytes()
    server_tmp = tmp_path / "server-tmp"
    server_tmp.mkdir()
    # What another local user could plant where uploads used to go (predictable path)
    planted = server_tmp / "parity-uploads" / hashlib.sha256(data).hexdigest()[:24]
    planted.mkdir(parents=True)
    (planted / onnx.name).write_bytes(b"planted, not an ONNX file")
    env = {"TMPDIR": str(server_tmp)}
    with serve_app(ARTIFACTS / "streamlit-uploads.log", env=env) as url:
        a = chromium.new_context().new_page()
        a.set_default_timeout(60_000)
        a.goto(url)
        a.get_by_role("button", name="Run demo:cnn").wait_for(timeout=RUN_TIMEOUT_MS)
        settle(a, PAUSE_MS)
        assert _session_folders(server_tmp) == []  # made on the first upload only
        _upload_onnx(a, onnx)
        assert "Cannot read this ONNX file" not in a.locator("body").inner_text()
        _eventually(lambda: len(list(server_tmp.glob("parity-uploads-*/*/payload.onnx"))) == 1)
        (folder,) = _session_folders(server_tmp)
        (stored,) = folder.glob("*/*")
        assert stored.name == onnx.name and stored.read_bytes() == data
        for private in (folder, stored.parent):
            assert private.stat().st_mode & 0o777 == 0o700
        assert (planted / onnx.name).read_bytes() == b"planted, not an ONNX file"
        written = stored.stat().st_mtime_ns, stored.stat().st_ino

        seed = a.get_by_role("spinbutton", name="Seed")  # any widget change: a rerun
        seed.fill("7")
        seed.press("Enter")
        settle(a, PAUSE_MS)
        assert (stored.stat().st_mtime_ns, stored.stat().st_ino) == written  # not rewritten

        b = chromium.new_context().new_page()
        b.set_default_timeout(60_000)
        b.goto(url)
        b.get_by_role("button", name="Run demo:cnn").wait_for(timeout=RUN_TIMEOUT_MS)
        settle(b, PAUSE_MS)
        _upload_onnx(b, onnx)  # the same bytes in another session: its own folder
        assert len(_session_folders(server_tmp)) == 2

        other = tmp_path / "other.onnx"
        other.write_bytes(data)
        uploader = a.locator('[data-testid="stFileUploader"]').filter(has_text="ONNX file")
        uploader.get_by_role("button", name=f"Remove {onnx.name}").click()  # files add up
        settle(a, PAUSE_MS)
        uploader.locator('input[type="file"]').set_input_files(other)
        uploader.get_by_text("other.onnx").wait_for()
        settle(a, PAUSE_MS)
        _eventually(lambda: [p.name for p in folder.glob("*/*")] == ["other.onnx"])
        assert not stored.parent.exists()  # a replaced upload is removed

        # Session A ends: its folder goes when it disconnects (a session-scoped cache's
        # release), not when a garbage collection or the disconnected-session TTL comes.
        a.context.close()
        _eventually(lambda: not folder.exists(), timeout=10.0)
        assert len(_session_folders(server_tmp)) == 1  # B's, until B ends or the app exits
        b.context.close()
    assert _session_folders(server_tmp) == []  # removed at exit too
