"""The real app in headless Chromium: what a newcomer does in their first minute.

Drives the session's `streamlit run app.py` with Playwright (Debian's chromium, one browser
context: one Streamlit session) and saves a screenshot of every page under test-artifacts/.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from playwright import sync_api

from tests.helpers.browser import RUN_TIMEOUT_MS, nav, run_demo, settle, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # slow: a minute of pages, first of its group

VIEWPORT = {"width": 1500, "height": 2400}  # tall: a screenshot shows each page whole


@pytest.fixture(scope="module")
def page(chromium, app_url: str):
    context = chromium.new_context(viewport=VIEWPORT, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    pg.goto(app_url)
    pg.get_by_role("button", name="Run demo:cnn").wait_for()
    yield pg
    context.close()


def _text(page, testid: str) -> str:
    return " ".join(page.locator(f'[data-testid="{testid}"]').all_inner_texts())


def test_newcomer_finds_the_broken_output_and_where_it_fails(page):
    page.get_by_text("Execution provider").wait_for()  # the settings below the signature
    shot(page, "01-run-first-open")
    run_demo(page, "broken")
    body = page.locator("body").inner_text()
    assert re.search(r"Failing outputs, worst first:\s+mask fails in 2 of 2 input sets", body)
    shot(page, "02-run-after-broken")

    nav(page, "Overview")
    body = page.locator("body").inner_text()
    assert "FAIL" in body and "The export does not match PyTorch" in body
    page.locator(".js-plotly-plot").first.wait_for()
    shot(page, "03-overview-broken")

    page.get_by_role("button", name=re.compile("Inspect the worst failure")).click()
    page.get_by_role("heading", name="Inspect an output").wait_for()
    settle(page)
    heatmap = page.locator(".js-plotly-plot .heatmaplayer image").first
    heatmap.wait_for(state="attached")
    # heatmap, side-by-side panels, histogram, scatter
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 4")
    body = page.locator("body").inner_text()
    assert "FAIL · mask in set 0" in body and "Worst 25 elements" in body
    shot(page, "04-inspect-broken-mask")


def test_a_tolerance_slider_rejudges_every_output_and_fp16_passes(page, tmp_path):
    run_demo(page, "fp16")
    nav(page, "Tolerances")
    page.get_by_text("0 of 2 output(s) pass the tolerance in every input set").wait_for()
    shot(page, "05-tolerances-fp16-fail")

    slider = page.get_by_role("slider").first  # global atol
    slider.focus()
    for _ in range(15):  # 1e-5 -> 1 on the 1-2-5 ladder, one step per key press
        page.keyboard.press("ArrowRight")
    page.get_by_text("2 of 2 output(s) pass the tolerance in every input set").wait_for(
        timeout=60_000
    )
    settle(page)
    # the sidebar's badge follows in the same rerun (it said FAIL before)
    page.locator('[data-testid="stSidebar"]').get_by_text("PASS", exact=True).wait_for()
    shot(page, "06-tolerances-fp16-pass")

    with page.expect_download() as info:
        page.get_by_role("button", name=re.compile("Download tolerances JSON")).click()
    saved = tmp_path / "tolerances.json"
    info.value.save_as(saved)
    data = json.loads(saved.read_text())
    assert set(data) == {"default", "outputs"}
    assert data["default"]["atol"] >= 0.01

    from parity.tolerances import Tolerances

    Tolerances.load(saved)  # the file `parity validate --tolerances` reads


def test_a_corrupt_onnx_upload_turns_run_off_with_its_cause_and_keeps_the_last_good_run(
    page, tmp_path
):
    run_demo(page, "cnn")
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"\x08\x07not an onnx model at all" * 20)
    onnx_radio = page.locator('[data-testid="stRadio"]').filter(has_text="ONNX file")
    onnx_radio.get_by_text("Upload").click()
    uploader = page.locator('[data-testid="stFileUploader"]').filter(has_text="ONNX file")
    uploader.wait_for()
    uploader.locator('input[type="file"]').set_input_files(bad)
    page.get_by_text("Cannot read this ONNX file").wait_for()
    page.get_by_text("Run is off, the ONNX file cannot be read:").wait_for()
    settle(page)
    assert page.get_by_role("button", name="Run", exact=True).is_disabled()
    body = page.locator("body").inner_text()
    assert "PASS" in body and "demo:cnn" in body
    shot(page, "07-run-corrupt-upload")


def _save_with_external_data(onnx_file: Path, folder: Path, name: str) -> tuple[Path, Path]:
    """The demo's export re-saved as `name` + `name.data` (every weight in the data file),
    as torch.onnx.export(..., dynamo=True) writes a model with external data."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    model, data = folder / name, folder / f"{name}.data"
    onnx.save(
        onnx.load(str(onnx_file)),
        str(model),
        save_as_external_data=True,
        location=data.name,
        # tensors from 1 KB, as the exporter does: with size_threshold=0 the small constants
        # (ReduceMean's axes) move out too, and ONNX Runtime refuses to read those from a file
        size_threshold=1024,
    )
    assert data.stat().st_size > 1000  # the weights are there, not in the .onnx
    return model, data


