"""--noise-floor at the candidate's precision (issue 39): a float16 file is judged against
torch's own float16 error, an int8 file against its quantization noise, each output saying
its precision. Files come from ONNX Runtime's own float16 converter and quantizer, applied to
a torch conv net exported with torch.onnx."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from parity.api import validate
from parity.cli import main
from parity.judge.noise_floor import noise_lines, noise_sentence
from parity.judge.suggest import noise_suggestion_lines, suggest_noise_tolerances
from parity.load.file_precision import output_precisions
from parity.reports.saved_run import load_run
from parity.results import Noise
from parity.text import number_text
from tests.helpers.precision_models import quantize_qdq, to_float16


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.flatten(1))


@dataclass(frozen=True)
class Files:
    model: torch.nn.Module
    pt2: Path
    f32: Path
    f16: Path
    f16_bug: Path
    int8: Path
    int8_bug: Path


def _quantize(source: Path, path: Path, fmt: str = "QDQ") -> Path:
    """int8 with ONNX Runtime's quantizer, calibrated on 8 standard normal sets (seed 7)."""
    rng = np.random.default_rng(7)
    calibration = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
    return quantize_qdq(source, path, calibration=calibration, quant_format=fmt, reduce_range=True)


def _scaled(source: Path, path: Path, name: str, factor: float) -> Path:
    """`source` with initializer `name` multiplied by `factor` in its own dtype (a bug)."""
    model = onnx.load(str(source))
    (init,) = [t for t in model.graph.initializer if t.name == name]
    a = numpy_helper.to_array(init)
    init.CopyFrom(numpy_helper.from_array((a * factor).astype(a.dtype), name))
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    tmp = tmp_path_factory.mktemp("precision")
    torch.manual_seed(0)
    model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    f32 = tmp / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(f32), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "b"}})  # fmt: skip
        program = torch.export.export(model, (x,))
        torch.export.save(program, tmp / "net.pt2")
    f16 = to_float16(f32, tmp / "net16.onnx")
    int8 = _quantize(f32, tmp / "net8.onnx")
    # the planted int8 bug: the second conv's float weights x1.5, quantized with the same
    # calibration (a wrong weight in the model that was quantized)
    bug32 = _scaled(f32, tmp / "net-bug.onnx", "c2.weight", 1.5)
    return Files(
        model=model,
        pt2=tmp / "net.pt2",
        f32=f32,
        f16=f16,
        f16_bug=_scaled(f16, tmp / "net16-bug.onnx", "c2.weight", 1.5),
        int8=int8,
        int8_bug=_quantize(bug32, tmp / "net8-bug.onnx"),
    )


def _run(files: Files, onnx_path: Path, **kw):
    return validate(files.model, onnx_path, noise_floor=True, input_sets=2, **kw)


def test_each_output_says_the_precision_it_is_computed_at(files: Files) -> None:
    assert output_precisions(files.f32)["y"].precision == "float32"
    assert output_precisions(files.f16)["y"].precision == "float16"
    found = output_precisions(files.int8)["y"]
    assert found.precision == "int8" and found.scale is not None and found.scale > 0
    assert found.tensors >= 3  # x, the two ReLUs' outputs, y: each quantized on the way
    assert found.low is not None and found.high is not None and found.low < 0 < found.high


def test_a_mixed_file_takes_the_lowest_precision_upstream(files: Files, tmp_path: Path) -> None:
    """The last node kept in float32 (node_block_list) still reads float16 rounding."""
    mixed = to_float16(files.f32, tmp_path / "mixed.onnx", node_block_list=["/fc/Gemm"])
    found = output_precisions(mixed)["y"]
    assert found.precision == "float16" and found.node == "/fc/Gemm"


def test_a_benign_float16_conversion_is_within_float16_rounding(files: Files) -> None:
    run = _run(files, files.f16)
    for c in run.outputs:
        assert c.noise is not None and c.noise.precision == "float16", c.notes
        assert c.noise.ratio is not None and c.noise.ratio < 10, c.noise
        assert noise_sentence(c.noise).startswith("within float16 rounding: ")
        assert "torch's own float16 error" in noise_sentence(c.noise)
        assert c.noise.emulated.startswith("weights, inputs and each op's float output")  # CPU
    suggestion = suggest_noise_tolerances(run)
    assert suggestion.passed  # k x torch's float16 error passes the float16 file
    assert "atol = 2× torch's own float16 error" in noise_suggestion_lines(suggestion)[0]


