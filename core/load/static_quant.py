"""A statically quantized file (ONNX Runtime's `quantize_static`) read back as float.

Two formats, one reading (checked on ORT 1.32):

- QDQ: a Conv / Gemm / MatMul reads `DequantizeLinear(int8 initializer, scale, zero point,
  axis)` as its weight (per tensor, or per output channel) and `DequantizeLinear(int32
  initializer, input scale x weight scale)` as its bias (Conv, Gemm; a MatMul's bias is the
  Add after it); activations pass through QuantizeLinear/DequantizeLinear pairs with
  calibrated scales.
- QOperator: `QLinearConv` (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, int32 B),
  `QGemm` (com.microsoft: A, a_scale, a_zp, B, b_scale, b_zp, int32 C, y_scale, y_zp) and
  `QLinearMatMul` (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp); the int32 bias's step
  is the input's scale x the weight's.

Each weight comes back in torch's layout (Conv [O, I/g, *k], Linear [N, K]) with its step
per output channel (|scale|): a weight that is a rounding of the model's stays within one
step of it. `float_twin` is the file with every activation rounding taken out (its weights
stay the file's dequantized ones): the file's own graph, computing in float.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

QDQ_COMPUTE = ("Conv", "Gemm", "MatMul")
QOPERATOR_COMPUTE = ("QLinearConv", "QGemm", "QLinearMatMul")
_INT_TYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


@dataclass(frozen=True)
class StaticWeight:
    """One quantized Conv / Gemm / MatMul weight of a statically quantized file, as float.

    `weight` float32 in torch's layout (conv: [O, I/g, *k]; linear: [N, K]); `steps` float32
    [O] (the quantization step of each output channel; per tensor: one value repeated);
    `bias` float32 [O] or None (not quantized, or none), `bias_steps` its step per channel.
    `scope` the module path the exporter wrote (legacy node names, dynamo's name scopes);
    `source` the float weight's name where the quantizer kept it."""

    node: str
    op: str
    conv: bool
    weight: np.ndarray
    steps: np.ndarray
    per_channel: bool
    bias: np.ndarray | None
    bias_steps: np.ndarray | None
    scope: str | None
    source: str
    scales_name: str
    bits: int = 8
    constant: bool = False  # another quantized constant: `weight` [size, 1], torch's by name


def is_static(model: onnx.ModelProto) -> bool:
    """A statically quantized file: a QOperator op, or a compute op reading a dequantized
    integer initializer next to activation QuantizeLinear nodes (read without weights)."""
    graph = model.graph
    ops = {n.op_type for n in graph.node}
    if ops & set(QOPERATOR_COMPUTE):
        return True
    if "QuantizeLinear" not in ops or "DequantizeLinear" not in ops:
        return False
    inits = {t.name for t in graph.initializer}
    dq_of_init = {
        n.output[0]
        for n in graph.node
        if n.op_type == "DequantizeLinear" and n.input and n.input[0] in inits
    }
    return any(
        n.op_type in QDQ_COMPUTE and len(n.input) > 1 and n.input[1] in dq_of_init
        for n in graph.node
    )


def static_weights(model: onnx.ModelProto) -> tuple[list[StaticWeight], list[str]]:
    """(every quantized weight read, notes on the ones that could not be: node and why)."""
    from parity.load.quantized_weights import _scope

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output if o}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    found: list[StaticWeight] = []
    notes: list[str] = []
    taken: set[str] = set()  # integer initializers read as a compute op's weight or bias
    for node in graph.node:
        if node.op_type not in QDQ_COMPUTE + QOPERATOR_COMPUTE:
            continue
        name = node.name or f"{node.op_type}_{len(found)}"
        try:
            if node.op_type in QDQ_COMPUTE:
                read = _qdq(node, inits, producer, readers, taken)
            else:
                read = _qoperator(node, inits, readers, taken)
        except ValueError as exc:
            notes.append(f"{node.op_type} node {name}: {exc}")
            continue
        if read is None:
            continue
        weight, steps, per_channel, bias, bias_steps, source, scales = read
        found.append(
            StaticWeight(
                node=name,
                op=node.op_type,
                conv=node.op_type in ("Conv", "QLinearConv"),
                weight=weight,
                steps=steps,
                per_channel=per_channel,
                bias=bias,
                bias_steps=bias_steps,
                scope=_scope(node),
                source=source,
                scales_name=scales,
            )
        )
    return found + _constants(graph, inits, producer, readers, taken), notes


