"""Colour by cause, and a changed sample opened in Inspect, in headless Chromium (issue 60 job
3, issue 59 item 4).

A float16 file and a copy of it with a planted bug (a Linear's weight x1.3), side by side
against their torch model with the noise floor measured: both fail atol 1e-5, yet only the bug
is red; the float16 file's cells, badge and table rows are amber and read "float16 rounding",
on the Overview and in the HTML report. On the digits CNN with a planted bias bug, run on the
held-out digits (--data), a click on a changed sample in the Samples page opens that sample in
Inspect. Screenshots: test-artifacts/intended-*.png, samples-*.png."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, nav, open_page, settle, settle_loaded, shot

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1400, "height": 2400}
AMBER = "rgb(227, 160, 8)"  # parity.show.cause_labels.INTENDED_COLOR
HEADER_PX, ROW_PX, MARKER_X = 37, 35, 18
"""Streamlit's dataframe geometry: header height, row height, the row-selection box's x."""


def _exports(folder: Path) -> tuple[Path, Path]:
    """demo:fp16's float16 export and a copy with the first Linear's weight x1.3."""
    from parity.load.demos import SHIPPED_DIR
    from tests.helpers.plant_bug import plant

    fp16 = folder / "fp16.onnx"
    fp16.write_bytes(next(Path(SHIPPED_DIR).glob("fp16-*.onnx")).read_bytes())
    bug = folder / "bug.onnx"
    plant(fp16, bug, "node_linear", "scale", 0.3)
    return fp16, bug


@pytest.fixture(scope="module")
def fp16_and_bug(tmp_path_factory) -> tuple[Path, Path]:
    """(saved run, HTML report) of demo:fp16 against its float16 export and a buggy copy."""
    from parity.cli import main

    folder = tmp_path_factory.mktemp("intended")
    fp16, bug = _exports(folder)
    saved, html = folder / "run.parity.npz", folder / "report.html"
    args = ["validate", "--model", "demo:fp16", "--onnx", str(fp16), "--onnx", str(bug)]
    args += ["--noise-floor", "--input-sets", "1", "--save-run", str(saved), "--html", str(html)]
    assert main(args) == 1
    return saved, html


def _badge_background(page, text: str) -> str:
    """The computed background of the sidebar badge that reads `text` (exactly)."""
    badge = page.locator('[data-testid="stSidebar"] span', has_text=re.compile(f"^{text}$"))
    return badge.first.evaluate("e => getComputedStyle(e.closest('span')).backgroundColor")


def test_the_float16_cell_is_amber_and_the_bug_red_on_the_overview(fp16_and_bug, chromium, app_url):
    saved, _ = fp16_and_bug
    page = open_page(
        chromium, f"{app_url}/overview?run={urllib.parse.quote(str(saved))}", viewport=VIEWPORT
    )
    try:
        page.get_by_role("heading", name="Candidates", exact=True).wait_for()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        settle(page)
        grid = page.locator(".js-plotly-plot").first  # candidates x outputs
        rows = grid.locator("g.ytick text").all_text_contents()
        assert sorted(rows) == [
            "#0 fp16.onnx (CPU, all) · FAIL · float16 rounding",
            "#1 bug.onnx (CPU, all) · FAIL",
        ]
        marks = grid.locator("g.textpoint text").all_text_contents()
        assert sorted(marks) == ["≈", "≈", "✗", "✗"], marks
        # the amber trace holds the float16 row's cells and nothing of the bug's row
        traces = grid.evaluate(
            "g => g._fullData.map(t => ({name: t.name, y: t.y, z: t.z, scale: t.colorscale}))"
        )
        amber = next(t for t in traces if t["name"] == "intended")
        assert "#e3a008" in str(amber["scale"]), amber
        filled = {
            amber["y"][i]
            for i, row in enumerate(amber["z"])
            for v in row
            if v is not None and v == v  # NaN: no cell
        }
        assert filled == {"#0 fp16.onnx (CPU, all) · FAIL · float16 rounding"}

        # the sidebar's badges: the float16 file amber and named, the bug red
        fp16_badge = _badge_background(page, "FAIL · float16 rounding")
        bug_badge = _badge_background(page, "FAIL")
        assert fp16_badge != bug_badge, (fp16_badge, bug_badge)

        # the detail opens on the bug (red), not on the file that fails as meant (amber): the
        # story the page leads with is the real problem; its findings are its own
        main = page.locator('[data-testid="stMain"]')
        main.get_by_role("heading", name="In numbers").wait_for()
        text = main.inner_text()
        assert "a bug in the export" in text and "not a bug" not in text, text
        selector = main.locator('[data-testid="stSelectbox"]').filter(has_text="Candidate")
        selector.click()
        page.get_by_role("option", name=re.compile(r"^#0 fp16\.onnx")).click()
        settle(page)
        main.get_by_text(re.compile("pooled fails .*float16 rounding")).first.wait_for()

        # "In numbers": short lines, one fact each, the cause in the head
        text = main.inner_text()
        assert "pooled fails (float16 rounding, what the file was meant to do)" in text
        assert re.search(r"Out of tolerance: [\d,]+ of [\d,]+ elements \([\d.]+%\) at atol", text)
        assert re.search(r"Worst: off by \S+ \(reference \S+, ONNX \S+\), [\d,.]+ times", text)
        assert "not a bug" in text and "a bug in the export" not in text  # #0's findings only
        shot(page, "intended-overview")

        # Inspect names the cause beside the status, as the grid does
        page.get_by_role("button", name=re.compile("Inspect the worst failure")).click()
        page.get_by_role("heading", name="Inspect an output").wait_for()
        settle(page)
        said = page.locator('[data-testid="stMain"]').inner_text()
        assert "FAIL (float16 rounding, what the file was meant to do) · " in said
    finally:
        page.context.close()


def test_the_html_report_draws_the_float16_file_amber_and_the_bug_red(fp16_and_bug, chromium):
    _, html = fp16_and_bug
    page = open_page(chromium, html.as_uri(), viewport={"width": 1280, "height": 2400})
    try:
        page.locator("table.candidates").wait_for()
        statuses = page.locator("table.candidates tr td.status").all_text_contents()
        assert statuses == ["FAIL · float16 rounding", "FAIL"], statuses
        colour = page.locator("table.candidates tr.intended td.status").evaluate(
            "e => getComputedStyle(e).backgroundColor"
        )
        assert colour == AMBER
        assert page.locator("table.side td.intended").count() == 2
        assert page.locator("table.side td.bad").count() == 2
        cells = page.locator("table.side td.intended").all_text_contents()
        assert all(c.endswith("float16 rounding") for c in cells), cells
        lead = page.locator("ul.lead > li")
        assert lead.count() >= 2
        first = lead.first.locator("li").all_text_contents()  # one fact a line
        assert first[0].startswith("Out of tolerance: ") and first[1].startswith("Worst: ")
        assert all(len(line.split()) <= 24 for line in first), first
        page.screenshot(path=str(ARTIFACTS / "intended-html-report.png"), full_page=True)
    finally:
        page.context.close()


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> Path:
    """The digits CNN with class 0's bias +6, run on the held-out digits, saved."""
    import parity
    from parity.reports.saved_run import save_run
    from tests.helpers.digits import build
    from tests.helpers.plant_bug import plant

    digits = build(tmp_path_factory.mktemp("digits"))
    bug = digits.folder / "bug.onnx"
    plant(digits.onnx, bug, "/fc/Gemm", "bias", 6.0)
    run = parity.validate(
        digits.model, str(bug), weights=str(digits.weights), data=str(digits.test_npz)
    )
    return save_run(run, digits.folder / "digits.parity.npz")