def test_one_bugged_float16_weight_is_not_rounding(files: Files) -> None:
    run = _run(files, files.f16_bug)
    for c in run.outputs:
        assert c.noise.precision == "float16"
        assert c.noise.ratio >= 100, c.noise
        assert noise_sentence(c.noise).startswith("not rounding: ")
    lines = noise_suggestion_lines(suggest_noise_tolerances(run))
    assert any("a bug that no rounding tolerance should pass" in line for line in lines)


def test_an_int8_qdq_file_is_quantization_and_never_called_a_bug(files: Files) -> None:
    run = _run(files, files.int8)
    for c in run.outputs:
        assert c.noise is not None and c.noise.precision == "int8", c.notes
        assert c.noise.ratio is not None and c.noise.ratio <= 10, c.noise
        sentence = noise_sentence(c.noise)
        assert sentence.startswith("within int8 quantization: ")
        assert "sqrt(n) x scale/2" in sentence  # the formula is said
    text = "\n".join(noise_lines(run.outputs))
    text += "\n".join(noise_suggestion_lines(suggest_noise_tolerances(run)))
    assert "bug" not in text


def test_an_int8_file_of_a_bugged_model_is_more_than_quantization(files: Files) -> None:
    run = _run(files, files.int8_bug)
    for c in run.outputs:
        assert c.noise.precision == "int8" and c.noise.ratio > 10, c.noise
        assert noise_sentence(c.noise).startswith("more than int8 quantization noise: ")


def test_cli_json_and_saved_run_carry_the_precision(files: Files, tmp_path: Path, capsys) -> None:
    out, saved = tmp_path / "r.json", tmp_path / "s.parity"
    main(["validate", "--model", str(files.pt2), "--onnx", str(files.f16), "--noise-floor",
          "--json", str(out), "--save-run", str(saved)])  # fmt: skip
    text = capsys.readouterr().out
    assert "y: within float16 rounding: " in text
    noise = json.loads(out.read_text())["outputs"][0]["noise"]
    assert noise["precision"] == "float16" and noise["ratio"] < 10
    back = load_run(saved)
    assert back.comparisons[0].noise.precision == "float16"
    (line,) = noise_lines(back.comparisons)  # the same sentence from the reloaded run
    assert line in text


def test_the_noise_line_and_the_suggestion_use_the_same_floor(files: Files) -> None:
    """With several input sets the floor is their largest torch error: the noise line shows
    it where it differs from the worst set's, and the suggestion multiplies that number.

    Which measured set has the worst ratio and which the largest torch error depends on the
    CPU's rounding order, so the two sets' noise is set from the real measurement to known,
    distinct values: set 0 has the worse ratio, set 1 the larger torch error."""
    run = _run(files, files.f32)
    assert len(run.input_sets) == 2
    measured = max(c.noise.torch_error for c in run.comparisons if c.noise is not None)
    assert measured > 0
    noises = {
        0: Noise(torch_error=measured, onnx_error=3 * measured, ratio=3.0),
        1: Noise(torch_error=4 * measured, onnx_error=4 * measured, ratio=1.0),
    }
    outputs = tuple(replace(c, noise=noises[c.input_set]) for c in run.outputs)
    run = run.with_rows(outputs)
    (line,) = noise_lines(run.comparisons)
    s = suggest_noise_tolerances(run)
    floor = s.torch_errors["y"]
    assert floor == 4 * measured  # the largest torch error, not the worst set's
    assert f"torch float32 {number_text(measured)}," in line, line  # the worst set's figures
    assert f"torch float32 up to {number_text(floor)} over 2 input sets" in line, line
    assert f"({s.k:g}× {number_text(floor)})" in "\n".join(noise_suggestion_lines(s))
    # One set alone: its floor is its own torch error and no "up to" is said.
    alone = run.with_rows(tuple(c for c in outputs if c.input_set == 0))
    (line,) = noise_lines(alone.comparisons)
    assert "up to" not in line, line


