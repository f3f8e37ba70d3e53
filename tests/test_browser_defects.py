"""Issue 23's dashboard defects, in real Chromium: what the user sees and can copy.

- `/sweep?sweep=DIR` opens the Sweep page at that address, with no "Page not found" dialog
  (Streamlit's own reply when an address names no page);
- an upload's error keeps the file name as given (`symlink.zip`, not `Symlink.zip`);
- the refusal of a code-bearing model names a command one can paste (`--`, not an em dash).
"""

from __future__ import annotations

import stat
import urllib.parse
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, RUN_TIMEOUT_MS, serve_app, settle

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # slow: a minute of pages, first of its group


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A fresh server (its first request is this module's): Streamlit routes a server's
    first script differently (its pages/-folder mode is on until st.navigation is called)."""
    with serve_app(ARTIFACTS / "streamlit-defects.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser(chromium):
    """The session's one Chromium (a second sync_playwright cannot start beside it)."""
    return chromium


def _settle(page) -> None:
    settle(page, 1000)


def _not_found_dialogs(page) -> int:
    return page.get_by_text("Page not found").count()


@pytest.mark.parametrize("path", ["sweep", ""])
def test_a_sweep_url_opens_the_sweep_page_without_a_page_not_found(path, server, browser, tmp_path):
    page = browser.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{server}/{path}?sweep={urllib.parse.quote(str(tmp_path / 'no-sweep'))}")
    page.get_by_role("heading", name="Sweep", exact=True).wait_for()
    _settle(page)
    page.get_by_text("Could not open that sweep folder.").wait_for()  # it tried that folder
    assert _not_found_dialogs(page) == 0
    # Streamlit routed /sweep to no page (the Sweep page was the default, served at /) and
    # rewrote the address to /?sweep=...: the address now names the page shown
    assert urllib.parse.urlparse(page.url).path == "/sweep", page.url
    page.close()


def _zip_with_symlink(path: Path) -> Path:
    link = zipfile.ZipInfo("model.onnx")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(link, "/etc/passwd")
    return path


def _run_page(server: str, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2000})
    page.set_default_timeout(60_000)
    page.goto(f"{server}/")
    page.get_by_role("button", name="Run demo:cnn").wait_for(timeout=RUN_TIMEOUT_MS)
    _settle(page)
    return page


def test_an_upload_error_keeps_the_file_name_as_given(server, browser, tmp_path):
    page = _run_page(server, browser)
    radio = page.locator('[data-testid="stRadio"]')
    radio.filter(has_text="PyTorch model").get_by_text("Path on this machine").click()
    page.get_by_text("The demo's export").wait_for(state="detached")
    radio.filter(has_text="ONNX file").get_by_text("Upload").click()
    uploader = page.locator('[data-testid="stFileUploader"]').filter(has_text="ONNX file")
    uploader.locator('input[type="file"]').set_input_files(
        _zip_with_symlink(tmp_path / "symlink.zip")
    )
    error = page.locator('[data-testid="stAlertContentError"]').filter(has_text="symbolic link")
    error.wait_for()
    shown = error.inner_text()
    assert "symlink.zip: member 'model.onnx' is a symbolic link" in shown, shown
    assert "Symlink.zip" not in shown
    page.close()


def test_the_code_refusal_names_commands_one_can_copy(server, browser, tmp_path, model_zoo):
    page = _run_page(server, browser)
    radio = page.locator('[data-testid="stRadio"]')
    radio.filter(has_text="PyTorch model").get_by_text("Path on this machine").click()
    page.get_by_text("The demo's export").wait_for(state="detached")
    page.get_by_role("textbox", name="Model", exact=True).fill(model_zoo.spec("make_tiny"))
    page.keyboard.press("Enter")
    _settle(page)
    radio.filter(has_text="ONNX file").get_by_text("Path on this machine").click()
    page.get_by_role("textbox", name="ONNX path").fill(str(_tiny_onnx(tmp_path)))
    page.keyboard.press("Enter")
    page.get_by_text("ONNX signature").wait_for()
    _settle(page)
    # refused before the click (issue 60): Run is off, and its caption says why and how
    assert page.get_by_role("button", name="Run", exact=True).is_disabled()
    why = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="Run is off")
    why.wait_for(timeout=RUN_TIMEOUT_MS)
    shown = why.inner_text().replace("\u2060", "")
    assert "parity dashboard --trust-code" in shown, shown
    assert "streamlit run app.py -- --trust-code" in shown, shown
    assert "—" not in shown and "`" not in shown, shown
    page.close()


def _tiny_onnx(folder: Path) -> Path:
    import torch

    path = folder / "tiny.onnx"
    torch.onnx.export(
        torch.nn.Linear(4, 3), (torch.randn(2, 4),), str(path), dynamo=False,
        input_names=["x"], output_names=["y"],
    )  # fmt: skip
    return path


def test_a_demo_from_the_url_logs_no_widget_state_warning(browser, tmp_path):
    """`?demo=NAME` sets the form's widgets through session state (run_demo): a widget that
    also had a default made Streamlit log a warning with a stack (once per server)."""
    log = tmp_path / "streamlit.log"
    with serve_app(log) as url:  # a fresh server: the warning is logged once per server
        page = browser.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{url}/?demo=cnn")
        page.get_by_text("demo:cnn: PASS in").wait_for(timeout=RUN_TIMEOUT_MS)
        _settle(page)
        page.close()
    text = log.read_text()
    assert "created with a default value" not in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