def _onnx_uploader(page):
    """The Run page's ONNX uploader (the "Upload" choice), emptied of earlier files."""
    onnx_radio = page.locator('[data-testid="stRadio"]').filter(has_text="ONNX file")
    onnx_radio.get_by_text("Upload").click()
    uploader = page.locator('[data-testid="stFileUploader"]').filter(has_text="ONNX file")
    uploader.wait_for()
    settle(page)
    delete = uploader.locator('[data-testid="stFileChipDeleteBtn"] button')
    while (n := delete.count()) > 0:
        delete.first.click()
        sync_api.expect(delete).to_have_count(n - 1)
        settle(page)
    return uploader


def _upload(page, files: list[Path]):
    uploader = _onnx_uploader(page)
    uploader.locator('input[type="file"]').set_input_files(files)
    for f in files:
        uploader.get_by_text(f.name, exact=True).wait_for()
    settle(page)
    return uploader


def _run_upload_and_pass(page, onnx_name: str) -> None:
    page.get_by_text("ONNX signature").wait_for()
    run = page.get_by_role("button", name="Run", exact=True)
    sync_api.expect(run).to_be_enabled()
    run.click()
    sidebar = page.locator('[data-testid="stSidebar"]')
    # the sidebar names the current run's ONNX file by the upload's own name, never by the
    # private folder it was written to
    sidebar.get_by_text(re.compile(rf"ONNX\s+{re.escape(onnx_name)}\b")).wait_for(
        timeout=RUN_TIMEOUT_MS
    )
    settle(page)
    assert "parity-uploads" not in sidebar.inner_text()
    sidebar.get_by_text("PASS", exact=True).wait_for()
    body = page.locator("body").inner_text()
    assert "Run failed" not in body and "Cannot read this ONNX file" not in body
    assert "Both outputs pass in every input set." in body


def test_an_onnx_with_external_data_uploads_as_two_files_or_a_zip_and_alone_says_what_is_missing(
    page, tmp_path
):
    from parity.load.demos import demo_onnx_path

    run_demo(page, "cnn")
    exported = demo_onnx_path("cnn")
    onnx_file, data_file = _save_with_external_data(exported, tmp_path / "two", "cnn.onnx")

    # the .onnx and its data file, selected together
    _upload(page, [onnx_file, data_file])
    _run_upload_and_pass(page, "cnn.onnx")
    shot(page, "08-run-upload-onnx-with-data")

    # a .zip of the export's folder (flattened beside each other)
    zipped_onnx, zipped_data = _save_with_external_data(exported, tmp_path / "zip", "model.onnx")
    archive = tmp_path / "cnn-export.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.write(zipped_onnx, "cnn-export/model.onnx")
        zf.write(zipped_data, "cnn-export/model.onnx.data")
    _upload(page, [archive])
    _run_upload_and_pass(page, "model.onnx")

    # two models at once: one line saying to upload one
    _upload(page, [onnx_file, zipped_onnx])
    page.get_by_text("2 .onnx files among the uploaded files (cnn.onnx, model.onnx)").wait_for()
    sync_api.expect(page.get_by_role("button", name="Run", exact=True)).to_be_disabled()

    # the .onnx alone: Run is off, and the cause names the missing data file, not a temp path
    _upload(page, [onnx_file])
    why = page.get_by_text("Run is off, the ONNX file cannot be read:")
    why.wait_for()
    settle(page)
    sync_api.expect(page.get_by_role("button", name="Run", exact=True)).to_be_disabled()
    cause = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="Run is off")
    sync_api.expect(cause).to_have_text(
        "Run is off, the ONNX file cannot be read: cannot load ONNX file cnn.onnx: its "
        "external-data file 'cnn.onnx.data' (tensor 'stem.4.weight') is missing; it must be "
        "beside the .onnx file"
    )
    main = page.locator('[data-testid="stMain"]').inner_text()  # the sidebar shows paths
    assert "uploads-" not in main and "onnx.checker" not in main and "/tmp" not in main
    assert "PASS" in main  # the last good run (the zip's) is still the current one
    shot(page, "09-run-upload-onnx-without-its-data")
