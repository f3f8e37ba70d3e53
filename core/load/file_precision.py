"""The precision each output of an ONNX file is computed at, read from the file (for
``--noise-floor``: the floor is measured at that precision, parity.judge.noise_floor).

An output's precision is the lowest of what it depends on: int8 where a quantizing node
(``QuantizeLinear``, ``QLinear*``, ``*Integer``, ...) lies upstream of it, else bfloat16 or
float16 where a value it depends on (a node's output, an initializer) has that type, else
float32. The lowest and not only the producer's: a float16 file whose last node a
``node_block_list`` kept in float32 still carries float16 rounding into it, and a QDQ file's
float Softmax reads dequantized int8. For int8 the compared value's quantization scale is the
``DequantizeLinear`` that makes the output (through Casts and Identities), else the largest
activation scale read by the node that produces it, else the nearest upstream; `tensors`
counts the activations quantized upstream (each adds its own rounding).

Contract:
@dataclass(frozen=True) class OutputPrecision: precision; scale; tensors; node
output_precisions(path) -> {output name: OutputPrecision}   (never raises: {} when the file
    cannot be read so; an output not listed is float32)
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from parity.load.onnx_read import read_onnx
from parity.load.provider_precision import SIXTEEN_BIT, has_sixteen_bit

_RANK = {"float32": 0, "float16": 1, "bfloat16": 2, "int8": 3}  # lower precision: higher rank
_PASS_THROUGH = {"Cast", "CastLike", "Identity", "DequantizeLinear", "QuantizeLinear"}
_QUANTIZING = {"QuantizeLinear", "DynamicQuantizeLinear", "QGemm", "QAttention"}
_INTEGER = {"MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "MatMulNBits"}
MAX_NODES = 200_000  # a graph walked at most this big (each output's ancestors, once each)


@dataclass(frozen=True)
class OutputPrecision:
    precision: str  # one of parity.results.NOISE_PRECISIONS
    scale: float | None = None  # int8: the compared value's quantization scale (largest)
    tensors: int = 0  # int8: activations quantized upstream of the output (at least 1)
    low: float | None = None  # int8: the range its DequantizeLinear can give (None: not
    high: float | None = None  # dequantized by one with a single scale and zero point)
    node: str = ""  # the node that computes the output (Casts, Q/DQ followed back)


def output_precisions(path: str | Path) -> dict[str, OutputPrecision]:
    """Per graph output, the precision it is computed at (see the module doc)."""
    try:
        proto = read_onnx(path, external_data=False)
        if len(proto.graph.node) > MAX_NODES:
            return {}
        return _precisions(proto)
    except Exception:  # the validation stands; this only chooses the noise floor
        return {}


def _precisions(proto: onnx.ModelProto) -> dict[str, OutputPrecision]:
    graph = proto.graph
    producers = {o: n for n in graph.node for o in n.output if o}
    initializers = {t.name: t for t in graph.initializer}
    constants = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.output}
    types = value_types(proto)
    out: dict[str, OutputPrecision] = {}
    for output in graph.output:
        lowest, tensors = "float32", 0
        seen: set[str] = set()
        queue = deque([output.name])
        while queue:
            value = queue.popleft()
            if value in seen or not value:
                continue
            seen.add(value)
            lowest = _lower(lowest, SIXTEEN_BIT.get(types.get(value, 0), "float32"))
            node = producers.get(value)
            if node is None:
                continue
            if _quantizes(node, initializers):
                lowest, tensors = "int8", tensors + 1
            elif _quantized_op(node):
                lowest = "int8"
            queue.extend(node.input)
        producer = _computing(output.name, producers)
        name = producer.name if producer is not None else ""
        if lowest != "int8":
            out[output.name] = OutputPrecision(lowest, node=name)
            continue
        scale, low, high = _int8_scale(output.name, producers, initializers, constants)
        out[output.name] = OutputPrecision(
            "int8", scale, max(tensors, 1), low=low, high=high, node=name
        )
    return out


def value_types(proto: onnx.ModelProto) -> dict[str, int]:
    """Value name -> element type: what the file states, with shape inference's where it
    can make them, and each Cast's `to`."""
    graph = proto.graph
    types = {t.name: t.data_type for t in graph.initializer}
    infos = [*graph.input, *graph.value_info, *graph.output]
    if has_sixteen_bit(graph):  # only 16-bit types are looked for: most files have none
        from parity.load.onnx_model import light_model

        # unknown domains, a cycle: what is declared
        with contextlib.suppress(Exception):
            inferred = onnx.shape_inference.infer_shapes(light_model(proto))
            infos += list(inferred.graph.value_info)
    for v in infos:
        if v.type.tensor_type.elem_type:
            types.setdefault(v.name, v.type.tensor_type.elem_type)
    for node in graph.node:  # a Cast says its output's type itself
        if node.op_type == "Cast" and node.output:
            to = next((a.i for a in node.attribute if a.name == "to"), 0)
            types.setdefault(node.output[0], to)
    return types


