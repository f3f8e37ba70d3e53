"""The Inspect page at a laptop's 1280x720, in the real app in Chromium, on demo:broken.

Heatmap axes carry the ONNX dim names, the hover shows the error with both values, the
heatmap fills its column, the histogram's labels do not collide, and the worst-elements and
Overview tables fit their width (no horizontal scrolling). Screenshots are kept in
test-artifacts/inspect-*.png: look at them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.helpers.browser import ARTIFACTS, RUN_TIMEOUT_MS, nav, settle, shot

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}


@pytest.fixture(scope="module")
def page(chromium, app_url: str) -> Iterator[object]:
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(app_url)
    page.get_by_role("button", name="Run demo:broken").wait_for(timeout=RUN_TIMEOUT_MS)
    page.get_by_role("button", name="Run demo:broken").click()
    page.get_by_text(re.compile(r"demo:broken: FAIL in")).wait_for(timeout=RUN_TIMEOUT_MS)
    settle(page)
    yield page
    context.close()


def _overflow(table) -> int:
    """How many pixels of a st.dataframe's content lie beyond its visible width."""
    return table.evaluate(
        "el => { const s = el.querySelector('.dvn-scroller');"
        " return s ? s.scrollWidth - s.clientWidth : -1; }"
    )


def test_overview_table_fits_the_page(page) -> None:
    nav(page, "Overview")
    table = page.locator('[data-testid="stDataFrame"]').first
    table.wait_for()
    shot(page, "inspect-overview-table", locator=table)
    assert _overflow(table) == 0


def test_inspect_heatmap_names_axes_hovers_values_and_fits(page) -> None:
    nav(page, "Overview")
    page.get_by_role("button", name=re.compile("Inspect the worst failure")).click()
    page.get_by_role("heading", name="Inspect an output").wait_for()
    settle(page)
    main = page.locator('[data-testid="stMain"]')
    heat = main.locator(".js-plotly-plot").filter(has=page.locator(".heatmaplayer")).first
    heat.wait_for()
    shot(page, "inspect-heatmap", locator=heat)
    text = heat.text_content()
    assert "height (axis 2, size 32)" in text and "width (axis 3, size 32)" in text, text
    # the selectors name the axes the same way
    assert main.get_by_text("height (axis 2, size 32)").count() >= 1

    # the heatmap fills its column: its cells are drawn across most of the figure's width
    figure = heat.bounding_box()
    cells = heat.locator(".heatmaplayer image").first.bounding_box()
    plot = heat.locator(".nsewdrag").first.bounding_box()
    assert cells["width"] > 0.5 * figure["width"], (cells, figure)
    # not letterboxed: the cells fill the plot area (no grey bands beside or below them)
    assert abs(cells["width"] - plot["width"]) < 3 and abs(cells["height"] - plot["height"]) < 3
    assert cells["height"] > 0.9 * cells["width"], (cells, figure)  # a 32x32 slice: square

    # hover a cell of the failing top row: index, error, both values, never log10
    step = cells["width"] / 32
    page.mouse.move(cells["x"] + step * 5.5, cells["y"] + step * 0.5, steps=5)
    page.wait_for_timeout(500)
    hover = heat.locator(".hoverlayer").text_content()
    page.screenshot(path=str(ARTIFACTS / "inspect-heatmap-hover.png"))
    assert "log10" not in hover
    assert re.search(r"index \[1, 0, 0, 5\]", hover), hover
    assert "error ÷ allowed" in hover and "ref " in hover and "ONNX " in hover, hover

    # worst-elements table: every column visible
    table = main.locator('[data-testid="stDataFrame"]').first
    shot(page, "inspect-worst-table", locator=table)
    assert _overflow(table) == 0

    hist = main.locator(".js-plotly-plot").filter(has_text="|error| histogram").first
    shot(page, "inspect-histogram", locator=hist)
    # atol and worst are labelled by annotations above the plot area (issue 22), whole
    labels = [t for t in hist.locator(".annotation-text").all() if t.text_content()]
    texts = sorted(t.text_content().split()[0] for t in labels)
    assert texts == ["atol", "worst"], [t.text_content() for t in labels]
    boxes = [t.bounding_box() for t in labels]
    area = hist.locator(".nsewdrag").first.bounding_box()  # the plot area
    frame = hist.bounding_box()
    for box in boxes:
        assert frame["y"] <= box["y"] and box["y"] + box["height"] <= area["y"] + 1, (box, area)
        assert frame["x"] <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"]
    a, b = boxes
    apart = (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )
    assert apart, boxes


def test_a_small_wide_output_fills_the_width_with_one_cross(page) -> None:
    main = page.locator('[data-testid="stMain"]')
    panels = main.locator(".js-plotly-plot").filter(has_text="ONNX Runtime").first
    shot(page, "inspect-side-by-side", locator=panels)
    main.get_by_role("heading", name="Inspect an output").scroll_into_view_if_needed()
    box = main.locator('[data-testid="stSelectbox"]').filter(has_text="Output").first
    box.click()
    page.get_by_role("option", name="embedding").click()
    settle(page)
    heat = main.locator(".js-plotly-plot").filter(has=page.locator(".heatmaplayer")).first
    heat.wait_for()
    page.wait_for_timeout(500)
    shot(page, "inspect-embedding", locator=heat)
    # (2, 16) passes: one cross on its worst element, not one on every element
    assert heat.locator(".scatterlayer .point").count() == 1
    figure = heat.bounding_box()
    cells = heat.locator(".heatmaplayer image").first.bounding_box()
    assert cells["width"] > 0.5 * figure["width"], (cells, figure)  # a strip, full width
    assert "axis 1 (size 16)" in heat.text_content()
    # its 2 rows side by side: ticks at whole indices (they read "-0.5, 0, 0.5, 1, 1.5")
    panels = main.locator(".js-plotly-plot").filter(has_text="ONNX Runtime").first
    rows = panels.locator(".ytick text").all_text_contents()
    assert rows and set(rows) <= {"0", "1"}, rows
