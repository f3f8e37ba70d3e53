"""The Run form's data set fields in headless Chromium: a user types their model (.pt2), its
export with a planted bias bug and their held-out digits with labels; Run judges the answers
on those samples (the Samples page appears, the Overview leads with the answer), a
preprocess function is refused before the click (code), and a reload keeps the data set in
the form. Screenshots: test-artifacts/data-form-*.png."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.helpers.browser import RUN_TIMEOUT_MS, nav, open_page, settle, settle_loaded, shot

pytestmark = pytest.mark.browser


@dataclass(frozen=True)
class DataCase:
    pt2: Path
    bug: Path
    npz: Path
    labels: Path
    samples: int
    changed: int  # answers the bug changes, counted here with torch and onnxruntime


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> DataCase:
    """The digits CNN as a .pt2 (no code to trust), its export with class 0's bias +6."""
    import onnxruntime as ort
    import torch

    from tests.helpers.digits import build
    from tests.helpers.plant_bug import plant

    digits = build(tmp_path_factory.mktemp("digits-form"))
    scope: dict = {}
    exec(compile((digits.folder / "digits_model.py").read_text(), "m", "exec"), scope)
    net = scope["make"]()
    net.load_state_dict(torch.load(digits.weights))
    net.eval()
    x = torch.from_numpy(digits.x_test)
    program = torch.export.export(net, (x[:4],), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    pt2 = digits.folder / "digits.pt2"
    torch.export.save(program, str(pt2))
    bug = digits.folder / "bug.onnx"
    plant(digits.onnx, bug, "/fc/Gemm", "bias", 6.0)
    with torch.no_grad():
        ref = net(x).numpy().argmax(1)
    got = ort.InferenceSession(str(bug), providers=["CPUExecutionProvider"])
    onnx = got.run(None, {"x": digits.x_test})[0].argmax(1)
    changed = int(np.count_nonzero(ref != onnx))
    assert 0 < changed < len(ref)  # the premise: the bug changes some answers, not all
    return DataCase(pt2, bug, digits.test_npz, digits.labels, len(ref), changed)


def _type(page, label, text: str) -> None:
    box = page.get_by_role("textbox", name=label)
    box.fill(text)
    box.press("Enter")
    settle(page)


def _run_off(page):
    return page.locator('[data-testid="stCaptionContainer"]').filter(has_text="Run is off")


def test_a_run_on_your_data_from_the_form(case, chromium, app_url) -> None:
    page = open_page(chromium, app_url, viewport={"width": 1280, "height": 1400})
    try:
        page.get_by_role("button", name="Run demo:cnn").wait_for()
        settle_loaded(page)
        radio = page.locator('[data-testid="stRadio"]').filter(has_text="PyTorch model")
        radio.get_by_text("Path on this machine").click()
        settle(page)
        _type(page, re.compile("^Model"), str(case.pt2))
        onnx = page.locator('[data-testid="stRadio"]').filter(has_text="ONNX file")
        onnx.get_by_text("Path on this machine").click()
        settle(page)
        _type(page, "ONNX path", str(case.bug))
        page.get_by_text("ONNX signature").wait_for()
        assert page.get_by_label("Input sets").count() == 1  # generated inputs until a data set
        _type(page, re.compile("^Data set"), str(case.npz))
        assert page.get_by_label("Input sets").count() == 0  # its samples are the inputs
        _type(page, re.compile("^Labels"), str(case.labels))

        _type(page, re.compile("^Preprocess"), "load_digits.py:load")  # code: refused first
        why = _run_off(page)
        assert "is code" in why.inner_text() and "--trust-code" in why.inner_text()
        assert page.get_by_role("button", name="Run", exact=True).is_disabled()
        _type(page, re.compile("^Preprocess"), "")
        assert _run_off(page).count() == 0
        shot(page, "data-form-filled")

        page.get_by_role("button", name="Run", exact=True).click()
        sidebar = page.locator('[data-testid="stSidebar"]')  # the new run is the current one
        sidebar.get_by_text(re.compile(r"digits\.pt2$")).wait_for(timeout=RUN_TIMEOUT_MS)
        settle(page)
        said = sidebar.inner_text()
        assert "FAIL" in said
        batches = -(-case.samples // 64)
        assert f"{case.samples} samples in {batches} batches" in said, said  # not "input sets"
        shot(page, "data-form-ran")
        nav(page, "Overview")
        main = page.locator('[data-testid="stMain"]')
        said = main.get_by_text(re.compile(f"^On {case.samples} of your samples")).first
        said.wait_for()
        assert f"{case.changed}" in said.inner_text(), said.inner_text()
        nav(page, "Samples")  # listed while the run is a data run
        page.get_by_role("heading", name="Changed samples").wait_for()
        shot(page, "data-form-samples")

        nav(page, "Run")
        page.reload()
        settle_loaded(page)
        box = page.get_by_role("textbox", name=re.compile("^Data set"))
        expect(box).to_have_value(str(case.npz), timeout=20_000)  # Run makes the same run
        labels = page.get_by_role("textbox", name=re.compile("^Labels"))
        expect(labels).to_have_value(str(case.labels), timeout=20_000)
    finally:
        page.context.close()
