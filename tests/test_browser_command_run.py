"""`parity dashboard --model models.py:make --onnx logits.onnx` without --trust-code, then in
Chromium (issue 60): the user typed that factory, so the Run form may make it again and
Suggest checks its tolerances on fresh input sets; another factory typed in the form is
refused before the click, with why; the suggestion names no CLI flag. Screenshots:
test-artifacts/command-run-*.png.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, ROOT, RUN_TIMEOUT_MS, free_port, nav, serving, settle

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1400, "height": 1600}

MODELS = textwrap.dedent(
    """
    import torch


    class Logits(torch.nn.Module):
        '''Logit 3 reaches a few hundred: float32 rounds it past atol 1e-5.'''

        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(32, 256)
            self.b = torch.nn.Linear(256, 16)
            scale = torch.ones(16)
            scale[3] = 400.0
            self.register_buffer("scale", scale)

        def forward(self, x):
            return self.b(torch.relu(self.a(x))) * self.scale


    def make():
        torch.manual_seed(0)
        return Logits().eval()


    def other():
        return make()
    """
)


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    import torch

    root = tmp_path_factory.mktemp("command_run")
    (root / "models.py").write_text(MODELS)
    namespace: dict = {}
    exec(MODELS, namespace)  # noqa: S102 - the test's own model source
    onnx = root / "logits.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            namespace["make"](), (torch.randn(2, 32),), str(onnx), dynamo=False,
            input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "b"}},
        )  # fmt: skip
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "command-run-launcher.log"
    spec = f"{root / 'models.py'}:make"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "parity", "dashboard", "--model", spec, "--onnx", str(onnx),
             "--port", str(port)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            url = f"http://localhost:{port}"
            if not serving(url, proc, within_s=600):
                pytest.fail(f"parity dashboard did not start:\n{log.read_text()[-3000:]}")
            yield url, root
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_the_commands_factory_runs_again_and_another_is_refused_before_the_click(
    chromium, launched
):
    url, root = launched
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(RUN_TIMEOUT_MS)
    try:
        page.goto(url)
        page.get_by_text(re.compile(r"Opened models\.py")).first.wait_for()
        settle(page)
        main = page.locator('[data-testid="stMain"]')
        run = page.get_by_role("button", name="Run", exact=True)
        assert run.is_enabled()  # the command's own factory
        assert "Run is off" not in main.inner_text()
        page.screenshot(path=str(ARTIFACTS / "command-run-1-form.png"), full_page=True)

        nav(page, "Tolerances")
        page.get_by_role("button", name="Suggest", exact=True).click()
        page.get_by_text(re.compile(r"checked on \d+ fresh input set")).first.wait_for()
        settle(page)
        body = main.inner_text()
        assert "a reopened run is not made again" not in body, body[:3000]
        assert "As flags" not in body and "--suggest" not in body
        assert not re.search(r"--tol\b", body)  # the page applied them (--tolerances: its file)
        page.screenshot(path=str(ARTIFACTS / "command-run-2-suggest.png"), full_page=True)

        nav(page, "Run")
        field = main.get_by_label("Model", exact=True)
        field.fill(f"{root / 'models.py'}:other")
        field.press("Enter")
        settle(page)
        off = main.get_by_text(re.compile(r"Run is off"))
        off.wait_for()
        said = main.inner_text()
        assert "is a Python factory, which is code" in said, said[:3000]
        assert "parity dashboard --trust-code" in said
        assert run.is_disabled()
        off.scroll_into_view_if_needed()
        page.wait_for_timeout(600)
        page.screenshot(path=str(ARTIFACTS / "command-run-3-refused.png"), full_page=True)
    finally:
        context.close()
