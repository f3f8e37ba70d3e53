"""Code-bearing models in the dashboard: refused unless the app was started with --trust-code.

The factory file touches a marker when imported, so "refused" means its code never ran.
AppTest runs the script in this process: the flag is the `streamlit run app.py --
--trust-code` argument, i.e. sys.argv.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.dashboard.access import TRUST_FLAG

APP = str(Path(__file__).resolve().parents[1] / "app.py")

FACTORY = """
from pathlib import Path

from torch import nn

Path({marker!r}).write_text("factory code ran")


def build():
    return nn.Linear(4, 3)
"""


@pytest.fixture
def factory(tmp_path) -> tuple[str, Path]:
    marker = tmp_path / "ran.txt"
    source = tmp_path / "payload_factory.py"
    source.write_text(FACTORY.format(marker=str(marker)))
    return f"{source}:build", marker


def _run_model(spec: str, onnx: Path) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.radio(key="model_source").set_value("Path on this machine").run()
    at.text_input(key="model_path").set_value(spec).run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").set_value(str(onnx)).run()
    if not at.button(key="run_custom").disabled:  # a model this dashboard may not run: off
        at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    return at


def _model_upload_types(at: AppTest) -> list[str]:
    at.radio(key="model_source").set_value("Upload").run()
    (widget,) = [el for el in at.get("file_uploader") if el.proto.label.startswith("Model file")]
    return list(widget.proto.type)


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_untrusted_dashboard_refuses_factories_and_torchscript_in_one_line(
    factory, tiny_artifacts, monkeypatch
):
    monkeypatch.setattr(sys, "argv", ["app.py"])
    spec, marker = factory
    for model, what in (
        (spec, "a Python factory"),
        (str(tiny_artifacts.torchscript), "TorchScript"),
    ):
        at = _run_model(model, tiny_artifacts.onnx)
        # said before the click: Run is off, and why
        assert at.button(key="run_custom").disabled
        (why,) = [c.value for c in at.caption if "Run is off" in c.value]
        shown = why.replace("\\", "").replace("`--`", "--")  # md_text's escapes
        assert f"is {what}, which is code" in shown, why
        assert "parity dashboard --trust-code" in shown, why
        assert "streamlit run app.py -- --trust-code" in shown, why
        assert _errors(at) == [] and "parity_run" not in at.session_state
    assert not marker.exists()
    assert _model_upload_types(at) == [".pt2"]  # the upload widget takes no TorchScript
    # a .pt2 is read without running code: still allowed
    at = _run_model(str(tiny_artifacts.pt2), tiny_artifacts.onnx)
    assert _errors(at) == [] and at.session_state["parity_run"].verdict == "pass"


def test_trusted_dashboard_runs_a_factory(factory, tiny_artifacts, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["app.py", TRUST_FLAG])
    spec, marker = factory
    at = _run_model(spec, tiny_artifacts.onnx)
    assert marker.read_text() == "factory code ran"
    assert at.session_state["parity_run"].model == spec
    assert _model_upload_types(at) == [".pt2", ".pt", ".pth", ".ts", ".jit"]


def test_the_model_the_command_line_gave_runs_without_trust(factory, tiny_artifacts, monkeypatch):
    """`parity dashboard --model FILE.py:build ...` typed by the user: that very spec runs
    again from the Run page (another factory still does not)."""
    from parity.launch import COMMAND_MODEL_ENV

    monkeypatch.setattr(sys, "argv", ["app.py"])
    spec, marker = factory
    monkeypatch.setenv(COMMAND_MODEL_ENV, spec)
    at = _run_model(spec, tiny_artifacts.onnx)
    assert marker.read_text() == "factory code ran"
    assert at.session_state["parity_run"].model == spec
    monkeypatch.setenv(COMMAND_MODEL_ENV, spec + "_other")
    marker.unlink()
    at = _run_model(spec, tiny_artifacts.onnx)
    assert at.button(key="run_custom").disabled and not marker.exists()
