"""What the layers views draw and write, on LayersResults built by hand with known numbers.

(The same views on a real export with a planted bug are in tests/test_layers_ui_real.py;
here the numbers are chosen so every assertion has one right answer.)
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from parity.layers import figures as lf
from parity.layers import model_explorer as me
from parity.layers import views
from parity.layers.result import KeptValue, LayersResult, LayerValue

EVIL = "blocks.<b>2</b>.**mlp**"


def _value(order, module, *, input_set=0, ratio=0.1, status="pass", node=None, op="Gemm"):
    return LayerValue(
        order=order,
        onnx_value=f"v{order}",
        onnx_node=f"/n{order}/{op}" if node is None else node,
        onnx_op=op,
        torch_module=module,
        torch_node=f"fx{order}",
        input_set=input_set,
        shape=(2, 4),
        max_abs=None if ratio is None else ratio * 1e-6,
        max_rel=None,
        scale=1e-6,
        error_ratio=ratio,
        jump=1e3 if status == "diverges" else 1.0,
        cosine=1.0,
        status=status,
        inputs=(order - 1,) if order else (),
    )


def chain(n_blocks=4, bug=2, sets=2, module=None) -> LayersResult:
    """Blocks of three values (fc1, act, fc2); the bug is born in block `bug`'s fc1."""
    values, first = [], None
    order = 0
    for b in range(n_blocks):
        for sub in ("fc1", "act", "fc2"):
            for s in range(sets):
                after = b > bug or b == bug
                born = b == bug and sub == "fc1"
                status = "diverges" if born else ("carried" if after else "pass")
                path = module if (born and module) else f"blocks.{b}.{sub}"
                v = _value(order, path, input_set=s, ratio=(500.0 if after else 0.1) + s,
                           status=status)  # fmt: skip
                values.append(v)
                first = first or (v if born else None)
            order += 1
    return LayersResult(
        criterion="test criterion", matching="fx names", matched=order, unmatched_onnx=2,
        unmatched_torch=0, first_divergence=first, values=tuple(values),
        notes=("a note from the engine",), threshold=10.0, min_jump=10.0,
    )  # fmt: skip


def test_depth_plot_draws_one_line_per_set_and_marks_the_first_divergence():
    result = chain(module=EVIL)
    fig = lf.depth_plot(result, threshold=result.threshold)
    lines = [t for t in fig.data if t.name.startswith("input set")]
    assert [t.name for t in lines] == ["input set 0", "input set 1"]
    assert list(lines[0].x) == list(range(12))
    assert lines[0].y[0] == pytest.approx(math.log10(0.1))
    (star,) = [t for t in fig.data if t.name == "first divergence"]
    assert list(star.x) == [6]  # block 2's fc1
    label = fig.layout.annotations[-1].text
    assert "&lt;b&gt;2&lt;/b&gt;" in label and "<b>2</b>" not in label.replace("<b>blocks", "")
    assert any(s.x0 == 6 for s in fig.layout.shapes)  # the vertical line
    assert any(s.y0 == pytest.approx(1.0) for s in fig.layout.shapes)  # pass line at 1e1
    # where the error is born (both sets), drawn red over the lines
    (born,) = [t for t in fig.data if t.name == "error born here"]
    assert list(born.x) == [6, 6] and born.marker.color == lf.FAIL_COLOR


def test_depth_plot_counts_exact_zeros_and_puts_nonfinite_errors_at_the_top():
    values = [_value(0, "a", ratio=0.0), _value(1, "a", ratio=math.inf, status="nonfinite"),
              _value(2, "b", ratio=0.5)]  # fmt: skip
    result = LayersResult("c", "m", 3, 0, 0, values[1], tuple(values), threshold=10.0)
    fig = lf.depth_plot(result, threshold=10.0)
    line = fig.data[0]
    assert math.isnan(line.y[0])  # an exact zero has no place on a log axis...
    assert "1 exactly equal" in fig.layout.title.text  # ...and is said, and marked
    (equal,) = [t for t in fig.data if t.name == "exactly equal (0)"]
    assert list(equal.x) == [0] and equal.y[0] < line.y[2]
    assert line.y[1] == pytest.approx(fig.layout.yaxis.range[1] - 0.15)


def test_a_long_graph_is_thinned_but_keeps_every_divergence_and_stays_small():
    n = 20_000
    values = [_value(i, f"m.{i // 100}.x", ratio=0.1 + (i % 7) * 0.01) for i in range(n)]
    values[12_345] = _value(12_345, "m.123.x", ratio=900.0, status="diverges")
    result = LayersResult("c", "m", n, 0, 0, values[12_345], tuple(values), threshold=10.0)
    fig = lf.depth_plot(result, threshold=10.0)
    line = fig.data[0]
    assert len(line.x) <= lf.MAX_POINTS_PER_SET + 1
    assert 12_345 in list(line.x)
    assert "thinned" in fig.layout.title.text
    assert len(fig.to_json()) < 2 * 1024 * 1024
    tree = lf.module_tree(result, threshold=10.0)
    assert len(tree.to_json()) < 2 * 1024 * 1024


