"""The Layers page in headless Chromium, on a saved run whose layers block the real engine made.

`parity validate --layers --save-run` on a real dynamo export with a bug planted in one block,
then the app opened on that file (?run=PATH): the verdict names the block, both figures draw,
selecting the first divergence's row opens it in the Inspect views. Screenshots are kept under
test-artifacts/ (layers-*.png).
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, settle

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1500, "height": 2600}


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    from tests.helpers.planted_blocks import planted_export, planted_layers_run

    out = tmp_path_factory.mktemp("layers-browser")
    path = out / "planted.parity.npz"
    planted_layers_run(planted_export(out), save_run=path)
    return path


def test_layers_page_shows_where_the_planted_bug_is_born_and_opens_it(saved_run, chromium, app_url):
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{app_url}/layers?run={urllib.parse.quote(str(saved_run))}")
        page.get_by_role("heading", name="Layers").first.wait_for()
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        page.locator(".js-plotly-plot .icicletrace, .js-plotly-plot g.icicle").first.wait_for(
            state="attached"
        )
        settle(page)
        body = page.locator("body").inner_text()
        assert "DIVERGES" in body
        assert re.search(r"The export starts to diverge in blocks\.2\.", body), body[:2000]
        assert "Values in graph order" in body
        page.screenshot(path=str(ARTIFACTS / "layers-page.png"), full_page=True)

        # select the first divergence's row: a value whose arrays the engine kept
        search = page.get_by_label("Module, op, node or value contains")
        search.fill("blocks.2.fc1")
        search.press("Enter")
        # 17 values x 2 input sets (the renamed graph output is matched too)
        page.get_by_text(re.compile(r"^2 of 34 rows")).wait_for()
        settle(page)
        grid = page.locator('[data-testid="stDataFrame"]').first
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 18, box["y"] + 55)  # the first row's selection box
        page.get_by_role("heading", name="Inspect an output").wait_for()
        settle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 4")
        body = page.locator("body").inner_text()
        assert "opened from the Layers page" in body and "blocks.2.fc1" in body
        page.screenshot(path=str(ARTIFACTS / "layers-inspect.png"), full_page=True)
    finally:
        context.close()
