"""Issue 36, memory: --max-memory covers the float64 copy of --noise-floor and the API's
in-memory feeds, refused in one line before anything is allocated.

A .pt2 with 1.1 GiB of weights peaked at 4.9 GB with `--max-memory 2G --noise-floor` (the
float64 copy was never budgeted); a zero-stride `np.broadcast_to(..., (2**31, 4))` given to
validate() became a raw 32 GiB MemoryError.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parity.errors import BudgetError
from tests.test_security_io import Ran, one_error_line


def test_noise_floor_copy_over_max_memory_is_refused_in_one_line(
    model_zoo, tiny_artifacts, capsys
) -> None:
    from parity.cli import main

    args = ["validate", "--model", model_zoo.spec("make_tiny"), "--onnx", str(tiny_artifacts.onnx)]
    assert main([*args, "--max-memory", "150"]) == 0  # the run alone fits the budget
    capsys.readouterr()
    code = main([*args, "--max-memory", "150", "--noise-floor"])
    captured = capsys.readouterr()

    line = one_error_line(Ran(code, captured.err))
    assert "the float64 copy of the model for --noise-floor needs 180 B" in line, line
    assert "over the 150 B memory budget" in line and captured.out == ""


def test_float64_bytes_counts_the_copy_and_its_float64_tensors() -> None:
    from parity.run.float64 import float64_bytes

    model = torch.nn.Linear(4, 3)  # 15 float32 numbers: a 60 B copy and 120 B in float64
    model.register_buffer("steps", torch.zeros(5, dtype=torch.int64))  # copied, not cast
    assert float64_bytes(model) == 60 + 120 + 40


def test_hf_noise_floor_copy_is_budgeted_too() -> None:
    from parity.hf.float64 import float64_calls

    with pytest.raises(BudgetError, match="float64 copy of the model for --noise-floor"):
        float64_calls(torch.nn.Linear(64, 64), [], max_memory=1024)
    assert float64_calls(torch.nn.Linear(4, 3), [], max_memory=1024) == ((), "")


def test_a_zero_stride_feed_is_refused_before_it_is_copied(model_zoo) -> None:
    import parity

    tiny = model_zoo.build("make_tiny")
    huge = np.broadcast_to(np.float32(1.0), (2**31, 4))  # 32 GiB once copied, 4 bytes now
    with pytest.raises(BudgetError) as raised:
        parity.validate(tiny, _tiny_onnx(tiny), inputs={"x": huge})
    message = raised.value.message
    assert "inputs[0]['x'] (float32 [2147483648, 4], once copied) needs 32.0 GiB" in message
    assert "\n" not in message


def test_api_max_memory_budgets_given_feeds(model_zoo) -> None:
    import parity

    tiny = model_zoo.build("make_tiny")
    onnx_file = _tiny_onnx(tiny)
    feeds = [{"x": np.ones((200, 4), np.float32)}, {"x": torch.ones(200, 4)}]  # 3.2 kB each
    with pytest.raises(BudgetError, match=r"inputs\[1\]\['x'\].*over the 4.0 KiB memory budget"):
        parity.validate(tiny, onnx_file, inputs=feeds, max_memory="4K")
    assert parity.validate(tiny, onnx_file, inputs=feeds, max_memory="8K").passed


_ONNX: dict[int, bytes] = {}


def _tiny_onnx(module: torch.nn.Module) -> bytes:
    """Tiny's export as bytes (made once, with the legacy exporter: fast)."""
    import io

    if not _ONNX:
        buffer = io.BytesIO()
        torch.onnx.export(
            module, (torch.randn(2, 4),), buffer, input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch"}}, dynamo=False,
        )  # fmt: skip
        _ONNX[0] = buffer.getvalue()
    return _ONNX[0]


EXITS_IN_FLOAT64 = """
import sys

import torch


class ExitsInFloat64(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        if x.dtype == torch.float64:
            sys.exit(7)
        return self.fc(x)


def make():
    torch.manual_seed(0)
    return ExitsInFloat64()
"""


def test_a_model_that_exits_in_float64_keeps_the_verdict(tmp_path, capsys) -> None:
    """sys.exit(7) inside the float64 run made Parity exit 7 silently."""
    from parity.cli import main

    factory = tmp_path / "exits.py"
    factory.write_text(EXITS_IN_FLOAT64)
    onnx_file = tmp_path / "exits.onnx"
    import importlib.util

    spec = importlib.util.spec_from_file_location("exits", factory)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.onnx.export(
        module.make(), (torch.randn(2, 4),), str(onnx_file), input_names=["x"],
        output_names=["y"], dynamic_axes={"x": {0: "batch"}}, dynamo=False,
    )  # fmt: skip
    code = main(["validate", "--model", f"{factory}:make", "--onnx", str(onnx_file),
                 "--noise-floor"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    from parity.load.onnx_model import load_onnx
    from parity.load.torch_model import load_torch_model
    from parity.results import InputSet
    from parity.run.float64 import float64_model, run_float64

    double = float64_model(load_torch_model(f"{factory}:make"))
    arrays, note = run_float64(
        double.model,
        InputSet(0, {"x": np.ones((2, 4), np.float32)}),
        load_onnx(onnx_file).signature,
    )
    assert arrays is None and note.endswith("(it called sys.exit(7))")
