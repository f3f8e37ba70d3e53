"""A BERT exported in train mode, on the pages (issue 60): the saved run of
`parity validate --ort-opt-level disable --layers` opened in Chromium (?run=PATH): the Overview
says the file was exported in training mode, first; the Layers page places the error among the
unmatched nodes feeding the attention's Reshape, the Dropout among them, never at the Reshape.
Screenshots: test-artifacts/train-mode-*.png."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, settle
from tests.test_training_mode import bert_in_train_mode  # noqa: F401 - the module fixture

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1400, "height": 2000}


@pytest.fixture(scope="module")
def saved(bert_in_train_mode, tmp_path_factory) -> Path:  # noqa: F811
    from parity.pipeline import run_validation
    from parity.reports.saved_run import save_run
    from parity.run.config import RunConfig

    directory, onnx_path = bert_in_train_mode
    run = run_validation(
        RunConfig(model=f"hf:{directory}", onnx=onnx_path, ort_opt_level="disable", layers=True)
    )
    return save_run(run, tmp_path_factory.mktemp("train_saved") / "bert.parity.npz")


def test_the_overview_and_the_layers_page_say_the_train_mode_export(saved, chromium, app_url):
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{app_url}/overview?run={urllib.parse.quote(str(saved))}")
        page.get_by_text("exported in training mode").first.wait_for()
        settle(page)
        body = page.locator('[data-testid="stMain"]').inner_text()
        assert "2 Dropout node(s) have training_mode true" in body, body[:3000]
        page.screenshot(path=str(ARTIFACTS / "train-mode-overview.png"), full_page=True)

        page.locator('[data-testid="stSidebarNav"] a', has_text="Layers").first.click()
        page.get_by_role("heading", name="Layers").first.wait_for()
        page.get_by_text("only moves data").first.wait_for()
        settle(page)
        body = page.locator('[data-testid="stMain"]').inner_text()
        assert "among the" in body and "Dropout" in body, body[:3000]
        page.screenshot(path=str(ARTIFACTS / "train-mode-layers.png"), full_page=True)
    finally:
        context.close()
