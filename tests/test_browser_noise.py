"""The Tolerances page's "k × rounding noise" suggestion in a real browser (issue 20): a run
with the Run page's rounding-noise box ticked offers it beside Suggest, checked (it says which
output it still fails), and one click makes it the session's tolerances."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.helpers.browser import nav, run_demo, settle, shot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(chromium, app_url: str) -> Iterator:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    pg.goto(app_url)
    pg.get_by_role("button", name="Run demo:broken").wait_for()
    yield pg
    context.close()


def test_the_noise_suggestion_is_offered_checked_and_applied_with_one_click(page) -> None:
    nav(page, "Run")
    page.get_by_role("checkbox", name=re.compile("^Measure rounding noise")).check(force=True)
    settle(page)
    run_demo(page, "broken")
    nav(page, "Tolerances")
    main = page.locator('[data-testid="stMain"]')
    button = page.get_by_role("button", name=re.compile(r"^Suggest \d+× rounding noise$"))
    button.wait_for()
    head = main.get_by_text(re.compile(r"^Suggested tolerance: \d+× rounding noise"))
    assert head.inner_text().endswith("checked: mask still fails with it")
    sidebar = page.locator('[data-testid="stSidebar"]')
    expander = sidebar.get_by_test_id("stExpander")
    expander.get_by_text("Tolerances", exact=True).click()
    expander.get_by_text("default: atol").wait_for()
    assert "mask: atol" not in expander.inner_text()  # no per-output tolerance yet

    button.click()
    settle(page)
    expander.get_by_text(re.compile(r"mask: atol")).first.wait_for()
    k = re.search(r"Suggest (\d+)×", button.inner_text()).group(1)
    assert "1 of 2 output(s) pass" in main.inner_text()  # embedding passes under it, mask not
    main.get_by_text("Rounding-noise tolerance per output").click()
    line = main.get_by_text(re.compile(r"mask: atol .* a bug that no rounding tolerance"))
    line.wait_for()
    assert f"({k}× " in line.inner_text()
    flags = re.search(r"--tol mask=(\S+):0", line.inner_text())
    assert flags, line.inner_text()
    assert f"mask: atol {flags.group(1)}" in expander.inner_text()  # what was shown is applied
    assert "FAIL" in sidebar.inner_text()  # the bug is not made to pass
    shot(page, "noise-01-tolerances-k-times-rounding")
