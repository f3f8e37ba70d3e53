"""Frozen sizes found as the field writes them (issue 53): a reshape whose file misses atol
1e-5 by its own rounding at its size, an interpolate to int(H), int(W) whose constant reaches
the Resize through a Concat with the runtime [N, C], a reshape whose size reaches it through
Gather / Unsqueeze / Concat, a batch-sized tensor baked by tracing; "a wrong pair" only when
no frozen explanation is confirmed; ONNX Runtime's node named as the file names it.

Legacy exports throughout; the dynamo exporter specialises int() of a dynamic dim (its files
take one size, said as static axes), except for `flat`, exported both ways.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from parity.cli import main
from tests.helpers import frozen_field_models as models


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("frozen_field")
    models.write_models(root)
    with contextlib.redirect_stdout(io.StringIO()):
        for name in models.SHAPES:
            models.export(root, name, dynamo=False)
        models.export(root, "flat", dynamo=True)
    return root


def validate(root: Path, name: str, exporter: str = "legacy", *flags: str) -> tuple[int, dict]:
    onnx = root / f"{name}_{exporter}.onnx"
    report = root / f"{name}_{exporter}.{len(flags)}.json"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["validate", "--model", f"{root / 'models.py'}:{name}", "--onnx", str(onnx)]
            + ["--json", str(report), *flags]
        )
    return code, json.loads(report.read_text())


def test_a_reshape_is_named_though_the_file_misses_atol_by_its_own_rounding(exports) -> None:
    """At its own 1 x 116 the correct file is ~4e-5 off torch (outputs near 200): the
    confirmation is judged against that rounding, not dropped at atol 1e-5."""
    code, report = validate(exports, "rounded")
    assert code == 1
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"]) == ("/Reshape", "Reshape")
    assert frozen["constant"] == [1.0, 116.0]
    assert frozen["dims"] == {"batch": 1, "seq": 116} and frozen["confirmed"] is True
    assert frozen["source"] == f"models.py:{models.line_of('y.reshape(int(b)')}"


def test_the_rounding_case_holds_at_its_own_size_at_the_default_atol(exports) -> None:
    """The premise: at 1 x 116 the file misses atol 1e-5 (by rounding), so a confirmation at
    the user's atol alone would drop it."""
    sizes = ["--dim", "batch=1", "--dim", "seq=116", "--input-sets", "1"]
    code, report = validate(exports, "rounded", "legacy", *sizes)
    assert code == 1 and report["outputs"][0]["status"] == "fail"
    assert report["outputs"][0]["max_abs"] < 1e-3


def test_an_interpolate_to_int_sizes_through_a_concat_names_the_resize(exports) -> None:
    """Resize(sizes = Concat(Shape(y)[:2], [96, 64])): named at the Resize, and the shapes
    that differ at every set are not "a wrong pair"."""
    code, report = validate(exports, "upsample")
    assert code == 1
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"]) == ("/Resize", "Resize")
    assert frozen["constant"] == [96.0, 64.0]
    assert frozen["dims"] == {"height": 96, "width": 64}
    assert frozen["source"] == f"models.py:{models.line_of('F.interpolate')}"
    assert report["likely_wrong_pair"] is False and report["wrong_pair_note"] is None
    assert "wrong pair" not in json.dumps(report["findings"])


def test_a_square_export_size_is_read_from_the_set_where_the_file_works(exports) -> None:
    """Exported at 32 x 32 (the default first set): each 32 is read as height x width (8 x 4)
    by the constants alone; the size where the file works is tried first."""
    code, report = validate(exports, "square")
    assert code == 1 and [o["status"] for o in report["outputs"]] == ["pass", "shape_mismatch"]
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"], frozen["constant"]) == ("/Resize", "Resize", [32, 32])
    assert frozen["dims"] == {"height": 32, "width": 32} and frozen["confirmed"]
    assert frozen["source"] == f"models.py:{models.line_of('F.interpolate(self.down')}"


def test_layers_never_call_a_frozen_outputs_shape_a_failed_pairing(exports) -> None:
    """The output's shape differs at 64 x 64 because the file froze 32 x 32: --layers says
    so as the run's own rows do, not "the pairing failed there (not an error of the export)"."""
    code, report = validate(exports, "square", "legacy", "--layers")
    notes = report["layers"]["notes"]
    assert code == 1 and report["frozen"], report["frozen"]
    assert not any("pairing failed" in n for n in notes), notes
    assert any(n.startswith("1 output(s) have another shape in ONNX") for n in notes), notes


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_a_size_through_gather_unsqueeze_concat_names_the_reshape(exports, exporter) -> None:
    code, report = validate(exports, "flat", exporter)
    assert code == 1
    [frozen] = report["frozen"]
    assert frozen["op"] == "Reshape" and 3072.0 in frozen["constant"]
    assert frozen["dims"] == {"height": 64, "width": 48}
    assert "height × width" in frozen["text"]


