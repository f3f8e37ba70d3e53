"""The Sweep page in headless Chromium, on a real sweep folder (real pairs, real runs).

`parity sweep` over a passing, a failing, a corrupt and a three-output pair, then the app
opened at `?sweep=DIR`: the summary table (sorted by a header click, filtered to failing
pairs), the pairs x outputs grid, and a selected row opening that pair's saved run in
Overview. Screenshots are kept under test-artifacts/ (sweep-*.png).

Streamlit draws tables on a canvas; their text is read from the grid's accessibility table
(hidden <tr aria-rowindex> rows), and rows are clicked at their place on the canvas.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from parity.cli import main
from tests.helpers.browser import nav, settle, shot
from tests.helpers.sweep_zoo import copy_tiny, with_ray_attempts, write_manifest, write_tokens_onnx

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1400, "height": 1600}
HEADER_PX, ROW_PX, MARKER_X = 37, 35, 18
"""Streamlit's dataframe geometry: header height, row height, the row-selection box's x."""


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, model_zoo, tiny_artifacts) -> Path:
    root = tmp_path_factory.mktemp("sweep_browser")
    zoo = root / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    (zoo / "corrupt.onnx").write_bytes(b"\x08\x07not an onnx protobuf")
    write_tokens_onnx(zoo / "tokens.onnx", model_zoo)
    tiny = ["--model", "models.py:make_tiny", "--save-run", "run.parity.npz", "--onnx"]
    tokens = ["--model", "models.py:make_tokens", "--onnx", "tokens.onnx"]
    tokens += ["--int-range", "input_ids=0:100", "--int-range", "attention_mask=0:2"]
    manifest = write_manifest(
        zoo,
        [
            {"name": "good", "args": [*tiny, "tiny.onnx", "--html", "report.html"]},
            {"name": "x__bad__", "args": [*tiny, "tiny.onnx", "--weights=other_weights.pt"]},
            {"name": "corrupt", "args": [*tiny, "corrupt.onnx"]},
            {"name": "tokens", "args": [*tokens, "--save-run", "run.parity.npz"]},
        ],
    )  # fmt: skip
    out = root / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "2"]) == 2
    return out


def _table(page, index: int):
    return page.locator('[data-testid="stDataFrame"]').nth(index)


def _rows(table) -> list[list[str]]:
    """The table's rows as shown (sorted as on screen), header first."""
    table.locator("tr").nth(1).wait_for(state="attached")
    return [r.locator("th, td").all_inner_texts() for r in table.locator("tr").all()]


def _outputs_shown(page) -> list[str]:
    """The Overview table's output names (found by its header, not by position)."""
    rows = _rows(_table(page, 0))
    column = next(i for i, h in enumerate(rows[0]) if h.strip().endswith("output"))
    return [r[column] for r in rows[1:]]


def _pair_names(page) -> list[str]:
    rows = _rows(_table(page, 0))
    assert rows[0][0].endswith("pair"), rows[0]  # "↑ pair" once sorted by it
    return [r[0] for r in rows[1:]]


def _select_row(page, name: str) -> None:
    """Tick the selection box of the pairs table's row showing `name`."""
    position = _pair_names(page).index(name)
    table = _table(page, 0)
    table.scroll_into_view_if_needed()
    box = table.bounding_box()
    y = box["y"] + HEADER_PX + ROW_PX * position + ROW_PX / 2
    page.mouse.click(box["x"] + MARKER_X, y)


def _open_sweep(page, url: str, sweep_dir: Path) -> None:
    page.goto(f"{url}/?sweep={urllib.parse.quote(str(sweep_dir))}")
    page.get_by_role("heading", name="Sweep", exact=True).wait_for()
    settle(page)
    _rows(_table(page, 1))  # both tables drawn


def _back_to_sweep(page) -> None:
    nav(page, "Sweep")
    _rows(_table(page, 0))


def _on_overview(page) -> str:
    page.get_by_role("heading", name="Overview", exact=True).wait_for()
    settle(page)
    _rows(_table(page, 0))
    return page.locator('[data-testid="stMain"]').inner_text()