def test_module_tree_colours_each_module_by_its_subtree_worst_and_outlines_the_bug_path():
    result = chain()
    nodes = {n.path: n for n in views.module_tree(result, "error_ratio")}
    assert nodes[""].n_values == 12 and nodes["blocks"].n_values == 12
    assert nodes["blocks.1"].worst == pytest.approx(1.1)  # worst input set of the clean block
    assert nodes["blocks.2"].worst == pytest.approx(501.0)
    assert nodes["blocks.2"].n_divergent == 1 and nodes["blocks.1"].n_divergent == 0
    on_path = {p for p, n in nodes.items() if n.on_divergence_path}
    assert on_path == {"", "blocks", "blocks.2", "blocks.2.fc1"}
    # children in the order the graph runs them, not alphabetical
    kids = [n.path for n in nodes.values() if n.parent == "blocks.0"]
    assert kids == ["blocks.0.fc1", "blocks.0.act", "blocks.0.fc2"]

    fig = lf.module_tree(result, threshold=10.0)
    (icicle,) = fig.data
    ids = list(icicle.ids)
    colour = dict(zip(ids, icicle.marker.colors, strict=True))
    assert colour["blocks.2"] == pytest.approx(math.log10(501.0))
    # the pass line (log10 10 = 1) is the middle of the scale: green below, red above
    assert (icicle.marker.cmin + icicle.marker.cmax) / 2 == pytest.approx(1.0)
    assert any("pass line" in t for t in icicle.marker.colorbar.ticktext)
    width = dict(zip(ids, icicle.marker.line.width, strict=True))
    assert width["blocks.2.fc1"] > width["blocks.1.fc1"]


def test_a_module_s_own_ops_get_their_own_leaf_in_the_tree():
    values = [_value(0, "blk.fc", ratio=0.1), _value(1, "blk", ratio=50.0, status="diverges")]
    result = LayersResult("c", "m", 2, 0, 0, values[1], tuple(values), threshold=10.0)
    (icicle,) = lf.module_tree(result, threshold=10.0).data
    leaf = list(icicle.ids).index("blk" + lf.OWN)
    assert icicle.parents[leaf] == "blk" and icicle.values[leaf] == 1
    assert icicle.labels[leaf] == "(own ops) ✗1"
    assert icicle.marker.colors[leaf] == pytest.approx(math.log10(50.0))


def test_names_are_escaped_in_every_figure_text():
    result = chain(module=EVIL)
    for fig in (lf.depth_plot(result, threshold=10.0), lf.module_tree(result, threshold=10.0)):
        data = json.loads(fig.to_json())
        for trace in data["data"]:  # ids / parents are keys, never drawn
            trace.pop("ids", None), trace.pop("parents", None)
        payload = json.dumps(data)  # (plotly's own JSON escapes < and &: compare decoded)
        assert "<b>2</b>" not in payload
        assert "&lt;b&gt;2&lt;/b&gt;" in payload


def test_divergence_sentence_names_module_op_node_and_jump():
    result = chain()
    text = views.divergence_sentence(result)
    assert text.startswith("The export starts to diverge in blocks.2.fc1: Gemm node /n6/Gemm")
    assert "1e+03× the largest error flowing into it" in text
    assert views.jump_words(_value(0, "a", status="diverges")).endswith(
        "× the noise floor (no matched value feeds it)"
    )
    clean = LayersResult("c", "m", 5, 0, 0, None, (_value(0, "a"),))
    assert views.divergence_sentence(clean).startswith("No divergence")
    none = LayersResult("c", "m", 0, 7, 3, None, ())
    assert "nothing compared" in views.divergence_sentence(none)
    assert views.limits(none)[:2] == [
        "7 ONNX value(s) have no torch counterpart.",
        "3 torch value(s) have no ONNX counterpart.",
    ]


def test_model_explorer_node_data_is_what_its_onnx_adapter_reads(tmp_path):
    result = chain()
    values = list(result.values)
    values.append(_value(99, "tail", ratio=math.inf, status="nonfinite", node="/tail/Add"))
    values.append(_value(100, "tail", ratio=1.0, node=""))  # an unnamed node
    result = LayersResult("c", "m", 14, 0, 0, result.first_divergence, tuple(values),
                          threshold=10.0)  # fmt: skip
    path = tmp_path / "node_data.json"
    written = me.write_node_data(result, path, pass_line=10.0, onnx_path=None)
    data = json.loads(path.read_text(), parse_constant=_no_constants)
    assert list(data) == ["main_graph"]
    graph = data["main_graph"]
    results, thresholds = graph["results"], graph["thresholds"]
    assert len(results) == written.n_nodes == 13 and written.skipped == 1
    # one value per node: its worst input set
    assert results["/n3/Gemm"] == {"value": pytest.approx(1.1)}
    assert results["/n6/Gemm"]["bgColor"] == me.DIVERGES_COLOR  # born here: purple
    assert results["/tail/Add"]["value"] == pytest.approx(1.7976931348623157e308)
    levels = [t["value"] for t in thresholds]
    assert levels == sorted(levels) and 10.0 in levels
    assert all(set(t) == {"value", "bgColor"} for t in thresholds)
    assert not list(tmp_path.glob(".*parity-tmp"))  # written atomically, no temp left