def test_a_batch_sized_tensor_baked_by_tracing_is_named(exports) -> None:
    code, report = validate(exports, "baked")
    assert code == 1
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"]) == ("/Concat", "Concat")
    assert frozen["constant"] == [1.0, 4.0] and frozen["dims"] == {"batch": 1}
    assert "made at the export's size" in frozen["text"]
    assert frozen["source"] == f"models.py:{models.line_of('torch.zeros(int(')}"


def test_an_expand_to_int_batch_through_where_names_the_expand(exports) -> None:
    code, report = validate(exports, "token")
    assert code == 1
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"]) == ("/Expand", "Expand")
    assert frozen["dims"] == {"batch": 1} and frozen["confirmed"] is True


def test_an_arange_baked_at_the_export_length_is_named(exports) -> None:
    code, report = validate(exports, "positions")
    assert code == 1
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"]) == ("/Add", "Add")
    assert frozen["constant"] == [24.0] and frozen["dims"] == {"seq": 24}
    assert "a range made at the export's size, of length 24" in frozen["text"]
    assert frozen["source"] == f"models.py:{models.line_of('torch.arange(int(n)')}"


def test_onnx_runtimes_fused_node_is_said_as_the_files_node(exports) -> None:
    """ORT raises in '/Reshape_new_reshape' (its fusion of /Reshape and /Reshape_1): the row
    names the file's node the frozen sentence names, ORT's name beside it."""
    code, report = validate(exports, "fused")
    assert code == 1
    [frozen] = report["frozen"]
    assert frozen["node"] == "/Reshape_1"
    errors = {o["message"] for o in report["outputs"] if o["status"] == "error"}
    assert errors and all(
        "Reshape node '/Reshape_1' (fused by ONNX Runtime into '/Reshape_new_reshape')" in m
        for m in errors
    )


def test_wrong_pair_is_still_said_without_a_frozen_explanation(tmp_path) -> None:
    import parity
    from parity.labels import wrong_pair_note
    from tests.helpers.wrong_pair import write_wrong_pair

    model, onnx = write_wrong_pair(tmp_path)
    run = parity.validate(str(model), onnx)
    assert run.frozen == () and wrong_pair_note(run) is not None


def test_constants_are_followed_through_shape_arithmetic_into_every_shape_input() -> None:
    """Tile, ConstantOfShape and Range read a size made of Cast / Unsqueeze / Concat / Mul of
    constants: each constant is a suspect named at the op that uses it as a size; a Gather's
    index and a Slice's bounds (positions, not sizes) are not."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from parity.judge.frozen_graph import suspects

    def const(name, value, dtype=np.int64):
        return helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype))
        )

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("zero", [0]),
        const("two", [2]),
        helper.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
        const("h_float", [48.0], np.float32),
        helper.make_node("Cast", ["h_float"], ["h"], to=TensorProto.INT64),
        const("w", 64),
        const("axes", [0]),
        helper.make_node("Unsqueeze", ["w", "axes"], ["w1"]),
        helper.make_node("Concat", ["nc", "h", "w1"], ["size"], axis=0),
        helper.make_node("Tile", ["x", "size"], ["tiled"], name="/Tile"),
        const("n", [3072]),
        const("k", [1]),
        helper.make_node("Mul", ["n", "k"], ["nk"]),
        helper.make_node("ConstantOfShape", ["nk"], ["zeros"], name="/ConstantOfShape"),
        const("idx", 1),
        helper.make_node("Gather", ["shape", "idx"], ["c"]),
        const("limit", 24),
        const("start", 0),
        const("step", 1),
        helper.make_node("Range", ["start", "limit", "step"], ["r"], name="/Range"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, "h", "w"])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("tiled", "zeros")],
    )
    found = {(s.node, s.values) for s in suspects(helper.make_model(graph))}
    assert ("/Tile", (48.0,)) in found and ("/Tile", (64.0,)) in found
    assert ("/ConstantOfShape", (3072.0,)) in found
    assert ("/Range", (24.0,)) in found
    assert not any(values in ((0.0,), (2.0,)) for node, values in found if node == "/Tile")
