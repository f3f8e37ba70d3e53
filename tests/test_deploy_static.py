"""The deploy matrix, static quantization (issue 63): files made by ONNX Runtime's
quantize_static with a CalibrationDataReader, QDQ and QOperator, per tensor and per channel,
from a small CNN (Conv / BatchNorm / ReLU / Linear, the BatchNorms folded by the exporter)
and a small Transformer-ish block (Linear, LayerNorm, attention, GELU), each exported by the
legacy and the dynamo exporter. Each clean
file is intended (its weights each a rounding of torch's, its float twin agreeing with torch
with its weights: kind `quantization`, never `bug`), and one per-channel weight scale x1.5 is
a `bug` named at its node. `--layers` and `--noise-floor` tell the same story in the same run.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from parity.cli import main
from parity.pipeline import RunConfig, run_validation
from tests.helpers.deploy_matrix import record, right
from tests.helpers.plant_bug import wrong_weight_scale

CNN_SOURCE = """
import torch
from torch import nn


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def make():
    torch.manual_seed(0)
    net = CNN()
    with torch.no_grad():  # BatchNorms that do something once folded
        for bn in (net.bn1, net.bn2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    return net.eval()
"""

BLOCK_SOURCE = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 64), nn.Linear(64, d)

    def forward(self, x):
        a = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / 32 ** 0.5, dim=-1)
        h = self.norm(x + a @ self.v(x))
        return h + self.down(torch.nn.functional.gelu(self.up(h)))


def make():
    torch.manual_seed(0)
    return Block().eval()
"""

MODELS = {  # source, input shape, which weighted node gets the planted bug (graph order)
    "cnn": (CNN_SOURCE, (2, 3, 16, 16), 1),  # conv2
    "block": (BLOCK_SOURCE, (2, 6, 32), 3),  # up
}
FORMATS = [(f, pc) for f in ("QDQ", "QOperator") for pc in (False, True)]
EXPORTERS = ("legacy", "dynamo")


def _weighted(path: Path) -> list[str]:
    """The file's nodes that compute with a quantized weight, in graph order."""
    import onnx

    graph = onnx.load(str(path)).graph
    inits = {t.name for t in graph.initializer}
    dq = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"} & {
        n.output[0] for n in graph.node if n.input and n.input[0] in inits
    }
    qlinear = ("QLinearConv", "QGemm", "QLinearMatMul")
    return [
        n.name
        for n in graph.node
        if (n.op_type in ("Conv", "Gemm", "MatMul") and n.input[1] in dq)
        or (n.op_type in qlinear and n.input[3] in inits)
    ]


def _export(model: torch.nn.Module, shape: tuple[int, ...], path: Path, exporter: str) -> Path:
    if exporter == "legacy":
        torch.onnx.export(
            model, (torch.randn(*shape),), str(path), input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "b"}}, dynamo=False,
        )  # fmt: skip
    else:
        program = torch.onnx.export(
            model, (torch.randn(*shape),), dynamo=True, input_names=["x"], output_names=["y"],
            dynamic_shapes={"x": {0: torch.export.Dim("b")}},
        )  # fmt: skip
        program.save(str(path))
    return path


def _quantize(src: Path, dst: Path, shape: tuple[int, ...], fmt: str, per_channel: bool) -> Path:
    """quantize_static with a CalibrationDataReader over 8 random batches, int8."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = [np.random.default_rng(i) for i in range(8)]
            self.sets = iter([{"x": r.standard_normal(shape).astype(np.float32)} for r in rng])

        def get_next(self):
            return next(self.sets, None)

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    quantize_static(
        str(src), str(dst), Reader(), quant_format=getattr(QuantFormat, fmt),
        per_channel=per_channel, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    return dst


class Files:
    """Each model's torch source, and per (exporter, format, per channel) the clean file and
    a copy with one node's weight scale x1.5 (that node's name beside it), built once, when
    first asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[tuple, tuple[Path, Path, str]] = {}
        self.raw: dict[tuple[str, str], Path] = {}

    def model(self, name: str) -> str:
        path = self.root / f"{name}.py"
        path.write_text(MODELS[name][0])
        return f"{path}:make"

    def get(self, name: str, exporter: str, fmt: str, pc: bool) -> tuple[Path, Path, str]:
        key = (name, exporter, fmt, pc)
        if key not in self.made:
            source, shape, planted = MODELS[name]
            if (name, exporter) not in self.raw:
                namespace: dict = {}
                exec(compile(source, f"{name}.py", "exec"), namespace)
                path = self.root / f"{name}_{exporter}.onnx"
                self.raw[(name, exporter)] = _export(namespace["make"](), shape, path, exporter)
            stem = f"{name}_{exporter}_{fmt}_{pc}"
            raw = self.raw[(name, exporter)]
            clean = _quantize(raw, self.root / f"{stem}.onnx", shape, fmt, pc)
            node = _weighted(clean)[planted]
            bad = wrong_weight_scale(clean, self.root / f"{stem}_bad.onnx", node)
            self.made[key] = (clean, bad, node)
        return self.made[key]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return Files(tmp_path_factory.mktemp("static"))


