"""Float32 ONNX models built in code, and their float16 / bfloat16 / int8 QDQ versions made
by ONNX Runtime's own converter and quantizer (shared by the precision tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(path: Path, *, seed: int = 0, width: int = 16) -> Path:
    """x[b, 8] -> MatMul -> Add -> Relu -> MatMul -> y[b, 4], float32."""
    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, width)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((width,)).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((width, 4)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        weights,
    )
    return _save(graph, path)


def rms_mlp(path: Path, *, seed: int = 0) -> Path:
    """x[b, 8] -> MatMul(w1, large) -> RMS norm (x*x overflows float16) -> MatMul -> y."""
    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array((rng.standard_normal((8, 16)) * 300).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([1e-6], np.float32), "eps"),
        numpy_helper.from_array(np.array([-1], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Mul", ["h", "h"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean", keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"], name="add_eps"),
        helper.make_node("Sqrt", ["mse"], ["rms"], name="sqrt"),
        helper.make_node("Div", ["h", "rms"], ["n"], name="normalise"),
        helper.make_node("MatMul", ["n", "w2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "rms_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        weights,
    )
    return _save(graph, path)


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def to_float16(source: Path, path: Path, **options) -> Path:
    """ONNX Runtime's converter (keep_io_types=True unless told): its output casts come
    after their readers, which onnx.checker refuses and ONNX Runtime runs."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    options.setdefault("keep_io_types", True)
    converted = convert_float_to_float16(onnx.load(str(source)), **options)
    onnx.save(converted, str(path))
    return path
