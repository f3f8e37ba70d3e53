"""Files ONNX Runtime's own float16 converter makes load and validate (issue 21)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from parity.cli import main
from parity.errors import OnnxLoadError
from parity.load.onnx_model import load_onnx
from tests.helpers.precision_models import mlp, to_float16


@pytest.fixture(scope="module")
def fp16_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fp16")
    ref = mlp(root / "mlp.onnx")
    return ref, to_float16(ref, root / "mlp_fp16.onnx")


def test_converter_output_is_out_of_order_for_the_checker(fp16_pair) -> None:
    """The premise: onnx.checker refuses the converter's file for its node order."""
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(str(fp16_pair[1]))


def test_float16_conversion_loads_with_the_checker_complaint_as_a_note(fp16_pair) -> None:
    model = load_onnx(fp16_pair[1])
    assert model.signature.input_names == ("x",)
    (note,) = model.notes
    assert "topologically sorted" in note and "\n" not in note
    assert "is not output of any previous nodes" in note  # the whole line, not its start


def test_float16_conversion_validates_against_its_original_at_1e_2(
    fp16_pair, tmp_path: Path
) -> None:
    ref, f16 = fp16_pair
    out = tmp_path / "r.json"
    code = main(
        ["validate", "--onnx", str(ref), "--onnx", str(f16), "--atol", "1e-2", "--rtol", "1e-2"]
        + ["--json", str(out)]
    )
    report = json.loads(out.read_text())
    assert code == 0, report
    (cand,) = report["candidates"]
    assert any("topologically sorted" in n for n in cand["notes"])


def test_a_graph_no_order_can_fix_is_refused_on_one_whole_line(tmp_path: Path) -> None:
    """A node reading a value nothing makes: the checker's complaint, spread over three
    lines by onnx, is the error's one line."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["nowhere"], ["y"], name="r")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "broken.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    with pytest.raises(OnnxLoadError) as exc:
        load_onnx(path)
    message = str(exc.value)
    assert "\n" not in message
    assert "name: r OpType: Relu" in message
    assert message.endswith("is not output of any previous nodes.")