def _row_of(run_path: Path, *, kept: bool) -> tuple[int, int]:
    """(row in the changed samples table, sample number) of the first changed sample whose
    arrays the run kept (or did not keep)."""
    from parity.reports.saved_run import load_run

    (o,) = load_run(run_path).data.outputs
    numbers = {w.sample for w in o.worst}
    row = next(k for k, f in enumerate(o.flips) if (f.sample in numbers) == kept)
    return row, o.flips[row].sample


def _click_row(page, table, row: int) -> None:
    """Select row `row` of a st.dataframe (a canvas: its row marker column, header and row
    heights as tests/test_browser_sweep.py measures them)."""
    box = table.bounding_box()
    page.mouse.click(box["x"] + MARKER_X, box["y"] + HEADER_PX + ROW_PX * row + ROW_PX / 2)


def test_a_changed_sample_opens_in_inspect(digits_run, chromium, app_url):
    page = open_page(
        chromium,
        f"{app_url}/samples?run={urllib.parse.quote(str(digits_run))}",
        viewport={"width": 1280, "height": 2000},
    )
    try:
        settle_loaded(page)
        page.get_by_role("heading", name="Changed samples").wait_for()
        table = page.locator('[data-testid="stDataFrame"]').first
        table.scroll_into_view_if_needed()
        settle(page)
        shot(page, "samples-page")

        row, number = _row_of(digits_run, kept=False)  # arrays not kept: said, no jump
        _click_row(page, table, row)
        settle(page)
        page.get_by_text(re.compile(f"Sample {number} cannot be opened in Inspect")).wait_for()

        row, number = _row_of(digits_run, kept=True)
        table = page.locator('[data-testid="stDataFrame"]').first
        _click_row(page, table, row)
        page.get_by_role("heading", name="Inspect an output").wait_for()
        settle(page)
        main = page.locator('[data-testid="stMain"]')
        main.get_by_text(re.compile(f"^sample {number} · ")).first.wait_for()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        settle(page)
        text = main.inner_text()
        assert "the run kept its values" in text and "x (1, 8, 8) float32" in text
        assert main.locator('[data-testid="stImage"]').count() >= 1  # the digit itself
        shot(page, "samples-inspect")

        main.get_by_role("button", name="Back to the outputs").click()
        settle(page)
        assert "the run kept its values" not in main.inner_text()
    finally:
        page.context.close()


