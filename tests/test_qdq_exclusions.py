"""Issue 39: an int8 QDQ conv net calibrated on images in [-1, 1], validated against its .pt2
with --layers and no --inputs: generated inputs stay in the calibrated range, and the
suggested exclusions, re-quantized with the same calibration, gain what the run said and
come within 1 dB of the best exclusion of one conv or two adjacent convs (brute force).
The torch route and the float-ONNX route suggest the same. Exported with torch.export and
torch.onnx.export(dynamo=True), quantized with onnxruntime.quantization.quantize_static."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest

from parity.cli import main
from tests.precision_models import quantize_qdq


def _net():
    import torch
    from torch import nn

    class Net(nn.Module):
        """Five convs; the first's output channel 0 has weights x100 (and a bias that keeps
        it below zero, so its ReLU output stays small): its per-tensor int8 weight scale
        crushes every other channel's weights, the first conv is the sensitive one."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.act1 = nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()
            self.conv2, self.act2 = nn.Conv2d(8, 16, 3, padding=1), nn.PReLU(16)
            self.conv3, self.act3 = nn.Conv2d(16, 16, 3, padding=1), nn.PReLU(16)
            self.conv4, self.act4 = nn.Conv2d(16, 8, 3, padding=1), nn.PReLU(8)
            self.conv5 = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            x = self.act1(self.conv1(x))
            x = self.act2(self.conv2(x))
            x = self.act3(self.conv3(x))
            x = self.act4(self.conv4(x))
            return self.conv5(x)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.conv1.weight[0] *= 100
        net.conv1.bias[0] = -500
    return net


def _images(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3, 32, 32)).astype(np.float32)


def quantize(source: Path, path: Path, exclude: list[str] | None = None) -> Path:
    """QDQ int8 (per-tensor weights), calibrated on 8 images in [-1, 1]."""
    calibration = [{"x": _images(i, 1)} for i in range(8)]
    return quantize_qdq(source, path, exclude=exclude, calibration=calibration)


def sqnr_db(reference: Path, other: Path) -> float:
    """Output SQNR on 4 in-range images the run never saw."""
    import onnxruntime as ort

    x = _images(100, 4)
    ref = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(str(other), providers=["CPUExecutionProvider"])
    r = ref.run(None, {"x": x})[0].astype(np.float64)
    o = got.run(None, {"x": x})[0].astype(np.float64)
    return float(10 * np.log10(np.square(r).sum() / np.square(o - r).sum()))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import torch

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    root = tmp_path_factory.mktemp("qdq39")
    net = _net()
    example = (torch.from_numpy(_images(7, 2)),)
    batch = {"x": {0: torch.export.Dim("batch")}}
    torch.export.save(torch.export.export(net, example, dynamic_shapes=batch), root / "net.pt2")
    program = torch.onnx.export(
        net, example, dynamo=True, dynamic_shapes={"x": {0: "batch"}}, input_names=["x"]
    )
    program.save(str(root / "net.onnx"))
    qdq = quantize(root / "net.onnx", root / "net_int8.onnx")
    out = root / "torch.json"
    code = main(
        ["validate", "--model", str(root / "net.pt2"), "--onnx", str(qdq), "--layers",
         "--json", str(out)]
    )  # fmt: skip
    return {"root": root, "float": root / "net.onnx", "qdq": qdq, "code": code,
            "report": json.loads(out.read_text())}  # fmt: skip


def test_generated_inputs_stay_in_the_calibrated_range_and_the_run_says_so(files) -> None:
    from parity.load.calibration import input_ranges

    (x,) = input_ranges(onnx.load(str(files["qdq"])))
    assert x.name == "x" and x.low < -0.99 and 0.99 < x.high < 1.01
    label = files["report"]["input_sets"][0]["label"]
    assert "x uniform in" in label and "calibrated range of its QuantizeLinear" in label


