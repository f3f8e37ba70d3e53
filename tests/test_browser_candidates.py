"""Candidates side by side in headless Chromium: a saved run of three real exports at two
ORT optimisation levels opened in the app (?run=PATH). The Overview shows each candidate's
verdict and the candidates x outputs grid; the detail below it is the first failing
candidate's, and its worst failure opens in Inspect, whose selector names that candidate.
Screenshots: test-artifacts/candidates-*.png."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, settle

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1500, "height": 2600}


@pytest.fixture(scope="module")
def saved_run(candidate_exports, tmp_path_factory) -> Path:
    from parity.cli import main

    exports = candidate_exports
    path = tmp_path_factory.mktemp("cand-browser") / "side.parity.npz"
    args = ["validate", "--model", str(exports.pt2), "--onnx", str(exports.dynamo)]
    args += ["--onnx", str(exports.legacy), "--onnx", str(exports.buggy)]
    args += ["--ort-opt-level", "disable,all", "--input-sets", "2", "--save-run", str(path)]
    assert main(args) == 1
    return path


def test_overview_grid_shows_six_candidates_and_inspect_opens_the_failing_one(
    saved_run, chromium, app_url
):
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(180_000)  # a loaded CI machine draws slowly
        page.goto(f"{app_url}/overview?run={urllib.parse.quote(str(saved_run))}")
        page.get_by_role("heading", name="Candidates", exact=True).wait_for()
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        settle(page)
        body = page.locator("body").inner_text()
        assert "4 of 6 candidates pass, 2 fail" in body
        grid = page.locator(".js-plotly-plot").first
        rows = grid.locator("g.ytick text").all_text_contents()
        assert sorted(rows) == [
            "#0 dynamo.onnx (CPU, disable) · pass", "#1 dynamo.onnx (CPU, all) · pass",
            "#2 legacy.onnx (CPU, disable) · pass", "#3 legacy.onnx (CPU, all) · pass",
            "#4 buggy.onnx (CPU, disable) · FAIL", "#5 buggy.onnx (CPU, all) · FAIL",
        ]  # fmt: skip
        marks = grid.locator("g.textpoint text").all_text_contents()
        assert marks.count("✗") == 4 and marks.count("✓") == 8
        colours = " ".join(grid.locator(".colorbar text").all_text_contents())  # issue 22
        assert "error ÷ allowed" in colours and "log10" not in colours, colours
        page.screenshot(path=str(ARTIFACTS / "candidates-overview.png"), full_page=True)

        # the detail below the grid is the first failing candidate's; its worst failure opens
        # in Inspect, whose selector names the same candidate
        page.get_by_role("button", name=re.compile("Inspect the worst failure")).click()
        page.get_by_role("heading", name="Inspect an output").wait_for()
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3")
        page.screenshot(path=str(ARTIFACTS / "candidates-inspect.png"), full_page=True)
        box = page.locator('[data-testid="stSelectbox"]').first  # the candidate selector
        values = box.locator("input").evaluate_all("els => els.map(e => e.value)")
        chosen = (box.text_content() or "") + " ".join(values)
        assert "#4 buggy.onnx (CPU, disable) · FAIL" in chosen, chosen
        body = page.locator("body").inner_text()
        assert "FAIL · total in set" in body
    finally:
        context.close()


def test_the_sidebar_and_the_run_page_name_the_candidate_that_fails(saved_run, chromium, app_url):
    """Issue 22: a run of several candidates: the sidebar lists each with its verdict (not
    one file next to the run's FAIL), and the Run page's sentence names the failing file,
    provider and level."""
    context = chromium.new_context(viewport={"width": 1280, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.goto(f"{app_url}/?run={urllib.parse.quote(str(saved_run))}")  # the Run page
    page.get_by_role("heading", name="Run a validation").wait_for()
    settle(page)
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("6 ONNX candidates, each with its verdict:").wait_for()
    text = sidebar.inner_text()
    assert "dynamo.onnx" not in text.split("6 ONNX candidates")[0]  # no one file for the run
    for line in (
        "PASS #0 dynamo.onnx (CPU, disable)", "PASS #1 dynamo.onnx (CPU, all)",
        "PASS #2 legacy.onnx (CPU, disable)", "PASS #3 legacy.onnx (CPU, all)",
        "FAIL #4 buggy.onnx (CPU, disable)", "FAIL #5 buggy.onnx (CPU, all)",
    ):  # fmt: skip
        assert line in " ".join(text.split()), text
    main = page.locator('[data-testid="stMain"]').inner_text()
    # each failing output's head on its line, its facts below
    assert "fails in 2 of 2 input sets on #4 buggy.onnx (CPU, disable)\n" in main, main
    assert "fails in 2 of 2 input sets on #5 buggy.onnx (CPU, all)\n" in main
    settle(page)
    page.screenshot(path=str(ARTIFACTS / "candidates-run-page.png"))
    context.close()
