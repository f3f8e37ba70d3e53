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
from tests.helpers.layers_deep import CARRIED_BLOCK, PLANTED_BLOCK, DeepExport, deep_export
from tests.helpers.planted_blocks import PLANTED_MODULE, planted_export


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


def test_confirmation_reads_the_comparison_pass_and_decides_the_same(deep, monkeypatch) -> None:
    """The flagged nodes are fed torch's values held from the comparison pass: the
    confirmation runs no torch pass of its own, and every outcome and figure is the one its
    own capture pass gives."""
    from parity.layers import birth, torch_side
    from parity.layers.localise import localise
    from parity.load.onnx_model import load_onnx
    from parity.load.torch_model import load_torch_model
    from parity.run.inputs import make_input_sets

    signature = load_onnx(deep.onnx).signature
    sets = make_input_sets(signature, dims={}, n_sets=1, seed=0)
    model = load_torch_model(str(deep.pt2))
    passes: list[int] = []
    real_run = torch_side.FxCapture.run

    def counting(self, input_set, wanted, on_value):
        passes.append(len(wanted))
        return real_run(self, input_set, wanted, on_value)

    monkeypatch.setattr(torch_side.FxCapture, "run", counting)

    def torch_passes(**options):
        passes.clear()
        result = localise(model, deep.onnx, sets, signature, **options)
        return result, len(passes)

    _, without = torch_passes(confirm=False)
    held, with_held = torch_passes()
    monkeypatch.setattr(birth.HeldRefs, "covering", lambda *_a, **_k: None)
    own, with_own = torch_passes()
    assert with_held == without and with_own == without + 1
    assert len(held.confirmations) > 1  # block 6's Gelu carried, then the planted block
    assert held.confirmations == own.confirmations
    assert held.first_divergence == own.first_divergence
    assert held.values == own.values


def test_held_refs_keep_a_value_while_a_later_cut_reads_it() -> None:
    from onnx import TensorProto, helper

    from parity.layers.birth import HeldRefs

    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Neg", ["a"], ["b"]),
            helper.make_node("Add", ["b", "a"], ["c"]),
            helper.make_node("Exp", ["c"], ["d"]),
        ],
        "g",
        [vi("x")],
        [vi("d")],
    )
    proto = helper.make_model(graph)
    one = np.ones(2, np.float32)  # 8 bytes
    names = ("a", "b", "c", "d")

    def pass_(flagged: str | None, budget: int = 1 << 20) -> HeldRefs:
        held = HeldRefs(proto, names, ("x",), budget)
        for name in names:
            held.offer(name, 0, one * names.index(name), name == flagged)
        return held

    assert pass_(None).reads == {"a": (), "b": ("a",), "c": ("b", "a"), "d": ("c",)}
    clean = pass_(None)
    assert clean.used == 0  # every value let go once the last cut reading it was compared
    assert clean.covering(0, ["a"], 1 << 20) is None
    flagged = pass_("c")
    kept = flagged.covering(0, ["c", "b", "a"], 1 << 20)
    assert kept is not None and sorted(kept) == ["a", "b", "c"]
    assert kept["b"].tolist() == [1.0, 1.0]
    assert flagged.used == 24  # d: no cut reads it, and it is not flagged
    assert flagged.covering(0, ["c", "b", "a"], 16) is None  # more than the capture keeps
    assert pass_("c", budget=16).covering(0, ["c", "b", "a"], 1 << 20) is None
