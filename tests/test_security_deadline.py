"""Issue 36: the in-process time limit covers ONNX Runtime's session setup.

A 35 MB file of 10^6 Relu nodes ran past 120 s with a 10 s limit in the dashboard: the
setup alone took 193 s, and nothing looked at the deadline until it returned. ONNX Runtime
cannot stop a setup, so the session factory (parity.load.sessions) waits for it only until
the run's deadline: the run raises RunTimeout, saying the setup was abandoned, while a
background thread lets ONNX Runtime finish it.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from parity.errors import RunTimeout

SETUP_THREAD = "parity ONNX Runtime's session setup"


def _relu_chain(path: Path, n: int) -> Path:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"relu{i}") for i in range(n)]
    graph = helper.make_graph(
        nodes,
        "relus",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def many_nodes(tmp_path_factory) -> Path:
    """20,000 Relu nodes: read in a fraction of a second, a session setup of seconds."""
    return _relu_chain(tmp_path_factory.mktemp("relus") / "relus.onnx", 20_000)


@pytest.fixture(scope="module")
def pair(many_nodes: Path) -> tuple[str, str]:
    """The file and a copy: ONNX against ONNX (a reference and a candidate)."""
    import shutil

    copy = many_nodes.with_name("relus_copy.onnx")
    shutil.copyfile(many_nodes, copy)
    return str(many_nodes), str(copy)


def _wait_for_abandoned_setups() -> None:
    """Let the abandoned setups end, so they do not take the CPU from the next test."""
    for thread in threading.enumerate():
        if thread.name == SETUP_THREAD:
            thread.join(600)


def test_a_session_setup_past_the_time_limit_is_a_timeout(pair: tuple[str, str]) -> None:
    """The file is read before the clock starts (a loader that returns it loaded), so what
    runs into the limit is the session's setup."""
    from parity.load.onnx_model import load_onnx
    from parity.pipeline import RunConfig, run_validation
    from parity.run.config import default_loaders

    models = {path: load_onnx(path) for path in pair}
    loaders = replace(default_loaders(), load_onnx=lambda path: models[str(path)])
    config = RunConfig(model=None, onnx=pair, timeout=0.2)
    try:
        with pytest.raises(RunTimeout) as raised:
            run_validation(config, loaders=loaders)
        message = raised.value.message
        # What it means: the run ends at its limit in one line. Under load the limit can pass
        # before the setup starts (then an earlier stage says so); when the setup is what ran
        # into it, the setup is said to be abandoned, never waited for.
        assert message.startswith("timed out after 0.2 s") and "\n" not in message
        if "session setup" in message:  # in process, or first in the crash probe's child
            assert "session setup was abandoned (it" in message
    finally:
        _wait_for_abandoned_setups()


def test_without_a_time_limit_the_same_files_run(pair: tuple[str, str]) -> None:
    from parity.pipeline import RunConfig, run_validation

    run = run_validation(RunConfig(model=None, onnx=pair))
    assert run.verdict == "pass" and run.comparisons[0].stats.max_abs == 0.0


def test_the_api_timeout_covers_the_setup_too(many_nodes: Path) -> None:
    """validate(timeout=...) is the same deadline (here it may also pass while reading)."""
    import torch

    import parity

    class Identity(torch.nn.Module):
        def forward(self, v0):
            return torch.relu(v0)

    try:
        with pytest.raises(RunTimeout, match=r"^timed out after 0\.3 s"):
            parity.validate(Identity(), many_nodes, timeout=0.3)
    finally:
        _wait_for_abandoned_setups()


def test_deadline_call_hands_back_the_value_or_the_error() -> None:
    from parity.limits.deadline import Deadline

    assert Deadline(None).call(lambda: 7, "x") == 7
    assert Deadline(60).call(lambda: 8, "x") == 8
    with pytest.raises(ZeroDivisionError):
        Deadline(60).call(lambda: 1 / 0, "x")
    gate = threading.Event()
    with pytest.raises(RunTimeout, match="waiting for the gate was abandoned"):
        Deadline(0.05).call(gate.wait, "waiting for the gate")
    gate.set()


def test_the_run_pages_time_limit_covers_the_session_setup(tmp_path: Path) -> None:
    """What a dashboard user gets: the error line says the setup was abandoned, and the
    last good run stays the current one."""
    import torch
    from streamlit.testing.v1 import AppTest

    class Relu(torch.nn.Module):
        def forward(self, v0):
            return torch.relu(v0)

    pt2 = tmp_path / "relu.pt2"
    torch.export.save(torch.export.export(Relu(), (torch.zeros(1, 4),)), str(pt2))
    relus = _relu_chain(tmp_path / "relus40k.onnx", 40_000)
    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=300)
    at.run()
    at.button(key="demo_cnn").click().run()
    good = at.session_state["parity_run"]
    at.radio(key="model_source").set_value("Path on this machine").run()
    at.text_input(key="model_path").set_value(str(pt2)).run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").set_value(str(relus)).run()  # read here, before the clock
    at.number_input(key="timeout").set_value(1).run()
    try:
        at.button(key="run_custom").click().run()
    finally:
        _wait_for_abandoned_setups()
    assert not at.exception
    errors = [e.value.replace("\\", "") for e in at.error]  # markdown escapes dropped
    assert any(
        "(timeout): timed out after 1 s: ONNX Runtime's session setup was abandoned" in e
        for e in errors
    ), errors
    assert at.session_state["parity_run"] is good
