"""--layers on BatchNorm in dynamo exports (torch 2.13): each BatchNorm's output is the
`getitem` of a multi-output FX node, and the exporter's optimiser folds a BatchNorm that
follows a Conv into that Conv, whose output keeps the getitem's name. Both are compared, so a
BatchNorm bias bug names the BatchNorm and a bug in a Conv whose BatchNorm was folded names
that Conv, not the ReLU after it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from parity import validate
from tests.helpers.plant_bug import plant


class Block(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(3, 8), Block(8, 8), Block(8, 8), Block(8, 8))
        self.pool = nn.MaxPool2d(2)
        self.bn = nn.BatchNorm2d(8)  # after a pool: the optimiser has no Conv to fold it into
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn(self.pool(self.blocks(x))))


@dataclass(frozen=True)
class Files:
    model: nn.Module
    x: np.ndarray
    clean: Path
    bn_bias: Path  # the unfolded BatchNorm's bias + 0.05
    conv_bias: Path  # block 2's Conv (its BatchNorm folded in) bias + 0.25
    bn_node: str
    conv_node: str


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("batchnorm")
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():  # statistics and affine parameters as after training
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    x = torch.randn(1, 3, 16, 16)
    clean = root / "dyn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), dynamo=True, verbose=False).save(str(clean))
    nodes = onnx.load(str(clean)).graph.node
    bn = next(n.name for n in nodes if n.op_type == "BatchNormalization")
    conv = [n.name for n in nodes if n.op_type == "Conv"][2]
    plant(clean, root / "bn_bias.onnx", bn, "bias", 0.05)
    plant(clean, root / "conv_bias.onnx", conv, "bias", 0.25)
    return Files(model, x.numpy(), clean, root / "bn_bias.onnx", root / "conv_bias.onnx", bn, conv)


def test_the_export_folds_batchnorm_into_conv(files: Files) -> None:
    """The premise: four BatchNorms folded (no BatchNormalization left for them), one not."""
    ops = [n.op_type for n in onnx.load(str(files.clean)).graph.node]
    assert ops.count("BatchNormalization") == 1


def test_clean_export_compares_every_batchnorm_getitem_and_flags_nothing(files: Files) -> None:
    layers = validate(files.model, files.clean, inputs={"x": files.x}, layers=True).layers
    assert layers is not None and layers.first_divergence is None
    getitems = {
        v.onnx_value: v.onnx_op for v in layers.values if v.onnx_value.startswith("getitem")
    }
    assert sorted(getitems.values()) == ["BatchNormalization", "Conv", "Conv", "Conv", "Conv"]
    assert not any("another torch version" in n for n in layers.notes)


def test_a_batchnorm_bias_bug_names_the_batchnorm(files: Files) -> None:
    run = validate(files.model, files.bn_bias, inputs={"x": files.x}, layers=True)
    first = run.layers.first_divergence if run.layers else None
    assert not run.passed and first is not None
    assert (first.onnx_node, first.onnx_op, first.torch_module) == (
        files.bn_node,
        "BatchNormalization",
        "bn",
    )
    assert run.layers.confirmation_of(first).outcome == "born"


def test_a_bug_in_a_conv_whose_batchnorm_was_folded_names_that_conv(files: Files) -> None:
    run = validate(files.model, files.conv_bias, inputs={"x": files.x}, layers=True)
    first = run.layers.first_divergence if run.layers else None
    assert not run.passed and first is not None
    assert (first.onnx_node, first.onnx_op) == (files.conv_node, "Conv")  # not the Relu after
    assert first.torch_module == "blocks.2.conv"
    assert run.layers.confirmation_of(first).outcome == "born"
