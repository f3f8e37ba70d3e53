"""--layers on recurrent nets: a small speaker-encoder-like LSTM (3 layers, its last hidden state
through a Linear), exported by both exporters in the test.

Each ONNX LSTM node (one per layer) is compared output to output with that layer of torch's
module; the module's tuple output is matched by role (h_n with the stacked Y_h), never across
shapes; a clean export flags nothing, and a weight of layer 1 scaled in the ONNX file is named
at layer 1's node, confirmed alone.
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
from parity.layers.result import LayerStatus
from parity.layers.text import format_layers
from tests.helpers.plant_bug import plant
from tests.helpers.two_exports import export_both


class Encoder(nn.Module):
    """mel frames [batch, time, 8] -> a unit embedding [batch, 6] (resemblyzer's shape)."""

    def __init__(self, cell: type[nn.RNNBase] = nn.LSTM) -> None:
        super().__init__()
        self.lstm = cell(8, 16, num_layers=3, batch_first=True)
        self.linear = nn.Linear(16, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, state = self.lstm(x)
        h = state[0] if isinstance(state, tuple) else state
        e = torch.relu(self.linear(h[-1]))
        return e / (torch.norm(e, dim=1, keepdim=True) + 1e-5)


@dataclass(frozen=True)
class Exports:
    model: nn.Module
    x: np.ndarray
    legacy: Path
    dynamo: Path
    legacy_bug: Path  # layer 1's input weights x 1.05
    dynamo_bug: Path


def _recurrent_nodes(path: Path) -> list[onnx.NodeProto]:
    nodes = onnx.load(str(path), load_external_data=False).graph.node
    return [n for n in nodes if n.op_type in ("LSTM", "GRU", "RNN")]


@pytest.fixture(scope="module")
def lstm(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    root = tmp_path_factory.mktemp("recurrent")
    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(1, 20, 8)
    legacy, dynamo = export_both(
        model, x, root, dynamic_axes={"x": {0: "batch", 1: "time"}}, output="embeds"
    )
    bugs = []
    for path in (legacy, dynamo):
        layer1 = _recurrent_nodes(path)[1].name
        bug = root / f"bug_{path.name}"
        plant(path, bug, layer1, "scale", 0.05)  # W of layer 1 (its input weights)
        bugs.append(bug)
    return Exports(model, x.numpy(), legacy, dynamo, bugs[0], bugs[1])


def test_clean_legacy_lstm_flags_nothing_and_matches_h_n_to_the_stacked_y_h(
    lstm: Exports,
) -> None:
    run = validate(lstm.model, lstm.legacy, inputs={"x": lstm.x}, layers=True)
    layers = run.layers
    assert run.passed and layers is not None
    assert layers.first_divergence is None
    assert not [v for v in layers.values if v.status == LayerStatus.SHAPE_MISMATCH]
    # every ONNX LSTM output (3 layers x Y, Y_h, Y_c) compared with its layer
    per_layer = [v for v in layers.values if v.onnx_op == "LSTM"]
    assert len(per_layer) == 9
    assert {v.torch_node for v in per_layer} >= {"lstm layer 1 output", "lstm layer 2 h_n"}
    # the module's output read outside it is its h_n: (layers, batch, hidden), not output's
    stacked = [v for v in layers.values if v.torch_module == "lstm" and v.onnx_op == "Concat"]
    assert [v.shape for v in stacked] == [(3, 1, 16)]
    assert all(v.status == LayerStatus.PASS for v in layers.values)
    assert "no value diverges" in format_layers(layers)


def test_clean_dynamo_lstm_compares_each_layer_and_the_getitem(lstm: Exports) -> None:
    run = validate(lstm.model, lstm.dynamo, inputs={"x": lstm.x}, layers=True)
    layers = run.layers
    assert run.passed and layers is not None and layers.first_divergence is None
    compared = {v.onnx_value for v in layers.values}
    assert "getitem_1" in compared  # h_n: one output of the multi-output lstm FX node
    assert sum(1 for v in layers.values if v.onnx_op == "LSTM") >= 6  # Y and Y_h, 3 layers


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_a_scaled_weight_in_lstm_layer_1_is_named_at_layer_1(lstm: Exports, exporter: str) -> None:
    bug = lstm.legacy_bug if exporter == "legacy" else lstm.dynamo_bug
    run = validate(lstm.model, bug, inputs={"x": lstm.x}, layers=True)
    layers = run.layers
    assert not run.passed and layers is not None
    first = layers.first_divergence
    assert first is not None
    assert first.onnx_node == _recurrent_nodes(bug)[1].name
    assert first.torch_module == "lstm"
    assert first.torch_node is not None and "layer 1" in first.torch_node
    confirmation = layers.confirmation_of(first)
    assert confirmation is not None and confirmation.outcome == "born"
    # layer 0 agrees: the error is not named one layer early
    layer0 = [v for v in layers.values if v.torch_node and "layer 0" in v.torch_node]
    assert layer0 and all(v.status == LayerStatus.PASS for v in layer0)


def test_gru_legacy_layers_compared_output_to_output(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = Encoder(nn.GRU).eval()
    x = torch.randn(2, 7, 8)
    path = tmp_path / "gru.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"])
    bug = tmp_path / "gru_bug.onnx"
    plant(path, bug, _recurrent_nodes(path)[2].name, "scale", 0.05)
    clean = validate(model, path, inputs={"x": x.numpy()}, layers=True).layers
    assert clean is not None and clean.first_divergence is None
    assert sum(1 for v in clean.values if v.onnx_op == "GRU") == 6  # Y and Y_h per layer
    broken = validate(model, bug, inputs={"x": x.numpy()}, layers=True).layers
    assert broken is not None and broken.first_divergence is not None
    assert broken.first_divergence.torch_node in ("lstm layer 2 output", "lstm layer 2 h_n")


def test_a_shape_mismatch_is_never_a_divergence() -> None:
    assert not LayerStatus.SHAPE_MISMATCH.born
    assert LayerStatus.DIVERGES.born and LayerStatus.NONFINITE.born
