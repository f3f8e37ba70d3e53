"""Issue 53: a process that crashes speaks. ONNX Runtime 1.32's CPU session segfaults while
optimising (at the default level, "all") a float16 GRU file made by its own converter
(onnxruntime.transformers.float16): the session is opened first in a forked child, the
signal is named, and the run goes on at the highest level that opens, said. Real files, real
ONNX Runtime, a real SIGSEGV (in the child)."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest
import torch

from parity import validate
from parity.load.sessions import crash_of

CPU = "CPUExecutionProvider"


class Gru(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.g = torch.nn.GRU(8, 16, batch_first=True)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, h = self.g(x)
        return self.fc(y), h


def make_gru() -> torch.nn.Module:
    torch.manual_seed(0)
    return Gru().eval()


@pytest.fixture(scope="module")
def gru16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A legacy export converted to float16 by ONNX Runtime's converter (float32 inputs and
    outputs kept, so the float32 model compares with it)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    folder = tmp_path_factory.mktemp("gru16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(make_gru(), (torch.randn(1, 5, 8),), str(folder / "gru.onnx"),
                          dynamo=False, input_names=["x"], output_names=["y", "h"],
                          dynamic_axes={"x": {0: "b", 1: "t"}})  # fmt: skip
        half = convert_float_to_float16(onnx.load(str(folder / "gru.onnx")), keep_io_types=True)
    onnx.save(half, str(folder / "gru16.onnx"))
    return folder / "gru16.onnx"


def test_the_session_setup_crash_is_caught_in_a_child(gru16: Path) -> None:
    assert crash_of(gru16, provider=CPU, opt_level="all") == "SIGSEGV"
    assert crash_of(gru16, provider=CPU, opt_level="disable") is None


def test_the_run_goes_on_at_a_level_that_opens_and_says_so(gru16: Path) -> None:
    run = validate(make_gru(), str(gru16), atol=1e-2)
    (info,) = run.infos
    assert info.ort_opt_level == "extended"
    (said,) = [n for n in info.notes if "crashed" in n]
    assert "SIGSEGV" in said and "--ort-opt-level all" in said
    assert "--ort-opt-level extended" in said
    assert run.passed


SEG = '''
import ctypes
import torch


class Seg(torch.nn.Module):
    """Reads address 0 (a real SIGSEGV) when a forward hook watches its layer: --layers."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        if self.fc._forward_hooks:
            ctypes.string_at(0)
        return self.fc(x)


def make():
    torch.manual_seed(0)
    return Seg().eval()
'''


def test_the_console_says_a_native_crash_in_one_line(tmp_path: Path) -> None:
    """`parity validate` (python -m parity) runs in a supervised child: a segfault in the
    layers' torch pass ends in one line naming the signal, the step and what to try."""
    import os
    import subprocess
    import sys

    (tmp_path / "seg.py").write_text(SEG)
    scope: dict = {}
    exec(compile(SEG, "seg.py", "exec"), scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(scope["make"](), (torch.randn(2, 4),), str(tmp_path / "seg.onnx"),
                          dynamo=False, input_names=["x"], output_names=["y"])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PARITY_NO_SUPERVISE"}
    done = subprocess.run(
        [sys.executable, "-m", "parity", "validate", "--model", f"{tmp_path / 'seg.py'}:make",
         "--onnx", str(tmp_path / "seg.onnx"), "--layers"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("parity: error:")]
    assert "SIGSEGV" in line and "(layers)" in line and "without --layers" in line