def _lower(a: str, b: str) -> str:
    return a if _RANK[a] >= _RANK[b] else b


def _quantized_op(node: onnx.NodeProto) -> bool:
    return node.op_type.startswith("QLinear") or node.op_type in _INTEGER | _QUANTIZING


def _quantizes(node: onnx.NodeProto, initializers: dict[str, TensorProto]) -> bool:
    """A node that rounds an activation to int8 (a weight's QuantizeLinear is not one)."""
    if node.op_type in ("QuantizeLinear", "DynamicQuantizeLinear"):
        return bool(node.input) and node.input[0] not in initializers
    return node.op_type.startswith("QLinear") or node.op_type in ("QGemm", "QAttention")


def _computing(value: str, producers: dict[str, onnx.NodeProto]) -> onnx.NodeProto | None:
    """The node that computes `value`: its producer, Casts and Q/DQ followed back."""
    node = producers.get(value)
    for _ in range(64):
        if node is None or node.op_type not in _PASS_THROUGH or not node.input:
            return node
        node = producers.get(node.input[0])
    return node


def _int8_scale(
    value: str,
    producers: dict[str, onnx.NodeProto],
    initializers: dict[str, TensorProto],
    constants: dict[str, onnx.NodeProto],
) -> tuple[float | None, float | None, float | None]:
    """The quantization scale of the compared value (see the module doc; None when the file
    does not hold it: dynamic quantization computes it at run time), and the range the
    DequantizeLinear that makes it can give, [(qmin - zero point) x scale, (qmax - zero
    point) x scale] (None, None where it has no single scale and zero point)."""
    node = producers.get(value)
    for _ in range(64):  # the DequantizeLinear that makes the output
        if node is None:
            break
        if node.op_type == "DequantizeLinear":
            scale = _scale_of(node, initializers, constants)
            return (scale, *_range(node, scale, initializers, constants))
        if node.op_type not in ("Cast", "CastLike", "Identity") or not node.input:
            break
        node = producers.get(node.input[0])
    seen: set[str] = set()
    frontier = [] if node is None else list(node.input)
    for _ in range(64):  # the nearest activation DequantizeLinears upstream
        scales: list[float] = []
        following: list[str] = []
        for name in frontier:
            if name in seen or name in initializers:
                continue
            seen.add(name)
            up = producers.get(name)
            if up is None:
                continue
            if up.op_type == "DequantizeLinear" and up.input and up.input[0] not in initializers:
                s = _scale_of(up, initializers, constants)
                if s is not None:
                    scales.append(s)
                continue
            following.extend(up.input)
        if scales:
            return max(scales), None, None
        if not following:
            break
        frontier = following
    return None, None, None


_QRANGE = {
    TensorProto.INT8: (-128, 127),
    TensorProto.UINT8: (0, 255),
    TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT16: (0, 65535),
}


def _range(
    node: onnx.NodeProto,
    scale: float | None,
    initializers: dict[str, TensorProto],
    constants: dict[str, onnx.NodeProto],
) -> tuple[float | None, float | None]:
    """What a DequantizeLinear with one scale and zero point (an initializer) can give."""
    if scale is None or len(node.input) < 3 or node.input[2] not in initializers:
        return None, None
    zp = initializers[node.input[2]]
    if zp.data_type not in _QRANGE or int(np.prod(zp.dims, dtype=np.int64)) != 1:
        return None, None
    scales = _array(node.input[1], initializers, constants)
    if scales is None or scales.size != 1:
        return None, None
    z = int(numpy_helper.to_array(zp).reshape(-1)[0])
    qmin, qmax = _QRANGE[zp.data_type]
    return (qmin - z) * scale, (qmax - z) * scale


def _scale_of(
    node: onnx.NodeProto,
    initializers: dict[str, TensorProto],
    constants: dict[str, onnx.NodeProto],
) -> float | None:
    if len(node.input) < 2:
        return None
    array = _array(node.input[1], initializers, constants)
    if array is None or array.size == 0 or not np.isfinite(array).all():
        return None
    scale = float(np.abs(array).max())
    return scale if scale > 0 else None


def _array(
    name: str, initializers: dict[str, TensorProto], constants: dict[str, onnx.NodeProto]
) -> np.ndarray | None:
    """A small constant's values (an initializer or a Constant node), as float64."""
    try:
        if name in initializers:
            tensor = initializers[name]
        elif name in constants:
            tensor = next(a for a in constants[name].attribute if a.name == "value").t
        else:
            return None
        if int(np.prod(tensor.dims, dtype=np.int64)) > 1 << 20:
            return None
        return np.asarray(numpy_helper.to_array(tensor), dtype=np.float64)
    except Exception:
        return None
