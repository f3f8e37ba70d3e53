"""Candidates side by side in headless Chromium: a saved run of three real exports at two
ORT optimisation levels opened in the app (PARITY_RUN). The Overview shows each candidate's
verdict and the candidates x outputs grid; the detail below it is the first failing
candidate's, and its worst failure opens in Inspect, whose selector names that candidate.
Screenshots: test-artifacts/candidates-*.png."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import launch, serve_app

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
VIEWPORT = {"width": 1500, "height": 2600}


def _settle(page) -> None:
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden")


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    from candidate_exports import build

    from parity.cli import main

    exports = build(tmp_path_factory.mktemp("cand-browser"))
    path = exports.dir / "side.parity.npz"
    args = ["validate", "--model", str(exports.pt2), "--onnx", str(exports.dynamo)]
    args += ["--onnx", str(exports.legacy), "--onnx", str(exports.buggy)]
    args += ["--ort-opt-level", "disable,all", "--input-sets", "2", "--save-run", str(path)]
    assert main(args) == 1
    return path


def test_overview_grid_shows_six_candidates_and_inspect_opens_the_failing_one(saved_run):
    from playwright import sync_api

    ARTIFACTS.mkdir(exist_ok=True)
    env = {"PARITY_RUN": str(saved_run)}
    with serve_app(ARTIFACTS / "streamlit-candidates.log", env=env) as url, \
            sync_api.sync_playwright() as pw:  # fmt: skip
        browser = launch(pw)
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.set_default_timeout(180_000)  # a loaded CI machine draws slowly
        page.goto(f"{url}/overview")
        page.get_by_role("heading", name="Candidates").wait_for()
        _settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        _settle(page)
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
        page.screenshot(path=str(ARTIFACTS / "candidates-overview.png"), full_page=True)

        # the detail below the grid is the first failing candidate's; its worst failure opens
        # in Inspect, whose selector names the same candidate
        page.get_by_role("button", name=re.compile("Inspect the worst failure")).click()
        page.get_by_role("heading", name="Inspect an output").wait_for()
        _settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3")
        page.screenshot(path=str(ARTIFACTS / "candidates-inspect.png"), full_page=True)
        box = page.locator('[data-testid="stSelectbox"]').first  # the candidate selector
        values = box.locator("input").evaluate_all("els => els.map(e => e.value)")
        chosen = (box.text_content() or "") + " ".join(values)
        assert "#4 buggy.onnx (CPU, disable) · FAIL" in chosen, chosen
        body = page.locator("body").inner_text()
        assert "FAIL · total in set" in body
        context.close()
