"""The layers views on the real engine: a real dynamo export with a bug planted in block 2's
fc1 (tests/helpers/planted_blocks.py), validated by the real pipeline with layers on, real ONNX
Runtime.

Each test asks what a user would: does the picture point at the planted layer, does a clean
export show nothing, does the Model Explorer file address nodes that exist in the ONNX graph.
"""

from __future__ import annotations

import json
import math

import onnx
import pytest
from streamlit.testing.v1 import AppTest

from parity.cli import main
from parity.layers import figures as lf
from parity.layers import views
from parity.layers.model_explorer import DIVERGES_COLOR
from tests.helpers.planted_blocks import PLANTED_MODULE, planted_export, planted_layers_run
from tests.test_layers_page import APP, TIMEOUT


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return planted_export(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def planted_run(planted):
    return planted_layers_run(planted)


def test_the_figures_of_a_real_planted_bug_point_at_its_layer(planted_run):
    result = planted_run.layers
    first = result.first_divergence
    assert first is not None and first.torch_module == PLANTED_MODULE
    assert views.divergence_sentence(result).startswith(
        f"The export starts to diverge in {PLANTED_MODULE}: {first.onnx_op} node {first.onnx_node}"
    )
    fig = lf.depth_plot(result, threshold=result.threshold)
    (star,) = [t for t in fig.data if t.name == "first divergence"]
    assert list(star.x) == [first.order]
    assert PLANTED_MODULE in fig.layout.annotations[-1].text
    assert {t.name for t in fig.data} >= {"input set 0", "input set 1", "error born here"}
    # everything before the planted layer sits under the pass line, the planted layer above it
    line = fig.data[0]
    before = [y for x, y in zip(line.x, line.y, strict=True) if x < first.order and y == y]
    assert before and max(before) < math.log10(result.threshold)
    nodes = {n.path: n for n in views.module_tree(result, "error_ratio")}
    assert {p for p, n in nodes.items() if n.on_divergence_path} == {
        "", "blocks", "blocks.2", PLANTED_MODULE
    }  # fmt: skip
    assert nodes["blocks.0"].worst < result.threshold < nodes["blocks.2"].worst
    assert len(fig.to_json()) + len(lf.module_tree(result).to_json()) < 200_000


def test_a_clean_export_flags_nothing_and_the_views_say_so(planted):
    run = planted_layers_run(planted, clean=True)
    result = run.layers
    assert run.verdict == "pass" and result.first_divergence is None and result.matched > 0
    assert views.divergence_sentence(result).startswith("No divergence")
    fig = lf.depth_plot(result, threshold=result.threshold)
    assert not [t for t in fig.data if t.name in ("first divergence", "error born here")]
    assert all(n.worst is None or n.worst <= result.threshold
               for n in views.module_tree(result, "error_ratio"))  # fmt: skip


def test_cli_writes_model_explorer_node_data_for_nodes_of_the_real_graph(planted, tmp_path):
    out, html = tmp_path / "nodes.json", tmp_path / "report.html"
    argv = ["validate", "--model", str(planted.pt2), "--onnx", str(planted.onnx), "--layers",
            "--model-explorer", str(out), "--html", str(html)]  # fmt: skip
    assert main(argv) == 1  # the outputs fail: the exit code stays the outputs' verdict
    data = json.loads(out.read_text())
    graph = onnx.load(str(planted.onnx)).graph
    assert list(data) == [graph.name]
    results = data[graph.name]["results"]
    assert results and set(results) <= {n.name for n in graph.node}
    purple = [name for name, r in results.items() if r.get("bgColor") == DIVERGES_COLOR]
    planted_nodes = [n.name for n in graph.node if n.op_type == "Gemm"]
    assert purple == [planted_nodes[4]]  # block 2's fc1: the fifth Linear
    page = html.read_text()
    section = page[page.index("<h2>Layers</h2>") :]
    assert f"The export starts to diverge in {PLANTED_MODULE}" in section
    assert "<script src" not in page


def test_the_layers_page_on_the_real_run_opens_the_kept_divergence_in_inspect(planted_run):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["parity_run"] = planted_run
    at.session_state["parity_tolerances"] = planted_run.tolerances
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    assert any(t.value.startswith(f"The export starts to diverge in {PLANTED_MODULE}")
               for t in at.text)  # fmt: skip
    table = at.dataframe[0].value
    first = planted_run.layers.first_divergence
    row = table[(table["order"] == first.order) & (table["set"] == first.input_set)]
    assert list(row["status"]) == ["✗ diverges"] and list(row["arrays"]) == ["kept"]
    at.session_state["parity_inspect_layer"] = (first.order, first.input_set)
    at.switch_page("pages/inspect_page.py").run()
    assert not at.exception, at.exception
    assert any(PLANTED_MODULE in t.value and first.onnx_node in t.value for t in at.text)
    assert any(c.proto.spec and "heatmap" in c.proto.spec for c in at.get("plotly_chart"))


def test_the_run_page_checkbox_compares_layers_and_the_layers_page_names_the_bug():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    at.checkbox(key="run_layers").check().run()
    at.switch_page("pages/overview.py").run()  # the box is kept while other pages are shown
    at.switch_page("pages/run.py").run()
    assert at.checkbox(key="run_layers").value is True
    at.button(key="demo_broken").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run.model == "demo:broken" and run.layers is not None
    first = run.layers.first_divergence
    assert first is not None and first.onnx_op == "Pad"  # the demo's one real export bug
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    assert any("Pad node" in t.value for t in at.text)
    # issue 22: the box was for that run; the next run compares outputs only unless ticked
    at.switch_page("pages/run.py").run()
    assert at.checkbox(key="run_layers").value is False