def test_a_data_runs_worst_failure_opens_a_sample_and_its_histogram_reads_values(
    digits_run, chromium, app_url, tmp_path
):
    """A data run keeps its worst samples' values, not its batches': the Overview's button
    opened a batch in Inspect ("holds no values ... nothing to draw"); it opens the worst
    sample, and Inspect on a batch points to the Samples page. The per-sample histogram's
    log axis read "5 6 7 8 9 0.1 2 3" and put "typical error" far right of its line."""
    page = open_page(
        chromium,
        f"{app_url}/samples?run={urllib.parse.quote(str(digits_run))}",
        viewport={"width": 1280, "height": 1600},
        accept_downloads=True,
    )
    try:
        settle_loaded(page)
        # the HTML report says why a batch has no element-wise view (not "cannot be compared")
        with page.expect_download() as info:
            sidebar = page.locator('[data-testid="stSidebar"]')
            sidebar.get_by_role("button", name="Download HTML report").click()
        html = tmp_path / "report.html"
        info.value.save_as(html)
        report = html.read_text()
        assert "keeps the values of its worst samples, not of every batch" in report
        assert "cannot be compared element by element" not in report
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 1")
        axis = page.locator(".js-plotly-plot").first.evaluate(
            "g => ({range: g._fullLayout.xaxis.range, text: g._fullLayout.xaxis.ticktext,"
            " notes: g._fullLayout.annotations.map(a => [a.text, a.x])})"
        )
        shown = [float(t) for t in axis["text"]]  # every label a whole value
        assert shown == sorted(shown) and len(shown) >= 2, axis
        (note,) = [x for text, x in axis["notes"] if text == "typical error"]
        low, high = axis["range"]  # log10 units, as the annotation's x
        assert low <= note <= high, axis

        nav(page, "Inspect")
        main = page.locator('[data-testid="stMain"]')
        main.get_by_text(re.compile("open one from the Samples page")).wait_for()
        assert "nothing to draw" not in main.inner_text()

        nav(page, "Overview")
        page.get_by_role("button", name=re.compile("Inspect the worst sample")).click()
        page.get_by_role("heading", name="Inspect an output").wait_for()
        settle(page)
        main.get_by_text(re.compile(r"^sample \d+ · output ")).first.wait_for()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        shot(page, "samples-worst-from-overview")
    finally:
        page.context.close()


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """`parity sweep` over the float16 file and the buggy copy, one pair each, and the buggy
    copy again at a tolerance loose enough to pass it ("loose")."""
    from parity.cli import main
    from tests.helpers.sweep_zoo import write_manifest

    zoo = tmp_path_factory.mktemp("intended_sweep")
    _exports(zoo)
    (zoo / "loose.json").write_text('{"default": {"atol": 10, "rtol": 0}}')
    common = ["--model", "demo:fp16", "--noise-floor", "--input-sets", "1", "--onnx"]
    manifest = write_manifest(
        zoo, [{"name": "fp16", "args": [*common, "fp16.onnx"]},
              {"name": "bug", "args": [*common, "bug.onnx"]},
              {"name": "loose", "args": [*common, "bug.onnx", "--tolerances", "loose.json"]}],
    )  # fmt: skip
    out = zoo / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "2"]) == 1
    return out


def _rows(table) -> list[list[str]]:
    """A st.dataframe's rows as shown, header first (its accessibility table)."""
    table.locator("tr").nth(1).wait_for(state="attached")
    return [r.locator("th, td").all_inner_texts() for r in table.locator("tr").all()]


def test_the_sweep_names_the_float16_pair_by_its_cause(sweep_dir, chromium, app_url):
    page = open_page(
        chromium,
        f"{app_url}/?sweep={urllib.parse.quote(str(sweep_dir))}",
        viewport={"width": 1400, "height": 1400},
    )
    try:
        page.get_by_role("heading", name="Sweep", exact=True).wait_for()
        settle(page)
        said = page.locator('[data-testid="stMain"]').inner_text()
        # a pass whose report found a bug its tolerance hides is red and counted so (it was
        # a green "✓ pass" beside the same file's red fail)
        assert (
            "3 pair(s): 1 pass (1 with a bug the tolerance hides), "
            "2 fail (1 only by what its file was meant to do)"
        ) in said, said
        tables = page.locator('[data-testid="stDataFrame"]')
        pairs = _rows(tables.nth(0))
        verdicts = {r[0]: r[1] for r in pairs[1:]}
        assert verdicts == {
            "fp16": "≈ fail: float16 rounding",
            "bug": "✗ fail",
            "loose": "✗ pass: a bug the tolerance hides",
        }
        grid = _rows(tables.nth(1))
        by_pair = {r[0]: r[1:] for r in grid[1:]}
        assert all(c.startswith("≈ float16 rounding ") for c in by_pair["fp16"]), by_pair
        assert all(c.startswith("✗ fail ") for c in by_pair["bug"]), by_pair
        assert any(c.startswith("✗ pass: a bug the tolerance hides") for c in by_pair["loose"])
        shot(page, "intended-sweep")
    finally:
        page.context.close()
