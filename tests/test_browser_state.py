"""The dashboard's state in a real browser: one truth for the tolerances, pages in any order,
numbers typed as people type them.

Streamlit's widget state, page switches and data-editor cells behave differently in AppTest
(no browser, whole-script reruns), so these run `streamlit run app.py` in Chromium at
1280x720 and keep screenshots under test-artifacts/.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

from tests.helpers.browser import RUN_TIMEOUT_MS, nav, run_demo, settle, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # slow: a minute of pages, first of its group

PAGES = ("Run", "Overview", "Inspect", "Layers", "Tolerances", "Sweep")


@pytest.fixture(scope="module")
def page(chromium, app_url: str) -> Iterator:
    context = chromium.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    pg.goto(app_url)
    pg.get_by_role("button", name="Run demo:fp16").wait_for()
    yield pg
    context.close()


def _sidebar(page):
    return page.locator('[data-testid="stSidebar"]')


def _badge(page) -> str:
    """The verdict the sidebar shows (its "Current run" block)."""
    text = _sidebar(page).inner_text()
    found = re.search(r"Current run\s+(PASS|FAIL|ERROR)", text)
    assert found, text
    return found.group(1)


def _wait_badge(page, verdict: str) -> None:
    """Wait for the sidebar's badge to say `verdict` (the sidebar is drawn after the page,
    so right after a rerun starts the old badge can still be on screen)."""
    badge = _sidebar(page).get_by_text(verdict, exact=True)
    badge.wait_for()
    assert _badge(page) == verdict


def _sidebar_tolerances(page) -> str:
    expander = _sidebar(page).get_by_test_id("stExpander")
    if "default: atol" not in expander.inner_text():
        expander.get_by_text("Tolerances", exact=True).click()
        expander.get_by_text("default: atol").wait_for()
    return expander.inner_text()


def _assert_no_exception(page, where: str) -> None:
    errors = page.locator('[data-testid="stException"]')
    assert errors.count() == 0, f"{where}: {errors.first.inner_text()}"


def test_suggest_turns_the_page_the_badge_and_the_sidebar_reports_to_pass_at_once(page, tmp_path):
    run_demo(page, "fp16")
    nav(page, "Tolerances")
    assert _badge(page) == "FAIL"
    page.get_by_role("button", name="Suggest").click()
    page.get_by_text("2 of 2 output(s) pass the tolerance in every input set").wait_for()
    _wait_badge(page, "PASS")  # the same rerun: no other page opened in between
    settle(page)
    assert "0 failing comparisons" in _sidebar(page).inner_text()
    assert "last_hidden_state: atol" in _sidebar_tolerances(page)
    shot(page, "state-01-suggest-fp16-pass")

    with page.expect_download() as info:
        _sidebar(page).get_by_role("button", name="Download HTML report").click()
    html = tmp_path / "report.html"
    info.value.save_as(html)
    assert re.search(r"<title>Parity report: pass\b", html.read_text())

    with page.expect_download() as info:
        _sidebar(page).get_by_role("button", name="Download saved run").click()
    saved = tmp_path / "run.parity.npz"
    info.value.save_as(saved)
    from parity.reports.saved_run import load_run

    reopened = load_run(saved)
    assert reopened.verdict == "pass"
    assert set(reopened.tolerances.outputs) == {"last_hidden_state", "pooled"}


def _walk_every_ordered_pair(pages: tuple[str, ...]) -> list[str]:
    """A walk over the pages that takes every (from, to) step at least once."""
    todo = set(itertools.permutations(pages, 2))
    walk = [pages[0]]
    while todo:
        here = walk[-1]
        nxt = next((b for a, b in sorted(todo) if a == here), None)
        if nxt is None:  # nothing left from here: go to a page that still has steps
            nxt = sorted(todo)[0][0]
        todo.discard((here, nxt))
        walk.append(nxt)
    return walk


def test_every_page_after_every_other_page_draws_and_keeps_the_tolerances(page):
    run_demo(page, "fp16")
    nav(page, "Tolerances")
    page.get_by_role("button", name="Suggest").click()
    page.get_by_text("2 of 2 output(s) pass the tolerance in every input set").wait_for()
    settle(page)
    walk = _walk_every_ordered_pair(PAGES)
    assert len(walk) >= 31
    for step, title in enumerate(walk[1:], 1):
        nav(page, title)
        where = f"step {step}: {walk[step - 1]} -> {title}"
        _assert_no_exception(page, where)
        _wait_badge(page, "PASS")  # the sidebar drawn, at the session's tolerances
        if title == "Tolerances":
            page.get_by_text("2 of 2 output(s) pass the tolerance in every input set").wait_for()
    nav(page, "Tolerances")
    shot(page, "state-02-tolerances-after-every-page")


def _edit_cell(page, editor, *, row: int, col: int, text: str) -> None:
    """Type `text` into one text cell of the data editor: double-click it, type, Enter.

    The grid is a canvas; its accessibility table says which cell a click selected, so the
    cell is found by clicking along its row from the right (text cells only: never through
    the checkbox column, where a click would toggle the override)."""
    editor.scroll_into_view_if_needed()
    box = editor.bounding_box()
    target = editor.locator(f'td#glide-cell-{col}-{row}[aria-selected="true"]')
    y = box["y"] + 35 * (row + 1) + 17
    for x in range(int(box["x"] + box["width"]) - 20, int(box["x"]), -25):
        page.mouse.click(x, y)
        page.wait_for_timeout(150)
        if target.count():
            break
    target.wait_for(state="attached")
    page.mouse.dblclick(x, y)
    overlay = page.locator("textarea").last
    overlay.wait_for()
    overlay.fill(text)
    overlay.press("Enter")
    settle(page)


def _wait_sidebar_tolerances(page, line: str) -> None:
    for _ in range(300):
        if line in _sidebar_tolerances(page):
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"{line!r} not in {_sidebar_tolerances(page)!r}")


def _editor(page):
    return page.locator('[data-testid="stDataFrame"]').filter(has_text="override").first


def _wait_editor(page, cells: list[str]) -> None:
    """Wait until the overrides editor shows `cells` (after its edit reran the app)."""
    for _ in range(300):
        if " ".join(_editor(page).locator("td").all_inner_texts()).split() == cells:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"editor shows {_editor(page).locator('td').all_inner_texts()}")


def test_numbers_typed_in_the_overrides_read_as_written_and_turn_the_override_on(page):
    run_demo(page, "fp16")
    nav(page, "Tolerances")
    _edit_cell(page, _editor(page), row=1, col=2, text="5e-3")  # pooled, atol
    _wait_editor(
        page,
        [
            "last_hidden_state",
            "false",
            "pooled",
            "true",
            "0.005",
            "0",
        ],
    )
    _wait_sidebar_tolerances(page, "pooled: atol 0.005, rtol 0")

    _edit_cell(page, _editor(page), row=0, col=3, text="1e-05")  # last_hidden_state, rtol
    _wait_editor(
        page, ["last_hidden_state", "true", "1e-05", "1e-05", "pooled", "true", "0.005", "0"]
    )
    _wait_sidebar_tolerances(page, "last_hidden_state: atol 1e-05, rtol 1e-05")

    _edit_cell(page, _editor(page), row=1, col=2, text="5e-")
    page.get_by_text(re.compile(r"Not applied: atol of pooled: .5e-. is not a number")).wait_for()
    assert "pooled: atol 0.005, rtol 0" in _sidebar_tolerances(page)  # unchanged
    _wait_editor(  # and the cell shows what is in force, not the refused text
        page, ["last_hidden_state", "true", "1e-05", "1e-05", "pooled", "true", "0.005", "0"]
    )
    shot(page, "state-03-typed-overrides")


def test_after_a_run_the_verdict_and_the_failing_output_are_what_you_land_on(page):
    run_demo(page, "broken")
    page.get_by_text("Failing outputs, worst first:").wait_for()
    failing = page.get_by_text(re.compile(r"^mask fails in 2 of 2 input sets"))
    failing.wait_for()
    box = failing.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 720  # above the fold at 1280x720
    demos = page.get_by_role("button", name="Run demo:cnn")
    assert demos.bounding_box()["y"] > box["y"]  # the demo cards come after the answer
    status = page.locator('[data-testid="stExpander"]').filter(has_text="demo:broken: FAIL in")
    assert "check" not in status.inner_text()  # the status icon is not a tick next to FAIL
    shot(page, "state-04-run-lands-on-the-verdict")


def test_a_wrong_pair_is_said_in_words_and_the_last_good_run_stays(page, tmp_path):
    from tests.helpers.wrong_pair import write_wrong_pair

    pt2, onnx = write_wrong_pair(tmp_path)
    run_demo(page, "cnn")
    model = page.locator('[data-testid="stRadio"]').filter(has_text="PyTorch model")
    model.get_by_text("Path on this machine").click()
    page.get_by_label("Model", exact=True).fill(str(pt2))
    page.get_by_label("Model", exact=True).press("Enter")
    settle(page)
    onnx_radio = page.locator('[data-testid="stRadio"]').filter(has_text="ONNX file")
    onnx_radio.get_by_text("Path on this machine").click()
    page.get_by_role("textbox", name="ONNX path").fill(str(onnx))
    page.get_by_role("textbox", name="ONNX path").press("Enter")
    page.get_by_text("Sizes of the symbolic dims").or_(
        page.get_by_text("Execution provider")
    ).first.wait_for()
    settle(page)
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Likely a wrong pair").first.wait_for(timeout=RUN_TIMEOUT_MS)
    settle(page)
    body = page.locator("body").inner_text()
    assert "no output of the model has the shape of the ONNX output" in body
    assert "The previous run (demo:cnn) is still the current one." in body
    _wait_badge(page, "PASS")  # demo:cnn's verdict
    shot(page, "state-05-wrong-pair")


def _origin(page) -> str:
    found = re.match(r"https?://[^/]+", page.url)
    assert found, page.url
    return found.group(0)


def _radio(page, label: str, option: str) -> None:
    page.locator('[data-testid="stRadio"]').filter(has_text=label).get_by_text(option).click()
    settle(page)


def _type(page, label: str, text: str) -> None:
    box = page.get_by_role("textbox", name=label, exact=True)
    box.fill(text)
    box.press("Enter")
    settle(page)


def test_the_run_form_keeps_what_you_typed_across_pages_and_runs_what_it_shows(page, tmp_path):
    """Issue 22: after a `?demo=broken` start, a model and an ONNX path typed into the form
    are still there after another page was shown, and Run validates them (not the demo)."""
    from tests.helpers.wrong_pair import write_wrong_pair

    pt2, onnx = write_wrong_pair(tmp_path)
    pg = page.context.new_page()  # a fresh session, started as `?demo=broken` starts one
    pg.set_default_timeout(60_000)
    try:
        pg.goto(f"{_origin(page)}/?demo=broken")
        pg.get_by_text(re.compile(r"demo:broken: FAIL in")).wait_for(timeout=RUN_TIMEOUT_MS)
        settle(pg)
        _radio(pg, "PyTorch model", "Path on this machine")
        _type(pg, "Model", str(pt2))
        _radio(pg, "ONNX file", "Path on this machine")
        _type(pg, "ONNX path", str(onnx))
        pg.get_by_text("ONNX signature").wait_for()
        for title in ("Overview", "Tolerances", "Run"):
            nav(pg, title)
        _assert_no_exception(pg, "back on Run")
        assert pg.get_by_role("textbox", name="Model", exact=True).input_value() == str(pt2)
        assert pg.get_by_role("textbox", name="ONNX path", exact=True).input_value() == str(onnx)
        assert pg.locator('[data-testid="stSelectbox"]').filter(has_text="Demo").count() == 0
        pg.get_by_role("textbox", name="ONNX path", exact=True).scroll_into_view_if_needed()
        shot(pg, "state-06-form-kept-across-pages")
        pg.get_by_role("button", name="Run", exact=True).click()
        pg.get_by_text("Likely a wrong pair").first.wait_for(timeout=RUN_TIMEOUT_MS)
        settle(pg)
        body = pg.locator("body").inner_text()
        assert f"{pt2.name} with" in body and onnx.name in body  # what the form showed ran
        assert "The previous run (demo:broken) is still the current one." in body
    finally:
        pg.close()


def test_the_layers_page_compares_layers_for_this_run_and_the_box_does_not_stick(page):
    """Issue 22: the Layers page re-runs the current run with layers compared; the Run page's
    box is not left ticked for the next run; a layers refusal names widgets, not flags."""
    run_demo(page, "broken")
    nav(page, "Layers")
    page.get_by_role("button", name="Compare layers for this run").click()
    page.get_by_text("DIVERGES", exact=True).wait_for(timeout=RUN_TIMEOUT_MS)
    settle(page)
    body = page.locator("body").inner_text()
    assert "Pad" in body and "Values in graph order" in body
    shot(page, "state-07-layers-for-this-run")
    nav(page, "Run")
    box = page.get_by_role("checkbox", name=re.compile("^Compare layers"))
    assert not box.is_checked()
    # ticked with a second ONNX file: Run is off and says why in the form's words
    box.check(force=True)
    settle(page)
    _radio(page, "PyTorch model", "Built-in demo")
    more = page.get_by_role("textbox", name=re.compile("^More ONNX files"))
    more.fill("/tmp/other.onnx")
    more.press("Control+Enter")
    settle(page)
    why = page.get_by_text(re.compile(r"Run is off: “Compare layers” compares one ONNX file"))
    why.wait_for()
    assert "--" not in why.inner_text()
    assert page.get_by_role("button", name="Run", exact=True).is_disabled()
    page.get_by_role("button", name="Run", exact=True).scroll_into_view_if_needed()
    shot(page, "state-08-layers-refusal-in-words")
    more.fill("")
    more.press("Control+Enter")
    page.get_by_role("checkbox", name=re.compile("^Compare layers")).uncheck(force=True)
    settle(page)


def test_a_reload_keeps_the_run_and_the_tolerances(page):
    """Reloading the tab is a new Streamlit session: the tab's run and the tolerances Suggest
    set come back with it (parity.dashboard.keep, by the ?tab= token in the URL)."""
    run_demo(page, "fp16")
    nav(page, "Tolerances")
    page.get_by_role("button", name="Suggest").click()
    page.get_by_text("2 of 2 output(s) pass the tolerance in every input set").wait_for()
    _wait_badge(page, "PASS")
    settle(page)
    assert "tab=" in page.url, page.url
    page.reload()
    page.get_by_text("2 of 2 output(s) pass the tolerance in every input set").wait_for()
    _wait_badge(page, "PASS")
    assert "last_hidden_state: atol" in _sidebar_tolerances(page)
    _assert_no_exception(page, "after a reload")
    shot(page, "state-04-reload-keeps-run-and-tolerances")
    fresh = page.context.new_page()  # another tab without the token: a session of its own
    fresh.goto(re.sub(r"^(https?://[^/]+)/.*$", r"\1/", page.url))  # the Run page
    fresh.get_by_role("button", name="Run demo:fp16").wait_for()
    settle(fresh)
    said = _sidebar(fresh).inner_text()
    assert not re.search(r"Current run\s+(PASS|FAIL|ERROR)", said), said
    fresh.close()