def _kinds(run) -> list[str]:
    return [str(f.kind) for f in run.findings]


@pytest.mark.slow
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize(("fmt", "per_channel"), FORMATS, ids=lambda v: str(v))
def test_a_clean_static_file_is_intended_and_a_wrong_scale_is_a_bug_at_its_node(
    files, model, exporter, fmt, per_channel
) -> None:
    source = files.model(model)
    clean, bad, node = files.get(model, exporter, fmt, per_channel)
    run = run_validation(RunConfig(model=source, onnx=str(clean)))
    q = run.quantization
    assert q is not None and q.float_twin and q.width == "int8"
    assert q.weights and all(w.status == "rounding" for w in q.weights), q.weights
    assert all(w.max_steps is not None and w.max_steps <= 1.001 for w in q.weights)
    assert q.faithful is True  # its float twin agrees with torch with its weights
    assert "bug" not in _kinds(run) and "quantization" in _kinds(run)
    failing = {c.name for c in run.outputs if not c.status.passed}
    explained = {f.output for f in run.findings if f.kind == "quantization"}
    assert failing <= explained  # every failing output has its quantization finding
    tool, option = "ORT quantize_static", f"{fmt}, {'per-channel' if per_channel else 'per-tensor'}"
    arch = f"{model} ({exporter})"
    row = record(run, tool=tool, option=option, architecture=arch)
    assert right(row), row
    wrong = run_validation(RunConfig(model=source, onnx=str(bad)))
    row = record(wrong, tool=tool, option=option, architecture=arch, planted_at=node)
    assert right(row), row
    qb = wrong.quantization
    assert [w.node for w in qb.bugs] == [node]
    assert "1.5\u00d7" in qb.bugs[0].defect
    bugs = [f.text for f in wrong.findings if f.kind == "bug"]
    assert bugs and node in bugs[0]


