"""The Tolerances page's "k × rounding noise" suggestion in a real browser (issues 20, 47): a
run with the Run page's rounding-noise box ticked offers it beside Suggest; one click fits it,
checks it on fresh input sets (the model runs again) and applies only what passed them: the
planted bug (mask) gets none, said why."""

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
    button = page.get_by_role("button", name="Suggest from the rounding noise", exact=True)
    button.wait_for()
    assert "Suggested tolerances" not in main.inner_text()  # nothing shown before its check
    sidebar = page.locator('[data-testid="stSidebar"]')
    expander = sidebar.get_by_test_id("stExpander")
    expander.get_by_text("Tolerances", exact=True).click()
    expander.get_by_text("default: atol").wait_for()
    assert "mask: atol" not in expander.inner_text()  # no per-output tolerance yet

    button.click()
    head = main.get_by_text(re.compile(r"^Suggested tolerances \(\d+× the measured rounding"))
    head.wait_for()
    assert re.search(r"checked on \d+ fresh input sets", head.inner_text())
    settle(page)
    main.get_by_text("Suggested tolerance per output").click()
    line = main.get_by_text(re.compile(r"mask: none suggested: a bug"))
    line.wait_for()
    assert "mask: atol" not in expander.inner_text()  # the bug is given no tolerance
    assert "FAIL" in sidebar.inner_text()  # the bug is not made to pass
    shot(page, "noise-01-tolerances-k-times-rounding")