class OffsetNet(torch.nn.Module):
    """((x + 1000) transposed - 1000) transposed back @ w: values near 1000 pass a Transpose,
    where bfloat16's 8-bit mantissa keeps little of x."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x + 1000.0).t() - 1000.0).t() @ self.w


def test_a_bfloat16_file_is_judged_against_torchs_own_bfloat16_error(tmp_path: Path) -> None:
    """Only its Transposes run in bfloat16 (all ONNX Runtime's CPU provider can): the
    values near 1000 are rounded there, as torch in bfloat16 rounds them."""
    from tests.helpers.precision_models import to_bfloat16

    torch.manual_seed(0)
    model = OffsetNet().eval()
    f32 = tmp_path / "offset.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 8),), str(f32), dynamo=False,
                          input_names=["x"], output_names=["y"])  # fmt: skip
    ops = sorted({n.op_type for n in onnx.load(str(f32)).graph.node} - {"Transpose"})
    bf16 = to_bfloat16(f32, tmp_path / "offset_bf16.onnx", op_block_list=ops)
    assert output_precisions(bf16)["y"].precision == "bfloat16"
    run = validate(model, bf16, noise_floor=True)
    (c,) = run.outputs
    assert c.noise is not None and c.noise.precision == "bfloat16", c.notes
    assert c.noise.ratio is not None and c.noise.ratio < 10, c.noise
    assert c.noise.onnx_error > 0.1  # far past float32 rounding: bfloat16's, not a bug
    assert noise_sentence(c.noise).startswith("within bfloat16 rounding: ")


class Inverse(torch.nn.Module):
    """x @ inverse(a): CPU torch has no float16 linalg.inv ("Low precision dtypes not
    supported"), so its float16 error is emulated."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(8, 8) + 8 * torch.eye(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.linalg.inv(self.a)


def test_where_torch_cannot_run_float16_its_error_is_emulated_and_said() -> None:
    from parity.load.torch_model import from_object
    from parity.results import InputSet, Noise
    from parity.run.noise_floor_runs import low_model, run_low
    from parity.signature import OnnxSignature, TensorSpec

    torch.manual_seed(0)
    model = Inverse().eval()
    signature = OnnxSignature(
        inputs=(TensorSpec("x", "float32", (4, 8)),),
        outputs=(TensorSpec("y", "float32", (4, 8)),),
        opset=18, producer="test", ir_version=8,
    )  # fmt: skip
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    low = low_model(from_object(model), "float16")
    arrays, note = run_low(low, InputSet(0, {"x": x}), signature)
    assert arrays is not None, note
    assert low.emulated == (
        "weights, inputs and each op's float output rounded to float16, computed in float32"
    )
    with torch.no_grad():
        exact = model.double()(torch.from_numpy(x).double()).numpy()
    error = float(np.abs(arrays["y"] - exact).max())
    assert 1e-5 < error < 1e-2  # float16's rounding, not float32's (~1e-8)
    sentence = noise_sentence(Noise(error, error / 2, 0.5, precision="float16",
                                    emulated=low.emulated))  # fmt: skip
    assert sentence == (
        "within float16 rounding: 0.5× torch's own float16 error (emulated: weights, inputs "
        "and each op's float output rounded to float16, computed in float32)"
    )


def test_an_int8_qoperator_file_is_int8_too(files: Files, tmp_path: Path) -> None:
    """QLinearConv / QLinearMatMul ops, the output dequantized at the end."""
    qop = _quantize(files.f32, tmp_path / "net_qop.onnx", "QOperator")
    ops = {n.op_type for n in onnx.load(str(qop)).graph.node}
    assert "QLinearConv" in ops and "QuantizeLinear" in ops
    found = output_precisions(qop)["y"]
    assert found.precision == "int8" and found.scale is not None and found.tensors >= 3
    run = _run(files, qop)
    for c in run.outputs:
        assert c.noise.precision == "int8" and c.noise.ratio <= 10, c.noise
