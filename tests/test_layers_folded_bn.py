"""Issue 53: a legacy export folds each BatchNorm into the Conv before it; a bug in that
Conv is named at the Conv's module (docs/layers.md), not at the BatchNorm whose output the
folded value is compared with. Real export, a planted bias, --layers."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from parity import validate
from tests.helpers.plant_bug import plant


class ConvBn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm1d(8)
        self.conv2 = torch.nn.Conv1d(8, 8, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(x)))


def make() -> torch.nn.Module:
    torch.manual_seed(0)
    model = ConvBn()
    for bn in (model.bn1, model.bn2):  # trained-looking statistics, so the fold matters
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return model.eval()


def test_a_bug_in_a_folded_conv_is_named_at_the_conv(tmp_path: Path) -> None:
    clean, bug = tmp_path / "net.onnx", tmp_path / "bug.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(make(), (torch.randn(2, 4, 16),), str(clean), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b", 2: "t"}})  # fmt: skip
    plant(clean, bug, "/conv2/Conv", "bias", 0.05)
    run = validate(make(), str(bug), layers=True)
    first = run.layers.first_divergence
    assert first is not None and first.onnx_node == "/conv2/Conv", first
    assert first.torch_module == "conv2"
    said = [f.text for f in run.findings]
    assert any("diverge in conv2, at its Conv node /conv2/Conv" in t for t in said), said


class GruTagger(torch.nn.Module):
    """An embedding, a GRU whose ONNX output a Squeeze reshapes, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(29, 16)
        self.gru = torch.nn.GRU(16, 16, batch_first=True)
        self.out = torch.nn.Linear(16, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        y, _ = self.gru(self.emb(ids))
        return self.out(y)


def make_tagger() -> torch.nn.Module:
    torch.manual_seed(0)
    return GruTagger().eval()


def test_what_follows_a_reshaped_diverging_value_is_carried(tmp_path: Path) -> None:
    """Issue 53: the GRU's output reaches the head through a Squeeze whose shape does not
    pair with torch's; the head's error flowed in through it: carried, not diverging again."""
    clean, bug = tmp_path / "gru.onnx", tmp_path / "gru_bug.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(make_tagger(), (torch.randint(0, 29, (2, 7)),), str(clean),
                          dynamo=False, input_names=["ids"], output_names=["y"],
                          dynamic_axes={"ids": {0: "b", 1: "t"}})  # fmt: skip
    plant(clean, bug, "/gru/GRU", "bias", 0.5)
    run = validate(make_tagger(), str(bug), layers=True, input_sets=1)
    layers = run.layers
    assert layers.first_divergence.onnx_node == "/gru/GRU"
    head = [v for v in layers.values if v.onnx_node == "/out/Add"]
    assert head and all(v.status == "carried" for v in head), [v.status for v in head]
