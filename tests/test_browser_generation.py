"""The Generation page in headless Chromium, on a saved run of a causal LM whose Optimum export
has one planted bug (layer 1's MLP weight tripled): opened straight on /generation?run=PATH,
the page is listed in the sidebar from the first load, shows a token table per prompt (its
cells, the first difference marked: tests/test_hf_generation.py under AppTest), says where the
texts part and that it is not a near tie, and draws the KV cache grids. A saved run without
generation does not list the page. Screenshot: test-artifacts/generation-page.png.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from parity.cli import main
from tests.browser import ARTIFACTS, settle_loaded
from tests.hf_models import PROMPTS
from tests.test_hf_generation import N_NEW, files  # noqa: F401 - the module's fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def saved_runs(llama_dir, files, tmp_path_factory) -> dict[str, Path]:  # noqa: F811
    out = tmp_path_factory.mktemp("generation-browser")
    argv = ["validate", "--model", f"hf:{llama_dir}", "--onnx", str(files["bug"])]
    argv += ["--max-new-tokens", str(N_NEW)] + [a for p in PROMPTS for a in ("--prompt", p)]
    paths = {"bug": out / "bug.parity.npz", "none": out / "none.parity.npz"}
    assert main([*argv, "--save-run", str(paths["bug"])]) == 1
    assert main([*argv, "--no-generation", "--save-run", str(paths["none"])]) == 1
    return paths


def _open(chromium, app_url: str, page_path: str, run: Path):
    context = chromium.new_context(viewport={"width": 1300, "height": 2600})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{app_url}/{page_path}?run={urllib.parse.quote(str(run))}")
    settle_loaded(page)
    return context, page


def test_generation_page_shows_where_the_tokens_part(saved_runs, chromium, app_url):
    context, page = _open(chromium, app_url, "generation", saved_runs["bug"])
    try:
        page.get_by_role("heading", name="Generation").first.wait_for()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
        assert "Generation" in nav
        body = page.locator("body").inner_text()
        assert "parts at new token" in body and "not a near tie" in body
        # one token table per prompt (a canvas: its cells are checked under AppTest)
        assert page.locator('[data-testid="stDataFrame"]').count() == len(PROMPTS)
        assert "KV cache keys" in body and "KV cache values" in body
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "generation-page.png"), full_page=True)
    finally:
        context.close()


def test_a_run_without_generation_does_not_list_the_page(saved_runs, chromium, app_url):
    context, page = _open(chromium, app_url, "overview", saved_runs["none"])
    try:
        page.get_by_role("heading", name="Overview").first.wait_for()
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
        assert "Layers" in nav and "Generation" not in nav
    finally:
        context.close()