def test_model_explorer_graph_id_is_the_onnx_graph_name(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "my_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    model_path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), model_path)
    assert me.graph_name(model_path) == "my_graph"
    assert me.graph_name(tmp_path / "missing.onnx") == me.DEFAULT_GRAPH


def test_kept_values_are_found_by_order_and_set():
    result = chain()
    ref = np.ones((2, 4), np.float32)
    kept = (KeptValue(6, 1, "v6", ref, ref + 1),)
    result = LayersResult(**{**result.__dict__, "kept": kept})
    assert views.kept(result, 6, 1).onnx_value == "v6"
    assert views.kept(result, 6, 0) is None
    assert views.find_value(result, 6, 1).status == "diverges"


def _no_constants(name: str):
    raise AssertionError(f"non-strict JSON constant {name}")


def test_the_html_report_gets_a_layers_section_offline_and_escaped():
    from parity.reports.html_report import figure_count, render_html_report
    from parity.results import ValidationRun
    from parity.tolerances import Tolerances

    run = ValidationRun(
        model="m.pt2", onnx="m.onnx", signature=None, tolerances=Tolerances(), environment={},
        input_sets=(), outputs=(), layers=chain(module=EVIL),
    )  # fmt: skip
    page = render_html_report(run)
    section = page[page.index("<h2>Layers</h2>") :]
    assert "The export starts to diverge in blocks.&lt;b&gt;2&lt;/b&gt;.**mlp**" in section
    assert "<b>2</b>" not in section
    assert "2 ONNX value(s) have no torch counterpart." in section
    assert "From the first divergence on" in section
    # the depth plot and the module tree (an icicle: plotly's own name for the trace)
    assert figure_count(run) == page.count("class='fig ") == 2
    assert section.count('"type":"icicle"') == 1
    from dataclasses import replace

    layers = chain()
    flat_layers = replace(
        layers, values=tuple(replace(v, torch_module=None) for v in layers.values)
    )
    flat = replace(run, layers=flat_layers)
    assert figure_count(flat) == 1  # no module names: no tree to draw
    assert "<script src" not in page  # plotly inlined once, no network
    no_layers = replace(run, layers=None)
    assert "<h2>Layers</h2>" not in render_html_report(no_layers)


def test_the_html_report_looks_the_same_whatever_plotly_template_the_process_uses():
    """Importing Streamlit makes its theme plotly's default template; the dashboard's
    'Download HTML report' must give the CLI's report, not one restyled by that theme."""
    import plotly.io as pio
    import streamlit.elements.plotly_chart  # noqa: F401  (registers and selects its template)

    from parity.reports.html_report import render_html_report
    from parity.results import ValidationRun
    from parity.tolerances import Tolerances

    run = ValidationRun(
        model="m.pt2", onnx="m.onnx", signature=None, tolerances=Tolerances(), environment={},
        input_sets=(), outputs=(), layers=chain(module=EVIL),
    )  # fmt: skip
    before = pio.templates.default
    try:
        pio.templates.default = "streamlit"
        themed = render_html_report(run)
        pio.templates.default = "plotly"
        plain = render_html_report(run)
    finally:
        pio.templates.default = before

    def body(page: str) -> str:  # figure div ids are random; the footer has the time
        return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID",
                      page.split("<footer>")[0])  # fmt: skip

    assert body(themed) == body(plain)
    assert themed.count('"type":"icicle"') == 1  # the module tree's trace, no theme entries


def test_the_part_outside_any_module_has_one_name_and_jumps_read_with_the_times_sign():
    """Issue 22: the sentence, the terminal and the module tree said "(no torch module)",
    "(top level)" and "(own ops)" for the same part; jumps read "8.21e+06x" beside "×"."""
    from parity.labels import OUTSIDE_MODULES
    from parity.layers.text import format_layers

    values = [_value(0, "blk.fc", ratio=0.1), _value(1, "", ratio=50.0, status="diverges")]
    result = LayersResult("c", "m", 2, 0, 0, values[1], tuple(values), threshold=10.0)
    sentence = views.divergence_sentence(result)
    assert f"diverge in {OUTSIDE_MODULES}: Gemm node" in sentence
    assert "1e+03× the largest error flowing into it" in sentence and "x the" not in sentence
    assert OUTSIDE_MODULES in format_layers(result)
    (icicle,) = lf.module_tree(result, threshold=10.0).data
    labels = [str(x) for x in icicle.labels]
    assert any(x.startswith(OUTSIDE_MODULES) for x in labels), labels
    assert not any("own ops" in x or "top level" in x or "no torch module" in x for x in labels)
