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


def conv_net(path: Path, *, relu_after_third: bool = False, seed: int = 0) -> Path:
    """x[b, 3, 8, 8] -> four 3x3 convs (ReLU after the first two) -> global average pool.
    The third conv's channel 0 is an outlier (weights x300, bias 50) that the fourth conv
    barely reads: a per-tensor int8 scale for that activation crushes every other channel."""
    rng = np.random.default_rng(seed)
    chans = [3, 8, 8, 8, 4]
    inits, nodes, x = [], [], "x"
    for k in range(4):
        w = (rng.standard_normal((chans[k + 1], chans[k], 3, 3)) * 0.3).astype(np.float32)
        b = (rng.standard_normal(chans[k + 1]) * 0.1).astype(np.float32)
        if k == 2:
            w[0] *= 300
            b[0] = 50.0
        if k == 3:
            w[:, 0] *= 1e-3
        inits += [numpy_helper.from_array(w, f"w{k + 1}"), numpy_helper.from_array(b, f"b{k + 1}")]
        nodes.append(
            helper.make_node(
                "Conv", [x, f"w{k + 1}", f"b{k + 1}"], [f"c{k + 1}"], name=f"conv{k + 1}",
                pads=[1, 1, 1, 1],
            )
        )  # fmt: skip
        x = f"c{k + 1}"
        if k < 2 or (k == 2 and relu_after_third):
            nodes.append(helper.make_node("Relu", [x], [f"r{k + 1}"], name=f"relu{k + 1}"))
            x = f"r{k + 1}"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["y"], name="pool"))
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4, 1, 1])],
        inits,
    )
    return _save(graph, path)


def quantize_qdq(
    source: Path,
    path: Path,
    *,
    exclude: list[str] | None = None,
    calibration: list[dict[str, np.ndarray]] | None = None,
    quant_format: str = "QDQ",
    reduce_range: bool = False,
) -> Path:
    """onnxruntime.quantization.quantize_static, int8 (per-tensor weights) in QDQ format (or
    `quant_format="QOperator"`), calibrated on `calibration` (default: 8 fixed standard
    normal x[1, 3, 8, 8]). `reduce_range`: 7-bit weights, so that ONNX Runtime's int8 kernels
    give the same answer on every x86 CPU (without VNNI, its u8s8 products saturate int16
    sums: ONNX Runtime's quantization docs)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.sets = iter(
                calibration
                or [
                    {"x": np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)}
                    for i in range(8)
                ]
            )

        def get_next(self):
            return next(self.sets, None)

    quantize_static(
        str(source), str(path), Reader(), quant_format=getattr(QuantFormat, quant_format),
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
        nodes_to_exclude=list(exclude or []), reduce_range=reduce_range,
    )  # fmt: skip
    return path


def output_sqnr_db(reference: Path, other: Path, *, seed: int = 100) -> float:
    import onnxruntime as ort

    x = np.random.default_rng(seed).standard_normal((4, 3, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(str(other), providers=["CPUExecutionProvider"])
    r, o = ref.run(None, {"x": x})[0], got.run(None, {"x": x})[0]
    return float(10 * np.log10(np.square(r).sum() / np.square(o - r).sum()))


def transposes(path: Path, *, bfloat16: bool, seed: int = 0) -> Path:
    """x[b, 8] -> Transpose -> Transpose -> MatMul -> y; with `bfloat16` the first
    Transpose runs in bfloat16 (Cast in, Cast out): ONNX Runtime's CPU provider has
    bfloat16 kernels for data movement only, so this is a bfloat16 file it can run."""
    w = numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal((8, 4)).astype(np.float32), "w"
    )
    first = "xb" if bfloat16 else "x"
    nodes = [helper.make_node("Transpose", [first], ["t"], perm=[1, 0], name="tr")]
    if bfloat16:
        nodes.insert(0, helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16))
        nodes.append(helper.make_node("Cast", ["t"], ["tf"], to=TensorProto.FLOAT))
    nodes += [
        helper.make_node("Transpose", ["tf" if bfloat16 else "t"], ["u"], perm=[1, 0], name="tr2"),
        helper.make_node("MatMul", ["u", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "transposes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        [w],
    )
    return _save(graph, path)


def offset_transposes(path: Path, *, seed: int = 0, offset: float = 1000.0) -> Path:
    """x[b, 8] -> Add(offset) -> Transpose -> Transpose -> Sub(offset) -> MatMul -> y: the
    transposed values sit near `offset`, where bfloat16's 8-bit mantissa keeps little of x,
    so rounding them there is born as a divergence at the Sub that takes the offset away."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(np.full((1, 8), offset, np.float32), "off"),
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "off"], ["a"], name="add"),
        helper.make_node("Transpose", ["a"], ["t1"], perm=[1, 0], name="tr1"),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0], name="tr2"),
        helper.make_node("Sub", ["t2", "off"], ["s"], name="sub"),
        helper.make_node("MatMul", ["s", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "offset_transposes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        inits,
    )
    return _save(graph, path)


def to_bfloat16(source: Path, path: Path, *, op_block_list: list[str]) -> Path:
    """ONNX Runtime's float16 converter (keep_io_types=True, these ops kept in float32),
    retyped to bfloat16 (parity.layers.fp16.convert: ONNX Runtime has no bfloat16
    converter); on the CPU provider only data movement runs in bfloat16."""
    from parity.layers.fp16 import convert

    onnx.save(convert(source, True, [], "bfloat16", op_block_list), str(path))
    return path
