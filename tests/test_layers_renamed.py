"""Graph outputs renamed at export (`output_names`) are still matched, and still verified.

A dynamo export renames the FX node's value (`linear`) to the user's name (`hidden`); the
exporter records the old name on the output. A bug planted in the module producing `hidden`
must be named at that module, not at the op after it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
import torch

from parity.layers.localise import localise
from parity.load.onnx_model import load_onnx
from parity.load.torch_model import load_torch_model
from parity.run.inputs import make_input_sets

SOURCE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 16)
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            hidden = self.body(x)
            return {"hidden": hidden, "logits": self.head(torch.tanh(hidden))}


    def make():
        torch.manual_seed(0)
        return Head().eval()
    """
)
NAMES = ["hidden", "logits"]


@dataclass(frozen=True)
class Exports:
    factory: str
    weights: Path
    pt2: Path  # the buggy model's program
    dynamo: Path  # exported from the buggy model, body.bias nudged
    legacy: Path


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    root = tmp_path_factory.mktemp("renamed")
    (root / "head_net.py").write_text(SOURCE)
    factory = f"{root / 'head_net.py'}:make"
    model = load_torch_model(factory).module
    torch.save(model.state_dict(), root / "head.pt")
    x = torch.randn(3, 8)
    with torch.no_grad():
        model.body.bias += 1e-2  # the bug, in the module whose output becomes "hidden"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(model, (x,))
        torch.onnx.export(program, dynamo=True, output_names=NAMES).save(str(root / "dyn.onnx"))
        torch.onnx.export(
            model, (x,), str(root / "leg.onnx"), dynamo=False, input_names=["x"], output_names=NAMES
        )
        clean = load_torch_model(factory).module
        torch.export.save(torch.export.export(clean, (x,)), root / "head.pt2")
    return Exports(
        factory, root / "head.pt", root / "head.pt2", root / "dyn.onnx", root / "leg.onnx"
    )


def _localise(spec: str, onnx_path: Path, weights: Path | None = None):
    model = load_torch_model(spec, weights=weights)
    signature = load_onnx(onnx_path).signature
    sets = make_input_sets(signature, dims={}, n_sets=1, seed=0)
    return localise(model, onnx_path, sets, signature)


@pytest.mark.parametrize("torch_side", ["pt2", "factory"])
def test_a_bug_in_a_renamed_output_s_module_is_named_there(exports: Exports, torch_side) -> None:
    if torch_side == "pt2":
        result = _localise(str(exports.pt2), exports.dynamo)
    else:
        result = _localise(exports.factory, exports.dynamo, exports.weights)
    assert result.matching == "fx names"
    by_value = {v.onnx_value: v for v in result.values}
    assert by_value["hidden"].torch_node == "linear" and by_value["hidden"].torch_module == "body"
    assert by_value["logits"].torch_node == "linear_1"
    first = result.first_divergence
    assert first is not None
    assert (first.onnx_value, first.torch_module, first.torch_node) == ("hidden", "body", "linear")
    assert by_value["tanh"].status == "carried"
    assert any("renamed at export" in n for n in result.notes)


def test_legacy_exports_match_renamed_outputs_by_module_scope(exports: Exports) -> None:
    result = _localise(exports.factory, exports.legacy, exports.weights)
    first = result.first_divergence
    assert first is not None
    assert (first.onnx_value, first.torch_module) == ("hidden", "body")


def _rewrite_output_records(src: Path, dst: Path, record: dict[str, str | None]) -> None:
    model = onnx.load(str(src))
    for out in model.graph.output:
        props = [p for p in out.metadata_props if p.key != "pkg.torch.onnx.original_node_name"]
        del out.metadata_props[:]
        out.metadata_props.extend(props)
        if record.get(out.name):
            out.metadata_props.add(key="pkg.torch.onnx.original_node_name", value=record[out.name])
    onnx.save(model, str(dst))


def test_without_the_exporter_s_record_the_output_order_is_used(exports, tmp_path) -> None:
    bare = tmp_path / "bare.onnx"
    _rewrite_output_records(exports.dynamo, bare, {})
    first = _localise(str(exports.pt2), bare).first_divergence
    assert first is not None and (first.onnx_value, first.torch_node) == ("hidden", "linear")


def test_a_record_that_its_producer_contradicts_is_not_compared(exports, tmp_path) -> None:
    lying = tmp_path / "lying.onnx"
    _rewrite_output_records(exports.dynamo, lying, {"hidden": "tanh", "logits": "linear_1"})
    result = _localise(str(exports.pt2), lying)
    assert "hidden" not in {v.onnx_value for v in result.values}
    assert any("could not be traced" in n for n in result.notes)
    # what is still matched is what it claims: the error now shows first at tanh
    assert result.first_divergence is not None
    assert result.first_divergence.torch_node == "tanh"


def test_cli_names_the_module_and_prints_only_parity_s_lines(exports: Exports) -> None:
    """A fresh process: the exporter's registry (first use) logs nothing of torch's own."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    args = ["validate", "--model", str(exports.pt2), "--onnx", str(exports.dynamo), "--layers"]
    done = subprocess.run(
        [sys.executable, "-m", "parity", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]  # the outputs' verdict: the bias is off
    assert "diverges first at 'body'" in done.stdout
    assert done.stderr.strip() == ""