_Read = tuple[
    np.ndarray, np.ndarray, bool, np.ndarray | None, np.ndarray | None, str, str
]  # weight, steps, per channel, bias, bias steps, source, scales


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _array(inits: Mapping[str, onnx.TensorProto], name: str) -> np.ndarray:
    if name not in inits:
        raise ValueError(f"{name!r} is not an initializer")
    return numpy_helper.to_array(inits[name])


def _dequantized(
    q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int
) -> tuple[np.ndarray, np.ndarray]:
    """(q - zero) x scale in float32 (per tensor or along `axis`), and the scale broadcast
    along that axis (its size)."""
    s = scale.astype(np.float32).reshape(-1)
    z = np.zeros_like(s) if zero is None else zero.astype(np.float32).reshape(-1)
    if s.size == 1:
        return ((q.astype(np.float32) - z[0]) * s[0]).astype(np.float32), s
    axis = axis % q.ndim
    shape = [1] * q.ndim
    shape[axis] = s.size
    w = (q.astype(np.float32) - z.reshape(shape)) * s.reshape(shape)
    return w.astype(np.float32), s


def _weight_dq(
    value: str,
    inits: Mapping[str, onnx.TensorProto],
    producer: Mapping[str, onnx.NodeProto],
    taken: set[str] | None = None,
) -> tuple[np.ndarray, np.ndarray, int, str, str] | None:
    """A DequantizeLinear of an integer initializer: (float value, scale, axis, source name,
    scale name), else None."""
    dq = producer.get(value)
    if dq is None or dq.op_type != "DequantizeLinear" or not dq.input:
        return None
    if dq.input[0] not in inits:
        return None
    q = numpy_helper.to_array(inits[dq.input[0]])
    if q.dtype not in _INT_TYPES:
        return None
    scale = _array(inits, dq.input[1])
    zero = _array(inits, dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    axis = _attr(dq, "axis", 1)
    w, s = _dequantized(q, scale, zero, axis)
    source = dq.input[0].removesuffix("_quantized")
    if taken is not None:
        taken.add(dq.input[0])
    return w, s, axis % max(q.ndim, 1), source, dq.input[1]


def _per_channel(s: np.ndarray, channels: int, axis: int, out_axis: int) -> tuple[np.ndarray, bool]:
    if s.size == 1:
        return np.full(channels, abs(float(s[0])), np.float32), False
    if s.size != channels or axis != out_axis:
        raise ValueError("its weight scale is neither per tensor nor per output channel")
    return np.abs(s).astype(np.float32), True


def _qdq(
    node: onnx.NodeProto,
    inits: Mapping[str, onnx.TensorProto],
    producer: Mapping[str, onnx.NodeProto],
    readers: Mapping[str, list[onnx.NodeProto]],
    taken: set[str],
) -> _Read | None:
    if len(node.input) < 2:
        return None
    read = _weight_dq(node.input[1], inits, producer, taken)
    if read is None:
        return None
    w, s, axis, source, scales = read
    out_axis = 0
    if node.op_type == "MatMul":
        if w.ndim != 2:
            raise ValueError(f"its weight has rank {w.ndim}, not 2")
        out_axis = 1
    elif node.op_type == "Gemm":
        out_axis = 0 if _attr(node, "transB", 0) else 1
    steps, per_channel = _per_channel(s, w.shape[out_axis], axis, out_axis)
    weight = w.T if out_axis == 1 else w
    bias_value = node.input[2] if node.op_type in ("Conv", "Gemm") and len(node.input) > 2 else ""
    if node.op_type == "MatMul":  # Linear's bias: the Add that reads only this MatMul
        after = readers.get(_through_pair(node.output[0], readers), [])
        if len(after) == 1 and after[0].op_type == "Add":
            made = _through_pair(node.output[0], readers)
            bias_value = next((i for i in after[0].input if i != made), "")
    bias = bias_steps = None
    if bias_value:
        got = _weight_dq(bias_value, inits, producer, taken)
        if got is not None and got[0].size == weight.shape[0]:
            bias = got[0].reshape(-1)
            bias_steps = np.broadcast_to(np.abs(got[1]), (bias.size,)).astype(np.float32)
        elif bias_value in inits:  # a float bias: no rounding, read as it is
            raw = numpy_helper.to_array(inits[bias_value])
            if raw.size == weight.shape[0] and np.issubdtype(raw.dtype, np.floating):
                bias = raw.astype(np.float32).reshape(-1)
                bias_steps = np.zeros(bias.size, np.float32)
    return np.ascontiguousarray(weight), steps, per_channel, bias, bias_steps, source, scales


def _through_pair(value: str, readers: Mapping[str, list[onnx.NodeProto]]) -> str:
    """The value its readers see once a QDQ file's activation pair on it is passed: the
    DequantizeLinear's output where `value`'s only reader is a QuantizeLinear read by one."""
    after = readers.get(value, [])
    if len(after) == 1 and after[0].op_type == "QuantizeLinear":
        dqs = readers.get(after[0].output[0], [])
        if len(dqs) == 1 and dqs[0].op_type == "DequantizeLinear":
            return dqs[0].output[0]
    return value


_CONSTANT_SLOTS = {"QLinearAdd": (0, 3), "QLinearMul": (0, 3)}  # (value, scale, zp) at k


def _constants(
    graph: onnx.GraphProto,
    inits: Mapping[str, onnx.TensorProto],
    producer: Mapping[str, onnx.NodeProto],
    readers: Mapping[str, list[onnx.NodeProto]],
    taken: set[str],
) -> list[StaticWeight]:
    """Every other quantized constant (a Mul's per-channel scale, a LayerNorm's weight and
    bias): QDQ's DequantizeLinear of an integer initializer, a QLinearAdd/QLinearMul's
    integer initializer operand. Read flat, one step per element (`weight` [size, 1]), named
    after the node that reads it; matched to torch by its name only."""
    found: list[StaticWeight] = []
    seen = set(taken)

    def add(reader: onnx.NodeProto, q_name: str, w: np.ndarray, s: np.ndarray, axis: int) -> None:
        seen.add(q_name)
        scale = np.abs(s.astype(np.float32)).reshape(-1)
        if scale.size == 1:
            steps = np.full(w.size, scale[0], np.float32)
        else:  # per axis: each element's step is its slice's
            shape = [1] * w.ndim
            shape[axis % w.ndim] = scale.size
            steps = np.broadcast_to(scale.reshape(shape), w.shape).reshape(-1)
        found.append(
            StaticWeight(
                node=reader.name or reader.op_type,
                op=reader.op_type,
                conv=False,
                weight=w.reshape(-1, 1).astype(np.float32),
                steps=np.ascontiguousarray(steps, np.float32),
                per_channel=scale.size > 1,
                bias=None,
                bias_steps=None,
                scope=None,
                source=q_name.removesuffix("_quantized"),
                scales_name="",
                constant=True,
            )
        )

    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.input and node.input[0] in inits:
            if node.input[0] in seen:
                continue
            got = _weight_dq(node.output[0], inits, producer)
            users = [r for r in readers.get(node.output[0], []) if r.op_type != "Identity"]
            if got is None or not users:
                continue
            add(users[0], node.input[0], got[0], got[1], got[2])
        elif node.op_type in _CONSTANT_SLOTS:
            ins = list(node.input) + [""] * 8
            for k in _CONSTANT_SLOTS[node.op_type]:
                if ins[k] in inits and ins[k] not in seen:
                    zero = _array(inits, ins[k + 2]) if ins[k + 2] else None
                    q = numpy_helper.to_array(inits[ins[k]])
                    w, s = _dequantized(q, _array(inits, ins[k + 1]), zero, 0)
                    add(node, ins[k], w, s, 0)
    return found


def _qoperator(
    node: onnx.NodeProto,
    inits: Mapping[str, onnx.TensorProto],
    readers: Mapping[str, list[onnx.NodeProto]],
    taken: set[str],
) -> _Read | None:
    ins = list(node.input) + [""] * 9
    if node.op_type == "QLinearConv":
        a_scale, w_name, w_scale, w_zero, b_name = ins[1], ins[3], ins[4], ins[5], ins[8]
        out_axis = 0
    elif node.op_type == "QGemm":
        a_scale, w_name, w_scale, w_zero, b_name = ins[1], ins[3], ins[4], ins[5], ins[6]
        out_axis = 0 if _attr(node, "transB", 0) else 1
    else:  # QLinearMatMul
        a_scale, w_name, w_scale, w_zero, b_name = ins[1], ins[3], ins[4], ins[5], ""
        out_axis = 1
    if w_name not in inits:
        return None  # activation x activation: no weight
    taken.update({w_name, b_name})
    q = numpy_helper.to_array(inits[w_name])
    scale = _array(inits, w_scale)
    zero = _array(inits, w_zero) if w_zero else None
    w, s = _dequantized(q, scale, zero, out_axis)
    steps, per_channel = _per_channel(s, w.shape[out_axis], out_axis, out_axis)
    weight = w.T if out_axis == 1 else w
    bias = bias_steps = None
    if b_name and b_name in inits:
        raw = numpy_helper.to_array(inits[b_name])
        x_scale = float(_array(inits, a_scale).reshape(-1)[0])
        if raw.size == weight.shape[0]:
            bias_steps = (np.abs(s) * abs(x_scale)).astype(np.float32)
            bias_steps = np.broadcast_to(bias_steps, (raw.size,)).astype(np.float32)
            bias = (raw.astype(np.float64).reshape(-1) * bias_steps).astype(np.float32)
            if np.any(s < 0) or x_scale < 0:  # signs belong to the product, not the step
                bias = (raw.astype(np.float64).reshape(-1) * s * x_scale).astype(np.float32)
    after = readers.get(node.output[0], [])
    if node.op_type == "QLinearMatMul" and len(after) == 1 and after[0].op_type == "QLinearAdd":
        add = list(after[0].input)  # Linear's bias: an int8 constant of the QLinearAdd after it
        k = 3 if add[0] == node.output[0] else 0
        if add[k] in inits:
            taken.add(add[k])
            zero = _array(inits, add[k + 2]) if add[k + 2] else None
            b, bs = _dequantized(
                numpy_helper.to_array(inits[add[k]]), _array(inits, add[k + 1]), zero, 0
            )
            if b.size == weight.shape[0]:
                bias = b.reshape(-1)
                bias_steps = np.broadcast_to(np.abs(bs), (bias.size,)).astype(np.float32)
    source = w_name.removesuffix("_quantized")
    return np.ascontiguousarray(weight), steps, per_channel, bias, bias_steps, source, w_scale


# ----------------------------------------------------------------------------- the float twin


def float_twin(
    model: onnx.ModelProto, strip_pairs: Callable[[onnx.ModelProto], onnx.ModelProto | None]
) -> onnx.ModelProto | None:
    """The file with every activation rounding taken out, computing in float with its own
    dequantized weights (None: a QOperator op it cannot rewrite). `strip_pairs` takes a QDQ
    graph's activation pairs out (parity.layers.qdq_search.without_activation_rounding: the
    layers stand above this module, so the caller hands it in)."""
    ops = {n.op_type for n in model.graph.node}
    if ops & set(QOPERATOR_COMPUTE) or any(op.startswith("QLinear") for op in ops):
        return _qoperator_twin(model)
    return strip_pairs(_pairs_as_read(model))


def _pairs_as_read(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` where every activation pair QuantizeLinear(x, s1, z1) -> DequantizeLinear(.,
    s2, z2) whose two halves disagree is made to agree (the DequantizeLinear reads s1, z1)
    and followed by what the disagreement does, y x s2 / s1 + (z1 - z2) x s2: taking the
    pair out then keeps it (and a ReLU folded into the pair's producer still comes back)."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output if o}

    def value(name: str) -> np.ndarray | None:
        return numpy_helper.to_array(inits[name]).astype(np.float64) if name in inits else None

    changes: list[tuple[onnx.NodeProto, onnx.NodeProto, float, float]] = []
    for dq in graph.node:
        if dq.op_type != "DequantizeLinear" or not dq.input or dq.input[0] in inits:
            continue
        q = producer.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear" or len(q.input) < 2 or len(dq.input) < 2:
            continue
        s1, s2 = value(q.input[1]), value(dq.input[1])
        z1 = value(q.input[2]) if len(q.input) > 2 and q.input[2] else np.zeros(1)
        z2 = value(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros(1)
        if s1 is None or s2 is None or z1 is None or z2 is None:
            continue
        if s1.size != 1 or s2.size != 1 or z1.size != 1 or z2.size != 1:
            continue
        if float(s1.item()) == float(s2.item()) and float(z1.item()) == float(z2.item()):
            continue
        gain = float(s2.item()) / float(s1.item())
        changes.append((q, dq, gain, (float(z1.item()) - float(z2.item())) * float(s2.item())))
    if not changes:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    by_name = {n.name: n for n in copy.graph.node}
    extra: list[onnx.NodeProto] = []
    for q, dq, gain, shift in changes:  # DQ made to agree with its Q, the difference after it
        node = by_name[dq.name]
        node.input[1] = q.input[1]
        if len(node.input) > 2 and len(q.input) > 2:
            node.input[2] = q.input[2]
        out = node.output[0]
        raw, scaled = f"{out}_parity_agreed", f"{out}_parity_scaled"
        node.output[0] = raw
        gain_name, shift_name = f"{dq.name}_parity_gain", f"{dq.name}_parity_shift"
        copy.graph.initializer.extend(
            [
                numpy_helper.from_array(np.array(gain, np.float32), gain_name),
                numpy_helper.from_array(np.array(shift, np.float32), shift_name),
            ]
        )
        extra += [
            helper.make_node("Mul", [raw, gain_name], [scaled]),
            helper.make_node("Add", [scaled, shift_name], [out]),
        ]
    copy.graph.node.extend(extra)
    from parity.load.onnx_model import topological_nodes

    ordered = topological_nodes(copy.graph)
    if ordered is not None:
        del copy.graph.node[:]
        copy.graph.node.extend(ordered)
    return copy


# QLinear ops: the float op, (data input positions), output scale / zero point positions
_QLINEAR: dict[str, tuple[str, tuple[int, ...], tuple[int, int] | None]] = {
    "QLinearConv": ("Conv", (0, 3), (6, 7)),
    "QGemm": ("Gemm", (0, 3), (7, 8)),
    "QLinearMatMul": ("MatMul", (0, 3), (6, 7)),
    "QLinearAdd": ("Add", (0, 3), (6, 7)),
    "QLinearMul": ("Mul", (0, 3), (6, 7)),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", (0,), (3, 4)),
    "QLinearAveragePool": ("AveragePool", (0,), (3, 4)),
    "QLinearSigmoid": ("Sigmoid", (0,), (3, 4)),
    "QLinearLeakyRelu": ("LeakyRelu", (0,), (3, 4)),
    "QLinearSoftmax": ("Softmax", (0,), (3, 4)),
}
_QMIN = {onnx.TensorProto.INT8: -128, onnx.TensorProto.UINT8: 0}
_DROPPED_ATTRS = {"channels_last", "opset"}  # QLinear-only attributes


def _qoperator_twin(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """QOperator back to float ops: QuantizeLinear of an activation and DequantizeLinear of
    one become Identity, each QLinear op its float op on dequantized weights (a ReLU put
    back where the output's range starts at zero: the quantizer folded it), data movement
    on quantized tensors stays as it is."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []

    written: dict[str, tuple[str, str]] = {}  # a quantized tensor: the scale, zp it has
    extra = 0

    def number(name: str) -> float:
        return float(_array(inits, name).reshape(-1)[0]) if name else 0.0

    def read_as(value: str, scale: str, zero: str) -> str:
        """`value` as a reader with (scale, zero) takes it: itself where they are the ones
        it was written with, else x x s_c / s_p + (z_p - z_c) x s_c (what the file does)."""
        nonlocal extra
        made = written.get(value)
        if made is None or (scale, zero) == made or scale not in inits:
            return value
        if made[0] not in inits or _array(inits, made[0]).size != 1:
            return value
        s_p, z_p, s_c, z_c = number(made[0]), number(made[1]), number(scale), number(zero)
        if (s_p, z_p) == (s_c, z_c):
            return value
        extra += 1
        gain, shift, scaled, out = (f"{value}_parity_read_{extra}{x}" for x in "gsmo")
        new_inits.append(numpy_helper.from_array(np.array(s_c / s_p, np.float32), gain))
        new_inits.append(numpy_helper.from_array(np.array((z_p - z_c) * s_c, np.float32), shift))
        nodes.append(helper.make_node("Mul", [value, gain], [scaled]))
        nodes.append(helper.make_node("Add", [scaled, shift], [out]))
        return out

    def weight_or_value(value: str, scale: str, zero: str, axis: int) -> str:
        if value not in inits:
            return read_as(value, scale, zero)
        q = numpy_helper.to_array(inits[value])
        z = _array(inits, zero) if zero else None
        w, _ = _dequantized(q, _array(inits, scale), z, axis)
        name = f"{value}_parity_float"
        new_inits.append(numpy_helper.from_array(w, name))
        return name

    for node in graph.node:
        op = node.op_type
        ins = list(node.input) + [""] * 3
        if op in ("QuantizeLinear", "DequantizeLinear") and node.input[0] not in inits:
            source = node.input[0]
            if op == "QuantizeLinear":
                written[node.output[0]] = (ins[1], ins[2])
            else:
                source = read_as(source, ins[1], ins[2])
            nodes.append(helper.make_node("Identity", [source], [node.output[0]]))
            continue
        if op == "QLinearConcat":
            ins = list(node.input)
            written[node.output[0]] = (ins[0], ins[1])
            data = [read_as(ins[k], ins[k + 1], ins[k + 2]) for k in range(2, len(ins), 3)]
            axis = _attr(node, "axis", 0)
            nodes.append(helper.make_node("Concat", data, [node.output[0]], axis=axis))
            continue
        if op.startswith("QLinear") or op == "QGemm":
            if op not in _QLINEAR:
                return None
            float_op, slots, out_q = _QLINEAR[op]
            ins = list(node.input) + [""] * 9
            transposed = op == "QLinearConv" or (op == "QGemm" and _attr(node, "transB", 0))
            inputs = [
                weight_or_value(ins[k], ins[k + 1], ins[k + 2], 0 if transposed else 1)
                for k in slots
            ]
            bias = ins[8] if op == "QLinearConv" else (ins[6] if op == "QGemm" else "")
            if bias and bias in inits:
                scale = float(_array(inits, ins[1]).reshape(-1)[0])
                w_scale = _array(inits, ins[4]).astype(np.float64).reshape(-1)
                b = numpy_helper.to_array(inits[bias]).astype(np.float64) * w_scale * scale
                name = f"{bias}_parity_float"
                new_inits.append(numpy_helper.from_array(b.astype(np.float32), name))
                inputs.append(name)
            attrs = {
                a.name: helper.get_attribute_value(a)
                for a in node.attribute
                if a.name not in _DROPPED_ATTRS
            }
            out = node.output[0]
            if out_q is not None:
                written[out] = (ins[out_q[0]], ins[out_q[1]])
            relu = False
            if out_q is not None and op in ("QLinearConv", "QGemm", "QLinearMatMul"):
                zero = ins[out_q[1]]
                if zero in inits and inits[zero].data_type in _QMIN:
                    first = int(numpy_helper.to_array(inits[zero]).reshape(-1)[0])
                    relu = first == _QMIN[inits[zero].data_type]
            made = f"{out}_parity_prerelu" if relu else out
            nodes.append(helper.make_node(float_op, inputs, [made], name=node.name, **attrs))
            if relu:
                nodes.append(helper.make_node("Relu", [made], [out]))
            continue
        if node.input and node.input[0] in written:  # data movement keeps its scale
            for o in node.output:
                written[o] = written[node.input[0]]
        nodes.append(node)
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    del twin.graph.node[:]
    twin.graph.node.extend(nodes)
    twin.graph.initializer.extend(new_inits)
    del twin.graph.value_info[:]  # quantized tensors' types no longer hold
    if not any(o.domain == "" for o in twin.opset_import):
        twin.opset_import.append(helper.make_opsetid("", 13))
    return twin
