"""Files with no exporter metadata (issue 63): onnxslim drops every node's metadata_props
(the dynamo exporter's `pkg.torch.onnx.fx_node` and name scopes); value names and weight
names survive. --layers matches a slimmed dynamo export by value names (the FX nodes'
names), a legacy export by its scoped node or value names, and, where neither is there, by
the weights each node reads. A small CNN exported both ways by torch, slimmed by onnxslim."""

from __future__ import annotations

import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
import torch

from parity.layers.localise import localise
from parity.layers.onnx_graph import DYNAMO_NAMES, LEGACY, read_graph
from parity.load.onnx_model import load_onnx
from parity.load.torch_model import load_torch_model
from parity.run.inputs import make_input_sets
from parity.sources import TorchSide
from tests.helpers.plant_bug import plant

onnxslim = pytest.importorskip("onnxslim")

SOURCE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(8)  # folded into conv1 by both exporters
            self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc1 = nn.Linear(8 * 4 * 4, 32)
            self.act = nn.ReLU()  # reads fc1's output: not folded into it
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            x = torch.relu(self.bn1(self.conv1(x)))
            x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
            return self.fc2(self.act(self.fc1(x.flatten(1))))


    def make():
        torch.manual_seed(0)
        net = Net()
        with torch.no_grad():  # trained-looking statistics: the fold changes the Conv
            net.bn1.running_mean.uniform_(-0.5, 0.5)
            net.bn1.running_var.uniform_(0.5, 2.0)
        return net.eval()
    """
)
FC1 = {"dynamo": "node_linear", "legacy": "/fc1/Gemm"}


@dataclass(frozen=True)
class Files:
    factory: str
    slim: dict[str, Path]  # exporter -> the slimmed file
    bug: dict[str, Path]  # exporter -> the slimmed file, fc1's bias + 0.05


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("slimmed")
    (root / "net.py").write_text(SOURCE)
    factory = f"{root / 'net.py'}:make"
    model = load_torch_model(factory).module
    x = torch.randn(2, 3, 8, 8)
    slim, bug = {}, {}
    for exporter in ("dynamo", "legacy"):
        plain = root / f"{exporter}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (x,), str(plain), dynamo=exporter == "dynamo", input_names=["x"],
                output_names=["logits"],
            )  # fmt: skip
        slim[exporter] = root / f"{exporter}_slim.onnx"
        onnx.save(onnxslim.slim(onnx.load(str(plain))), str(slim[exporter]))
        bug[exporter] = root / f"{exporter}_bug.onnx"
        plant(slim[exporter], bug[exporter], FC1[exporter], "bias", 0.05)
    return Files(factory, slim, bug)


def _localise(factory: str, path: Path, *, traceable: bool = True):
    model = load_torch_model(factory)
    signature = load_onnx(path).signature
    sets = make_input_sets(signature, dims={}, n_sets=1, seed=0)
    return localise(TorchSide(model, traceable=traceable), path, sets, signature)


def test_the_slimmer_drops_every_node_s_metadata(files: Files) -> None:
    """The premise: no node keeps metadata_props; the dynamo file's values keep the FX
    nodes' names and the weights their state-dict names."""
    proto = onnx.load(str(files.slim["dynamo"]))
    assert not any(node.metadata_props for node in proto.graph.node)
    assert "linear" in {out for node in proto.graph.node for out in node.output}
    assert {"fc1.weight", "conv2.weight"} <= {t.name for t in proto.graph.initializer}
    assert read_graph(files.slim["dynamo"]).exporter == DYNAMO_NAMES


@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_a_clean_slimmed_file_has_its_values_compared_and_nothing_found(files, exporter) -> None:
    result = _localise(files.factory, files.slim[exporter])
    assert result.matched >= 6, result.notes
    assert result.first_divergence is None
    assert all(v.status == "pass" for v in result.values), [
        (v.onnx_value, v.status) for v in result.values if v.status != "pass"
    ]
    modules = {v.torch_module for v in result.values}
    assert {"conv1", "conv2", "fc1", "fc2"} <= modules


@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_a_planted_bias_in_a_slimmed_file_is_named_at_its_node(files, exporter) -> None:
    result = _localise(files.factory, files.bug[exporter])
    first = result.first_divergence
    assert first is not None
    assert (first.onnx_node, first.torch_module) == (FC1[exporter], "fc1")
    confirmed = result.confirmation_of(first)
    assert confirmed is not None and confirmed.outcome == "born"


def test_a_legacy_file_whose_nodes_were_renamed_is_matched_by_its_value_names(
    files, tmp_path
) -> None:
    """A tool that renames every node keeps the legacy exporter's scoped value names
    (`/fc1/Gemm_output_0`): they say the module."""
    renamed = tmp_path / "renamed.onnx"
    proto = onnx.load(str(files.bug["legacy"]))
    for k, node in enumerate(proto.graph.node):
        node.name = f"n{k}"
    onnx.save(proto, str(renamed))
    assert read_graph(renamed).exporter == LEGACY
    first = _localise(files.factory, renamed).first_divergence
    assert first is not None and first.torch_module == "fc1"
    assert first.onnx_value == "/fc1/Gemm_output_0"


@pytest.mark.parametrize("planted", [False, True])
def test_without_a_program_to_match_names_the_weights_say_the_modules(files, planted) -> None:
    """A torch side that cannot be traced (as an hf: model's): module outputs are matched by
    the weights each node reads; a BatchNorm folded into conv1 is compared there, and the
    ReLU module after fc1 is not taken as folded into it."""
    path = files.bug["dynamo"] if planted else files.slim["dynamo"]
    result = _localise(files.factory, path, traceable=False)
    assert result.matching == "module boundaries"
    assert any("weights each node reads" in n for n in result.notes)
    by_module = {v.torch_module: v for v in result.values}
    assert {"conv1", "conv2", "fc1", "fc2"} <= set(by_module)
    first = result.first_divergence
    if not planted:
        assert first is None, (first.onnx_value, first.torch_module)
    else:
        assert first is not None and first.torch_module == "fc1"
