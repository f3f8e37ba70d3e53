"""Loading ONNX files: signatures, external data, and every way a file can be unusable."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity.errors import OnnxLoadError, UsageError
from parity.load.onnx_model import ORT_OPT_LEVELS, load_onnx, make_session


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _identity_model(dtypes: dict[str, int]) -> onnx.ModelProto:
    """One Identity per dtype, plus an initializer W that is also listed as a graph input."""
    nodes, inputs, outputs = [], [], []
    for name, elem in dtypes.items():
        inputs.append(helper.make_tensor_value_info(name, elem, ["batch", 3, None]))
        outputs.append(helper.make_tensor_value_info(f"{name}_out", elem, ["batch", 3, None]))
        nodes.append(helper.make_node("Identity", [name], [f"{name}_out"]))
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), name="W")
    inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [2, 2]))
    outputs.append(helper.make_tensor_value_info("W_out", TensorProto.FLOAT, [2, 2]))
    nodes.append(helper.make_node("Identity", ["W"], ["W_out"]))
    graph = helper.make_graph(nodes, "dtypes", inputs, outputs, initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.producer_name, model.producer_version = "handmade", "1.0"
    return model


def _one_line_error(exc: pytest.ExceptionInfo[OnnxLoadError], path: Path) -> str:
    message = str(exc.value)
    assert message.startswith(f"cannot load ONNX file {path}: ")
    assert "\n" not in message
    return message


def test_signature_of_dynamo_export_has_symbolic_dims(tokens_onnx: Path) -> None:
    sig = load_onnx(tokens_onnx).signature
    assert sig.input_names == ("input_ids", "attention_mask")
    assert [s.dtype for s in sig.inputs] == ["int64", "int64"]
    assert sig.inputs[0].shape == ("batch", "seq")
    assert sig.symbolic_dims == ("batch", "seq")
    assert sig.output_names == ("logits", "sum", "scaled")
    assert sig.outputs[0].shape == ("batch", "seq", 5)
    assert sig.opset >= 18
    assert sig.producer.startswith("pytorch")
    assert sig.ir_version >= 8


def test_dtypes_map_to_numpy_names_and_initializer_inputs_are_not_model_inputs(
    tmp_path: Path,
) -> None:
    dtypes = {
        "f16": TensorProto.FLOAT16,
        "bf16": TensorProto.BFLOAT16,
        "flag": TensorProto.BOOL,
        "i8": TensorProto.INT8,
        "u8": TensorProto.UINT8,
        "i32": TensorProto.INT32,
        "i64": TensorProto.INT64,
        "f64": TensorProto.DOUBLE,
    }
    model = load_onnx(_save(_identity_model(dtypes), tmp_path / "dtypes.onnx"))
    sig = model.signature
    assert "W" not in sig.input_names
    assert {s.name: s.dtype for s in sig.inputs} == {
        "f16": "float16",
        "bf16": "bfloat16",
        "flag": "bool",
        "i8": "int8",
        "u8": "uint8",
        "i32": "int32",
        "i64": "int64",
        "f64": "float64",
    }
    assert sig.inputs[0].shape == ("batch", 3, None)
    assert sig.opset == 17
    assert sig.producer == "handmade 1.0"


def test_sha256_is_the_file_hash(tiny_artifacts) -> None:
    model = load_onnx(tiny_artifacts.onnx)
    assert model.sha256 == hashlib.sha256(tiny_artifacts.onnx.read_bytes()).hexdigest()
    assert model.path == tiny_artifacts.onnx


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.onnx"
    with pytest.raises(OnnxLoadError) as exc:
        load_onnx(path)
    assert "no such file" in _one_line_error(exc, path)


def test_truncated_file_is_refused(tiny_artifacts, tmp_path: Path) -> None:
    data = tiny_artifacts.onnx.read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxLoadError) as exc:
        load_onnx(path)
    _one_line_error(exc, path)


def test_text_file_is_not_onnx(tmp_path: Path) -> None:
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a model\nat all\n")
    with pytest.raises(OnnxLoadError) as exc:
        load_onnx(path)
    _one_line_error(exc, path)


def test_empty_file_is_not_onnx(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(OnnxLoadError) as exc:
        load_onnx(path)
    assert "not an ONNX model" in _one_line_error(exc, path)


def test_checker_failure_is_reported(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Add", ["x", "undefined_tensor"], ["y"])
    graph = helper.make_graph([node], "bad", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = _save(model, tmp_path / "bad.onnx")
    with pytest.raises(OnnxLoadError) as exc:
        load_onnx(path)
    message = _one_line_error(exc, path)
    assert "onnx.checker" in message
    assert "undefined_tensor" in message


def test_external_data_beside_the_file_loads_runs_and_is_hashed(
    tiny_artifacts, tmp_path: Path
) -> None:
    proto = onnx.load(str(tiny_artifacts.onnx))
    path = tmp_path / "ext.onnx"
    onnx.save_model(
        proto,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="ext.onnx.data",
        size_threshold=0,
    )
    data_file = tmp_path / "ext.onnx.data"
    assert data_file.stat().st_size > 0
    model = load_onnx(path)
    assert model.signature.input_names == ("x",)
    x = np.random.default_rng(0).standard_normal((3, 4), dtype=np.float32)
    got = make_session(model).run(None, {"x": x})[0]
    want = ort.InferenceSession(str(tiny_artifacts.onnx)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)

    first = model.sha256
    data_file.write_bytes(data_file.read_bytes()[::-1])  # same size, other weights
    assert load_onnx(path).sha256 != first

    data_file.unlink()
    with pytest.raises(OnnxLoadError) as exc:
        load_onnx(path)
    message = _one_line_error(exc, path)
    # the cause names the missing file as the .onnx names it, not the checker's full path
    assert message.endswith(
        ": its external-data file 'ext.onnx.data' (tensor 'fc.weight') is missing; "
        "it must be beside the .onnx file"
    ), message


def test_unknown_provider_lists_available_ones(tiny_artifacts) -> None:
    model = load_onnx(tiny_artifacts.onnx)
    with pytest.raises(UsageError) as exc:
        make_session(model, provider="NoSuchExecutionProvider")
    assert "CPUExecutionProvider" in str(exc.value)
    assert "NoSuchExecutionProvider" in str(exc.value)


def test_unknown_opt_level_is_a_usage_error(tiny_artifacts) -> None:
    with pytest.raises(UsageError, match="extended"):
        make_session(load_onnx(tiny_artifacts.onnx), opt_level="max")


@pytest.mark.parametrize("level", ORT_OPT_LEVELS)
def test_every_opt_level_makes_a_session_with_that_level(tiny_artifacts, level: str) -> None:
    session = make_session(load_onnx(tiny_artifacts.onnx), opt_level=level)
    expected = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    assert session.get_session_options().graph_optimization_level == expected
    out = session.run(None, {"x": np.zeros((5, 4), np.float32)})[0]
    assert out.shape == (5, 3)


def test_session_creation_failure_is_an_onnx_load_error(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example.parity")
    graph = helper.make_graph([node], "custom", [x], [y])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.parity", 1)],
    )
    path = _save(model, tmp_path / "custom.onnx")
    loaded = load_onnx(path)  # the checker accepts ops of a custom domain
    with pytest.raises(OnnxLoadError) as exc:
        make_session(loaded)
    assert "ONNX Runtime" in _one_line_error(exc, path)


def _ort_default_domain_model(op: str, *, undefined: bool = False) -> onnx.ModelProto:
    """x -> `op` (default domain) -> y, its scale an initializer; `undefined` reads a value
    nothing makes as well (a fault the checker must still find)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = numpy_helper.from_array(np.full(4, 2.0, np.float32), name="w")
    nodes = [helper.make_node(op, ["x", "w"], ["n"], axis=-1, epsilon=1e-5)]
    nodes.append(helper.make_node("Add", ["n", "nowhere" if undefined else "n"], ["y"]))
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_ops_onnx_runtime_registers_in_the_default_domain_are_accepted(tmp_path: Path) -> None:
    """GenAI's model builder writes SimplifiedLayerNormalization in the default domain:
    ONNX Runtime runs it, onnx.checker refuses it; Parity opens it (external weights too)
    and says why in one note, while anything else wrong in the file is still refused."""
    path = tmp_path / "rms.onnx"
    onnx.save_model(
        _ort_default_domain_model("SimplifiedLayerNormalization"),
        str(path),
        save_as_external_data=True,
        location="rms.onnx.data",
        size_threshold=0,
    )
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(str(path))
    model = load_onnx(path)
    (note,) = model.notes
    assert "SimplifiedLayerNormalization: registered by ONNX Runtime" in note
    x = np.array([[1.0, -1.0, 1.0, -1.0]], np.float32)
    np.testing.assert_allclose(make_session(model).run(None, {"x": x})[0], 4 * x, rtol=1e-4)

    for bad, words in (
        (_ort_default_domain_model("NoSuchNorm"), "NoSuchNorm"),
        (_ort_default_domain_model("SimplifiedLayerNormalization", undefined=True), "Simplified"),
    ):
        path = _save(bad, tmp_path / "bad.onnx")
        with pytest.raises(OnnxLoadError) as exc:
            load_onnx(path)
        assert words in _one_line_error(exc, path)