def test_sweep_page_sorts_filters_and_opens_a_pairs_run_in_overview(sweep_dir, chromium, app_url):
    url = app_url
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        _open_sweep(page, url, sweep_dir)
        main_text = page.locator('[data-testid="stMain"]').inner_text()
        assert "4 pair(s): 2 pass, 1 fail, 1 error" in main_text
        pairs = _rows(_table(page, 0))
        assert pairs[0][:3] == ["pair", "verdict", "worst output"]
        assert [r[:2] for r in pairs[1:]] == [
            ["good", "✓ pass"],
            ["x__bad__", "✗ fail"],
            ["corrupt", "⚠ error"],
            ["tokens", "✓ pass"],
        ]  # fmt: skip   the name with markdown's emphasis marks is shown as the text it is
        assert "corrupt.onnx" in pairs[3][pairs[0].index("failing / error")]
        grid = _rows(_table(page, 1))
        assert grid[0][1:] == ["y", "logits", "extra.0", "extra.1"]
        by_pair = {r[0]: r[1:] for r in grid[1:]}
        assert list(by_pair) == ["good", "x__bad__", "tokens"]  # corrupt has no outputs
        assert by_pair["good"][0].startswith("✓ ") and by_pair["good"][1:] == ["", "", ""]
        assert by_pair["x__bad__"][0].startswith("✗ fail ")
        assert by_pair["tokens"][0] == "" and all(c.startswith("✓ ") for c in by_pair["tokens"][1:])
        shot(page, "sweep-01-opened")

        table = _table(page, 0)
        box = table.bounding_box()
        page.mouse.click(box["x"] + MARKER_X + 40, box["y"] + HEADER_PX / 2)  # "pair" header
        page.wait_for_function(
            "() => document.querySelector('[data-testid=stDataFrame] tr[aria-rowindex=\"2\"]')"
            "?.innerText.startsWith('corrupt')"
        )
        assert _pair_names(page) == ["corrupt", "good", "tokens", "x__bad__"]
        shot(page, "sweep-02-sorted-by-pair")

        _select_row(page, "x__bad__")  # shown 4th after sorting, 2nd in the data
        body = _on_overview(page)
        assert "FAIL" in body and "models.py:make_tiny" in body and "tiny.onnx" in body
        assert set(_outputs_shown(page)) == {"y"}  # one output, at each of the two default sizes
        sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
        assert str(sweep_dir / "x__bad__" / "run.parity.npz") in sidebar
        shot(page, "sweep-03-overview-of-failing-pair")

        _back_to_sweep(page)
        folder = page.get_by_label(re.compile("^Sweep folder"))
        assert folder.input_value() == str(sweep_dir)  # still the open folder
        _select_row(page, "tokens")
        body = _on_overview(page)
        assert "PASS" in body and "models.py:make_tokens" in body
        assert set(_outputs_shown(page)) == {"logits", "extra.0", "extra.1"}
        shot(page, "sweep-04-overview-of-three-output-pair")

        _back_to_sweep(page)
        page.get_by_text("Only failing and error pairs").click()
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=stDataFrame]')[0]"
            ".querySelectorAll('tr').length === 3"
        )
        settle(page)
        assert sorted(_pair_names(page)) == ["corrupt", "x__bad__"]
        assert [r[0] for r in _rows(_table(page, 1))[1:]] == ["x__bad__"]
        _select_row(page, "corrupt")  # no saved run: the page says so and shows its error
        page.get_by_text("This pair has no saved run to open").wait_for()
        settle(page)
        details = page.get_by_text(re.compile(r"^pair corrupt: ⚠ error")).inner_text()
        assert "Wire format was corrupt" in details  # the error line, whole
        assert str(sweep_dir / "corrupt" / "log.txt") in details
        assert page.get_by_role("heading", name="Sweep", exact=True).is_visible()
        shot(page, "sweep-05-filtered-error-pair-picked")
    finally:
        context.close()


def test_sweep_page_and_index_show_attempts_a_retried_pass_and_a_pair_without_a_node(
    sweep_dir, chromium, app_url, tmp_path
):
    tried = with_ray_attempts(sweep_dir, tmp_path / "tried")
    # wide: the grid draws only the columns in view, and attempts come after the errors
    context = chromium.new_context(viewport={"width": 2800, "height": 1600})
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        _open_sweep(page, app_url, tried)
        rows = _rows(_table(page, 0))
        head = [h.strip() for h in rows[0]]
        by_pair = {r[0]: dict(zip(head, r, strict=False)) for r in rows[1:]}
        assert by_pair["good"]["verdict"] == "✓ pass (retried)"
        assert by_pair["good"]["tries"] == "2"
        assert by_pair["good"]["attempts"].startswith("lost: WorkerCrashedError on aaaaaaaaaaaa")
        assert by_pair["gpu"]["attempts"].startswith("never got a node")
        shot(page, "sweep-06-attempts")
        page.goto((tried / "index.html").as_uri())
        text = page.locator("body").inner_text()
        assert "pass (retried)" in text and "never got a node" in text
        shot(page, "sweep-07-index-attempts")
    finally:
        context.close()