@pytest.fixture(scope="module")
def cnn_layers(files, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The per-channel QDQ CNN with --layers --noise-floor, as the issue ran it."""
    clean, _bad, _node = files.get("cnn", "legacy", "QDQ", True)
    import contextlib
    import io

    out = tmp_path_factory.mktemp("static_layers") / "r.json"
    terminal = io.StringIO()
    with contextlib.redirect_stdout(terminal):
        code = main(
            ["validate", "--model", files.model("cnn"), "--onnx", str(clean), "--layers",
             "--noise-floor", "--json", str(out)]
        )  # fmt: skip
    report = json.loads(out.read_text())
    report["code"] = code
    report["terminal"] = terminal.getvalue()
    return report


def test_layers_and_the_noise_floor_tell_one_story_on_a_per_channel_qdq_file(
    cnn_layers,
) -> None:
    report = cnn_layers
    kinds = [f["kind"] for f in report["findings"]]
    assert "bug" not in kinds and "quantization" in kinds
    assert all(o["noise"] is None or o["noise"]["precision"] == "int8" for o in report["outputs"])
    layers = report["layers"]
    first = layers.get("first_divergence")
    assert first is None or first.get("confirmation") != "born", first
    rounded = [v for v in layers["values"] if v["onnx_op"] == "DequantizeLinear"]
    assert rounded  # the activations' pairs were compared, as what they mean
    assert all(v["status"] in ("pass", "carried", "not_comparable") for v in rounded), rounded
    assert any("int8 rounding" in (v["not_comparable"] or "") for v in rounded)
    texts = " ".join(f["text"] for f in report["findings"])
    assert "DequantizeLinear" not in texts
    said = report["terminal"]  # the layers' own section says the same
    assert "int8 rounding by design, not a birth" in said
    assert "the error is born here" not in said and "under the threshold" not in said


def test_the_float_twin_survives_a_saved_run(files, tmp_path) -> None:
    from parity.reports.saved_run import load_run

    clean, _bad, _node = files.get("cnn", "legacy", "QOperator", True)
    run = run_validation(RunConfig(model=files.model("cnn"), onnx=str(clean)))
    assert run.quantization is not None and run.quantization.float_twin
    again = load_run(run.save(tmp_path / "run.parity"))
    assert again.quantization == run.quantization
    assert [f.text for f in again.findings] == [f.text for f in run.findings]


RES_SOURCE = """
import torch
from torch import nn


class Res(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)  # fresh: near the identity, folded all the same
        self.gamma = nn.Parameter(torch.rand(1, 8, 1, 1) + 0.5)
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = x + self.gamma * torch.relu(self.bn(self.conv(x)))
        x = self.norm(nn.functional.max_pool2d(x, 2).mean(dim=(2, 3)))
        return self.fc(torch.sigmoid(x) * 2.0)


def make():
    torch.manual_seed(0)
    return Res().eval()
"""


def test_other_quantized_constants_are_roundings_and_a_wrong_one_is_a_bug(tmp_path) -> None:
    """A residual net whose per-channel Mul scale and LayerNorm weight and bias the QDQ
    quantizer rounds too: each is read back, matched to torch's parameter of its name and
    put into the reference (the float twin then agrees); a fresh BatchNorm is folded into
    the conv that feeds it, not the one before. The Mul scale x1.5 is a bug at /Mul."""
    import onnx
    from onnx import numpy_helper

    source = tmp_path / "res.py"
    source.write_text(RES_SOURCE)
    namespace: dict = {}
    exec(compile(RES_SOURCE, str(source), "exec"), namespace)
    raw = _export(namespace["make"](), (2, 3, 16, 16), tmp_path / "res.onnx", "legacy")
    clean = _quantize(raw, tmp_path / "res_qdq.onnx", (2, 3, 16, 16), "QDQ", True)
    run = run_validation(RunConfig(model=f"{source}:make", onnx=str(clean)))
    q = run.quantization
    rows = {w.parameter: w for w in q.weights}
    assert {"gamma", "norm.weight", "norm.bias", "conv.weight (with bn folded in)"} <= set(rows)
    assert "stem.weight" in rows and all(w.status == "rounding" for w in q.weights)
    assert q.faithful is True and "bug" not in _kinds(run)
    model = onnx.load(str(clean))
    for tensor in model.graph.initializer:
        if tensor.name == "gamma_scale":
            scaled = numpy_helper.to_array(tensor) * np.float32(1.5)
            tensor.CopyFrom(numpy_helper.from_array(scaled, tensor.name))
    onnx.save(model, str(tmp_path / "res_bad.onnx"))
    wrong = run_validation(RunConfig(model=f"{source}:make", onnx=str(tmp_path / "res_bad.onnx")))
    assert [w.node for w in wrong.quantization.bugs] == ["/Mul"]
    assert any(f.kind == "bug" and "/Mul" in f.text for f in wrong.findings)


def test_a_graph_bug_in_a_static_file_is_a_bug_its_weights_are_not(files, tmp_path) -> None:
    """The residual Add turned into a Sub in a QDQ block: every weight is still a rounding,
    and the float twin against torch with those weights says the export computes something
    else; with --layers, the layers on the twin (float, the same weights) name the node."""
    from tests.helpers.plant_bug import plant

    clean, _bad, _node = files.get("block", "legacy", "QDQ", False)
    plant(clean, tmp_path / "sub.onnx", "/Add", "op", "Sub")
    config = RunConfig(model=files.model("block"), onnx=str(tmp_path / "sub.onnx"), layers=True)
    run = run_validation(config)
    q = run.quantization
    assert q is not None and not q.bugs and q.faithful is False
    assert q.located == "the Sub node /Add (confirmed alone)"
    bugs = [f for f in run.findings if f.kind == "bug"]
    assert [f.output for f in bugs] == ["y"]
    assert "with its activation rounding taken out" in bugs[0].text
    assert "it starts at the Sub node /Add (confirmed alone)" in bugs[0].text


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_an_activation_read_at_another_scale_than_written_is_a_bug(files, tmp_path, fmt) -> None:
    """conv1's output read back by its next reader at 1.5x the scale it was written with (a
    fresh initializer; QDQ: the pair's DequantizeLinear, QOperator: conv2's x_scale): the
    float twin keeps what that does, so it differs from torch with the file's weights: a
    bug, though every weight of conv1 is a rounding."""
    import onnx
    from onnx import numpy_helper

    clean, _bad, _node = files.get("cnn", "legacy", fmt, True)
    model = onnx.load(str(clean))
    name = "/Relu_output_0_DequantizeLinear" if fmt == "QDQ" else "/conv2/Conv_quant"
    reader = next(n for n in model.graph.node if n.name == name)
    scale = next(t for t in model.graph.initializer if t.name == reader.input[1])
    scaled = numpy_helper.to_array(scale) * np.float32(1.5)
    model.graph.initializer.append(numpy_helper.from_array(scaled, "planted_scale"))
    reader.input[1] = "planted_scale"
    onnx.save(model, str(tmp_path / "read.onnx"))
    run = run_validation(RunConfig(model=files.model("cnn"), onnx=str(tmp_path / "read.onnx")))
    q = run.quantization
    assert q is not None and q.faithful is False
    assert "y" in [f.output for f in run.findings if f.kind == "bug"]
    assert all(w.node != "/conv1/Conv" and w.node != "/conv1/Conv_quant" for w in q.bugs)