def test_the_torch_route_suggests_exclusions_that_requantized_gain_6_db_and_near_the_best(
    files,
) -> None:
    assert files["code"] == 1  # int8 fails the default tolerance; the verdict is unchanged
    layers = files["report"]["layers"]
    exclude = layers["exclude_from_quantization"]
    check = layers["exclusion_check"]
    convs = [n.name for n in onnx.load(str(files["float"])).graph.node if n.op_type == "Conv"]
    assert len(convs) == 5
    assert check["tried"] == check["candidates"] == 9  # 5 convs alone, 4 adjacent pairs
    assert check["gain_db"] >= 6
    root = files["root"]
    before = sqnr_db(files["float"], files["qdq"])
    after = sqnr_db(files["float"], quantize(files["float"], root / "suggested.onnx", exclude))
    brute = {}
    adjacent = [list(p) for p in zip(convs, convs[1:], strict=False)]
    for k, group in enumerate([[c] for c in convs] + adjacent):
        again = quantize(files["float"], root / f"brute{k}.onnx", group)
        brute[tuple(group)] = sqnr_db(files["float"], again)
    best = max(brute.values())
    assert after - before >= 6, (exclude, before, after)
    assert after >= best - 1, (exclude, after, brute)
    assert convs[0] in exclude  # the first conv is considered, and it is the sensitive one
    # the simulation's figure is what re-quantizing gives (same calibration, other inputs)
    assert abs(check["sqnr_db_after"] - after) < 2


def test_the_float_onnx_route_suggests_the_same_as_the_torch_route(files, tmp_path) -> None:
    out = tmp_path / "onnx.json"
    main(["validate", "--onnx", str(files["float"]), "--onnx", str(files["qdq"]), "--layers",
          "--json", str(out)])  # fmt: skip
    layers = json.loads(out.read_text())["layers"]
    assert (
        layers["exclude_from_quantization"]
        == (files["report"]["layers"]["exclude_from_quantization"])
    )
    assert "calibrated range" in json.loads(out.read_text())["input_sets"][0]["label"]


def test_given_inputs_outside_the_calibrated_range_are_counted(files, tmp_path, capsys) -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "feeds.npz", x=x)
    main(["validate", "--model", str(files["root"] / "net.pt2"), "--onnx", str(files["qdq"]),
          "--inputs", str(tmp_path / "feeds.npz")])  # fmt: skip
    out = capsys.readouterr().out
    from parity.load.calibration import input_ranges

    (c,) = input_ranges(onnx.load(str(files["qdq"])))
    clipped = int(((x < c.low - c.scale / 2) | (x > c.high + c.scale / 2)).sum())
    assert clipped > 1000
    assert f"x: {clipped:,} of {x.size:,} elements" in out
    assert "clipped by its first QuantizeLinear" in out


def test_simulated_exclusion_of_each_conv_matches_requantizing(files) -> None:
    """The simulation (pairs no quantized node keeps removed, weights in float) against
    quantize_static's own nodes_to_exclude, one conv at a time, on the same inputs."""
    import onnxruntime as ort

    from parity.layers.qdq import torch_weights
    from parity.layers.qdq_search import _Simulator, quantized_compute_nodes
    from parity.load.torch_model import load_torch_model

    model = load_torch_model(str(files["root"] / "net.pt2"))
    qdq = onnx.load(str(files["qdq"]))
    simulator = _Simulator(qdq, torch_weights(model), None)
    x = _images(100, 4)
    ref = ort.InferenceSession(str(files["float"]), providers=["CPUExecutionProvider"])
    r = ref.run(None, {"x": x})[0].astype(np.float64)

    def db(model_bytes) -> float:
        session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        o = session.run(None, {"x": x})[0].astype(np.float64)
        return float(10 * np.log10(np.square(r).sum() / np.square(o - r).sum()))

    nodes = quantized_compute_nodes(qdq.graph)
    assert len(nodes) == 5
    for name in nodes:
        simulated = db(simulator.excluding({name}).SerializeToString())
        again = quantize(files["float"], files["root"] / f"sim_{name}.onnx", [name])
        assert abs(simulated - sqnr_db(files["float"], again)) < 1, name
    assert not simulator.dequantized_weights  # every weight found in the torch model


def test_a_float_range_wider_than_the_calibrated_one_is_counted_too(files, capsys) -> None:
    main(["validate", "--model", str(files["root"] / "net.pt2"), "--onnx", str(files["qdq"]),
          "--float-range=-2:2"])  # fmt: skip
    out = capsys.readouterr().out
    assert "x uniform in [-2, 2] (--float-range)" in out
    assert "elements (5" in out and "clipped by its first QuantizeLinear" in out  # about half
