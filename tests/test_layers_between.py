"""--layers never blames a clean module: the ops between two matched modules (or in a
module's own forward) are a place of their own.

The model is global average pooling written as the field writes it, `y.sum((2, 3)) /
float(h * w)`, then `self.fc`; exported at 1 x 3 x 64 x 48 with dynamic axes by both
exporters, each freezes 3072 = 64 x 48 into a Div, so at another size the output is wrong at
every element. `--layers` must name that Div (compared as the input `fc` receives), not the
Linear after it; on the dynamo export the torch side's re-export freezes the same constant,
which Parity must notice (outputs against eager torch) rather than say "no value diverges".
"""

from __future__ import annotations

import json
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from parity import validate
from parity.cli import main
from parity.layers.birth_words import birth_sentence
from parity.layers.result import Confirmation, LayersResult, LayerValue
from parity.layers.views import divergence_sentence
from parity.load.torch_model import load_torch_model
from tests.helpers.two_exports import export_both

SOURCE = textwrap.dedent(
    '''
    import torch
    from torch import nn


    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            h, w = y.shape[2], y.shape[3]
            return self.fc(y.sum((2, 3)) / float(h * w))


    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
            self.head = nn.Linear(8, 2)


    class Wrapper(nn.Module):
        """A factory's wrapper that calls a grandchild module."""

        def __init__(self):
            super().__init__()
            self.m = Inner()

        def forward(self, x):
            return self.m.encoder(x)


    def make():
        torch.manual_seed(0)
        return Pooled().eval()


    def wrapped():
        torch.manual_seed(0)
        return Wrapper().eval()
    '''
)


@dataclass(frozen=True)
class Files:
    source: Path
    legacy: Path
    dynamo: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("between")
    source = root / "pooled.py"
    source.write_text(SOURCE)
    model = load_torch_model(f"{source}:make").module
    x = torch.randn(1, 3, 64, 48)
    dims = torch.export.Dim
    legacy, dynamo = export_both(
        model,
        x,
        root,
        dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        dynamic_shapes={
            "x": {
                0: dims("batch", max=64),
                2: dims("height", min=8, max=1024),
                3: dims("width", min=8, max=1024),
            }
        },
        output="y",
    )
    return Files(source, legacy, dynamo)


def _sets() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        {"x": rng.standard_normal((1, 3, 64, 48)).astype(np.float32)},  # the export's size
        {"x": rng.standard_normal((1, 3, 32, 40)).astype(np.float32)},
    ]


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_layers_name_the_div_not_the_linear_after_it(files: Files, exporter: str) -> None:
    path = files.legacy if exporter == "legacy" else files.dynamo
    model = load_torch_model(f"{files.source}:make").module
    run = validate(model, path, inputs=_sets(), layers=True)
    assert not run.passed  # wrong at every element at 32 x 40
    layers = run.layers
    assert layers is not None
    first = layers.first_divergence
    assert first is not None, layers.notes
    assert first.onnx_op == "Div" and first.feeds == "fc"
    assert first.input_set == 1  # the export's own size agrees
    assert first.ops[-1].startswith("Div ")
    assert layers.confirmation_of(first).outcome == "born"
    fc = [v for v in layers.values if v.torch_module == "fc" and v.feeds is None]
    assert fc and all(v.status != "diverges" for v in fc)  # the clean Linear is not blamed
    sentence = divergence_sentence(layers)  # the dashboard's and the HTML report's words
    assert "between 'conv' and 'fc'" in sentence and "not in fc after them" in sentence
    if exporter == "dynamo":  # its re-export froze the constant too: said, eager compared
        assert any("disagrees with eager torch" in n for n in layers.notes)


def test_the_terminal_says_the_ops_between_conv_and_fc(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.json"
    code = main(
        [
            "validate", "--model", f"{files.source}:make", "--onnx", str(files.legacy),
            "--dim", "height=32", "--dim", "width=40", "--layers", "--json", str(report),
        ]
    )  # fmt: skip
    assert code == 1
    out = capsys.readouterr().out
    assert "the ops of Pooled.forward between 'conv' and 'fc'" in out
    assert "Div '/Div'" in out
    first = json.loads(report.read_text())["layers"]["first_divergence"]
    assert (first["onnx_node"], first["input_of"]) == ("/Div", "fc")
    assert "Div '/Div'" in first["ops"]


def test_a_wrapper_calling_a_grandchild_gets_its_values_matched_on_legacy(tmp_path: Path) -> None:
    source = tmp_path / "wrapped.py"
    source.write_text(SOURCE)
    model = load_torch_model(f"{source}:wrapped").module
    path = tmp_path / "wrap.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 4),), str(path), dynamo=False)
    run = validate(model, path, inputs={"onnx::Gemm_0": np.ones((2, 4), np.float32)}, layers=True)
    layers = run.layers
    assert layers is not None and layers.matched >= 3
    modules = {v.torch_module for v in layers.values}
    assert {"m.encoder.0", "m.encoder.1", "m.encoder.2"} <= modules


def test_an_unconfirmed_birth_lists_the_unmatched_nodes_it_stands_for() -> None:
    ops = ("Relu '/Relu'", "ReduceSum '/ReduceSum'", "Div '/Div'")
    first = LayerValue(
        order=4, onnx_value="/Div_output_0", onnx_node="/Div", onnx_op="Div",
        torch_module="", torch_node="Pooled.forward", input_set=1, shape=(1, 8),
        max_abs=0.2, max_rel=0.5, scale=1.0, error_ratio=0.3, jump=1e5, cosine=1.0,
        status="diverges", feeds="fc", ops=ops,
    )  # fmt: skip
    unconfirmed = Confirmation(
        order=4, input_set=1, onnx_value="/Div_output_0", onnx_node="/Div", onnx_op="Div",
        torch_module="", outcome="unconfirmed", reason="over the memory budget",
    )  # fmt: skip
    result = LayersResult(
        criterion="", matching="module boundaries", matched=3, unmatched_onnx=4,
        unmatched_torch=0, first_divergence=first, values=(first,),
        confirmations=(unconfirmed,),
    )  # fmt: skip
    sentence = birth_sentence(result)
    assert sentence is not None and all(op in sentence for op in ops)
    assert LayerValue.from_json(first.to_json()) == first  # saved runs keep feeds and ops
