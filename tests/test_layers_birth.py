"""Confirming where an error is born (issue 20): each value the criterion flags is re-run
alone in ONNX Runtime on torch's values of its inputs; the first whose error reappears is
the first divergence, the others are carried. Real exports, real runtimes, planted bugs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from parity.cli import main
from parity.layers import confirm
from parity.layers.result import LayersResult
from parity.layers.text import format_layers
from parity.pipeline import RunConfig, run_validation
from parity.reports.html_report import render_html_report
from tests.layers_deep import CARRIED_BLOCK, PLANTED_BLOCK, DeepExport, deep_export
from tests.layers_planted import PLANTED_MODULE, planted_export


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> DeepExport:
    return deep_export(tmp_path_factory.mktemp("deep"))


@pytest.fixture(scope="module")
def deep_run(deep: DeepExport):
    return run_validation(RunConfig(model=str(deep.pt2), onnx=str(deep.onnx), layers=True))


def test_deep_model_names_the_planted_block_and_carries_block_6(deep, deep_run) -> None:
    layers = deep_run.layers
    first = layers.first_divergence
    assert first is not None
    assert first.torch_module == f"blocks.{PLANTED_BLOCK}"
    assert first.onnx_value == deep.planted_value
    born = layers.confirmation_of(first)
    assert born is not None and born.outcome == "born"
    assert born.max_abs == pytest.approx(0.05, rel=1e-3)  # the nudge itself, from exact inputs
    carried = layers.with_outcome("carried")
    assert carried, layers.notes
    assert {c.torch_module for c in carried} == {f"blocks.{CARRIED_BLOCK}.act"}
    assert {c.onnx_op for c in carried} == {"Gelu"}
    gelu = next(v for v in layers.values if v.onnx_value == carried[0].onnx_value)
    assert gelu.status == "carried"  # re-labelled: the figures no longer draw it as born
    assert carried[0].max_abs * 10 < gelu.max_abs  # alone it errs far less than in the run


def test_deep_confirmation_in_json_terminal_and_html(deep_run, tmp_path: Path) -> None:
    layers = deep_run.layers
    data = json.loads(json.dumps(layers.to_json()))
    alone = data["first_divergence"]["alone"]
    assert set(alone) == {"max_abs", "error_ratio"}
    assert alone["max_abs"] == pytest.approx(0.05, rel=1e-3)
    assert data["first_divergence"]["confirmation"] == "born"
    assert [c["onnx_op"] for c in data["carried"]] == ["Gelu"] * len(data["carried"])
    assert data["unconfirmed"] == []
    back = LayersResult.from_json(data)
    assert back.confirmations == layers.confirmations  # saved runs keep it
    text = format_layers(layers)
    assert "alone still errs by" in text and "the error is born here" in text
    assert f"carried: 'blocks.{CARRIED_BLOCK}.act': Gelu node" in text
    html = render_html_report(deep_run)
    assert "the error is born here" in html and "Flagged by the criterion but not born" in html


def test_clean_deep_export_names_nothing_and_says_why(deep) -> None:
    run = run_validation(RunConfig(model=str(deep.pt2), onnx=str(deep.clean_onnx), layers=True))
    layers = run.layers
    assert layers.first_divergence is None
    assert [c.outcome for c in layers.confirmations] == ["carried"] * len(layers.confirmations)
    assert layers.confirmations  # the criterion alone would have named block 6's Gelu
    assert "No op is confirmed" in format_layers(layers)


def test_planted_pt2_export_is_confirmed(tmp_path: Path) -> None:
    files = planted_export(tmp_path)
    run = run_validation(
        RunConfig(model=str(files.pt2), onnx=str(files.onnx), n_input_sets=2, layers=True)
    )
    first = run.layers.first_divergence
    assert first is not None and first.torch_module == PLANTED_MODULE
    c = run.layers.confirmation_of(first)
    assert c is not None and c.outcome == "born" and c.max_abs > 1e-3


def test_without_confirmation_the_criterion_names_block_6(deep) -> None:
    from parity.layers.localise import localise
    from parity.load.onnx_model import load_onnx
    from parity.load.torch_model import load_torch_model
    from parity.run.inputs import make_input_sets

    signature = load_onnx(deep.onnx).signature
    sets = make_input_sets(signature, dims={}, n_sets=1, seed=0)
    model = load_torch_model(str(deep.pt2))
    plain = localise(model, deep.onnx, sets, signature, confirm=False)
    assert plain.first_divergence.torch_module == f"blocks.{CARRIED_BLOCK}.act"
    assert plain.confirmations == ()


def test_a_cut_is_the_node_alone_and_checker_clean(deep, tmp_path: Path) -> None:
    proto = onnx.load(str(deep.onnx))
    producers = confirm.producers_of(proto)
    node = proto.graph.node[producers[deep.planted_value]]
    (x,) = [i for i in node.input if i not in {t.name for t in proto.graph.initializer}]
    arrays = {x: np.zeros((4, 32), np.float32)}
    c = confirm.cut(proto, deep.planted_value, {x}, arrays, np.zeros((4, 32), np.float32))
    assert isinstance(c, confirm.Cut)
    assert c.ops == ("Add",) and c.inputs == (x,)
    assert len(c.model.graph.initializer) == 1  # its own (planted) weight, nothing else
    onnx.checker.check_model(c.model, full_check=True)
    got = confirm.run_cut(c, arrays)
    assert got.reshape(-1)[0] == pytest.approx(0.05, rel=1e-5)  # plant: element 0
    # nothing known upstream: the walk would take the graph, not the node: refused in words
    refused = confirm.cut(proto, deep.planted_value, set(), {}, got, max_nodes=3)
    assert isinstance(refused, confirm.Refused) and "not all matched" in refused.reason


def test_cli_json_has_alone(deep, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code = main(
        ["validate", "--model", str(deep.pt2), "--onnx", str(deep.onnx), "--layers",
         "--json", str(out)]
    )  # fmt: skip
    assert code == 1
    first = json.loads(out.read_text())["layers"]["first_divergence"]
    assert first["torch_module"] == f"blocks.{PLANTED_BLOCK}"
    assert first["alone"]["max_abs"] > 0.04
