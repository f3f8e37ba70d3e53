"""A file's weight-only quantized ops read back as the float weights they compute with.

`MatMulNBits` (com.microsoft; ONNX Runtime's `MatMulNBitsQuantizer`, GenAI's model builder):
B is uint8 [N, blocks, block_size x bits / 8] (4-bit: low nibble first), scales [N, blocks]
(or flat), zero points optional (packed uint8 like B, or in the scales' float type; absent:
2^(bits-1)). The weight is w[n, k] = (q[n, k] - zero_point[n, b]) x scale[n, b] with
b = k // block_size, and the MatMul's B is its transpose [K, N].
`DynamicQuantizeMatMul` (com.microsoft): B int8/uint8 [K, N] with a per-tensor or per-column
scale and zero point. `MatMulInteger` (ONNX Runtime's `quantize_dynamic`): B [K, N] with its
zero point; its scale is the initializer multiplied with the activation's
`DynamicQuantizeLinear` scale. `MatMulIntegerToFloat` (ONNX Runtime's optimiser's fusion of
MatMulInteger with its Cast and Mul): B with its b_scale and zero point. `ConvInteger`
(quantize_dynamic's default for Conv): as MatMulInteger, its weight [O, I/groups, kh, kw]
read as B = W.reshape(O, -1).T (`kernel` keeps the shape). The dynamic ops round their
activations too (uint8 per tensor): the reference rounds each one's input the same way
(parity.analyses.quantization). A quantized product of two activations (Optimum's attention
products; fused: a DynamicQuantizeMatMul or MatMulIntegerToFloat whose B is no weight) has
no weight: `activation_products` says where the file has them. A `Gather` of an 8-bit table
followed by `DequantizeLinear` (Optimum's quantized embeddings) is read as the table it
dequantizes to ([V, D], op "Gather").

Each node comes with its step per element block (|scale|): a weight that is a rounding of
the model's stays within about one step of it (parity.analyses.quantization).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from parity.errors import OnnxLoadError

NBITS = "MatMulNBits"
CONV = "ConvInteger"
TO_FLOAT = "MatMulIntegerToFloat"  # ONNX Runtime's fusion of MatMulInteger, Cast and Mul
ATTENTION = "QAttention"  # a fused BERT's attention, quantize_dynamic'd: packed q/k/v int8
EMBED = "QEmbedLayerNormalization"  # its embeddings: int8 tables and LayerNorm gamma/beta
DYNAMIC = ("DynamicQuantizeMatMul", "MatMulInteger", TO_FLOAT, CONV, ATTENTION)
QUANTIZED_OPS = (NBITS, *DYNAMIC, EMBED)
GATHER = "Gather"  # a quantized embedding table: Gather(int table) -> DequantizeLinear
INTEGER_TYPES = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)


@dataclass(frozen=True)
class QuantizedNode:
    """One weight-only quantized op of a file, its weight dequantized as the MatMul's B.

    `weight` float32 [K, N] (for MatMulNBits a transposed view of [N, K] rows); `steps`
    float32 [N, blocks] (the quantization step of each block of `block_size` rows of K, per
    column; one block over K for per-tensor or per-column scales); `source` the name of the
    float weight it was made from where the quantizer kept it in its own names (`..._Q4` ->
    `...`), else the initializer's."""

    node: str
    op: str
    bits: int
    block_size: int
    weight: np.ndarray
    steps: np.ndarray
    source: str
    scope: str | None  # the module path the exporter wrote in its name, or None
    scales_name: str  # the initializer holding its scales (where a wrong scale would be)
    dynamic: bool = False  # its activations are quantized too (a dynamic op)
    # MatMulNBits accuracy_level 4: ONNX Runtime's CPU kernel rounds its input to int8 per
    # block of `block_size` along K (symmetric) before multiplying
    int8_input: bool = False
    kernel: tuple[int, ...] = ()  # ConvInteger: the conv weight's shape (weight is its B view)

    @property
    def k(self) -> int:
        return int(self.weight.shape[0])

    @property
    def n(self) -> int:
        return int(self.weight.shape[1])


def count_bytes(model: onnx.ModelProto) -> int:
    """float32 bytes of every dequantized weight (checked against the memory budget first)."""
    total = 0
    for node in model.graph.node:
        if node.op_type == NBITS:
            attrs = _attrs(node)
            total += 4 * int(attrs.get("K", 0)) * int(attrs.get("N", 0))  # type: ignore[call-overload]
    return total


def read_quantized(path: str) -> tuple[list[QuantizedNode], list[str]]:
    """The quantized nodes of the ONNX file at `path`, reading from its external data only
    the tensors they use (not the float embeddings beside them: a model's size again)."""
    from pathlib import Path

    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    from parity.load.onnx_read import check_external, read_onnx

    proto = read_onnx(path, external_data=False)
    check_external(path, proto)
    read = (*QUANTIZED_OPS, GATHER, "DequantizeLinear")
    wanted = {i for n in proto.graph.node if n.op_type in read for i in n.input}
    for tensor in proto.graph.initializer:
        if tensor.name in wanted and uses_external_data(tensor):
            load_external_data_for_tensor(tensor, str(Path(path).parent))
    return quantized_nodes(proto)


def quantized_nodes(model: onnx.ModelProto) -> tuple[list[QuantizedNode], list[str]]:
    """(the nodes read, notes on the ones that could not be: their node and why). `model`
    has its external data loaded."""
    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    found: list[QuantizedNode] = []
    notes: list[str] = []
    consumers = _consumers(model.graph.node)
    for node in model.graph.node:
        if node.op_type == GATHER:
            table = _gather(node, inits, consumers)
            if table is not None:
                found.append(table)
            continue
        if node.op_type == EMBED:
            try:
                found += _embed(node, inits)
            except OnnxLoadError as exc:
                notes.append(f"{EMBED} node {node.name}: {exc}")
            continue
        if node.op_type not in QUANTIZED_OPS or _is_product(node, inits):
            continue  # an activation product has no weight (activation_products)
        name = node.name or f"{node.op_type}_{len(found)}"
        try:
            if node.op_type == NBITS:
                read = _nbits(node, name, inits)
            else:
                read = _dynamic(node, name, inits, producers, consumers)
        except OnnxLoadError as exc:  # a weight this module cannot read: said, skipped
            notes.append(f"{node.op_type} node {name}: {exc}")
            continue
        found.append(read)
    return found, notes


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _array(inits: Mapping[str, onnx.TensorProto], name: str) -> np.ndarray:
    if name not in inits:
        raise OnnxLoadError(f"{name!r} is not an initializer")
    return numpy_helper.to_array(inits[name])


def _scope(node: onnx.NodeProto) -> str | None:
    """The module path a legacy export wrote in the node's name (`/model/layers.0/mlp/
    down_proj/MatMul_Q4` -> model.layers.0.mlp.down_proj); dynamo's name_scopes metadata."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if scopes:
        import ast

        try:
            parsed = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            parsed = None
        if isinstance(parsed, list) and parsed:
            return ".".join(str(s) for s in parsed[1:]) if len(parsed) > 1 else ""
    if node.name.startswith("/"):
        return ".".join(node.name.split("/")[1:-1])
    first = node.output[0] if node.output else ""
    if node.op_type == ATTENTION and first.startswith("/") and first.count("/") >= 2:
        return ".".join(first.split("/")[1:-1])  # a fused node keeps its last op's output name
    return None


def _source_name(name: str) -> str:
    for suffix in ("_Q4", "_Q8", "_Q2", "_Q3", "_Q5", "_Q6", "_Q7", "_quantized"):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The last axis of uint8 `packed` as `count` unsigned `bits`-bit integers, least
    significant first (how MatMulNBits packs its weights and zero points)."""
    if bits == 8:
        return packed[..., :count]
    if bits == 4:  # two per byte, low nibble first: no bit arrays (an lm_head is 100M+)
        out = np.empty((*packed.shape[:-1], packed.shape[-1] * 2), dtype=np.uint8)
        np.bitwise_and(packed, 0x0F, out=out[..., 0::2])
        np.right_shift(packed, 4, out=out[..., 1::2])
        return out[..., :count]
    flat = np.unpackbits(packed.astype(np.uint8), axis=-1, bitorder="little")
    n = flat.shape[-1] // bits
    grouped = flat[..., : n * bits].reshape(*flat.shape[:-1], n, bits).astype(np.int32)
    values = (grouped << np.arange(bits, dtype=np.int32)).sum(axis=-1)
    return values[..., :count]


def _nbits(node: onnx.NodeProto, name: str, inits: Mapping[str, onnx.TensorProto]) -> QuantizedNode:
    attrs = _attrs(node)
    bits = int(attrs.get("bits", 4))  # type: ignore[call-overload]
    block = int(attrs.get("block_size", 32))  # type: ignore[call-overload]
    k, n = int(attrs["K"]), int(attrs["N"])  # type: ignore[call-overload]
    ins = list(node.input) + [""] * 6
    if ins[4]:
        raise OnnxLoadError("its g_idx (act-order) input is not read")
    packed = _array(inits, ins[1])
    blocks = (k + block - 1) // block
    q = unpack(packed.reshape(n, blocks, -1), bits, block)  # [N, blocks, block]
    scales = _array(inits, ins[2]).astype(np.float32).reshape(n, blocks)
    if ins[3]:
        zp_raw = _array(inits, ins[3])
        if zp_raw.dtype == np.uint8:
            zero = unpack(zp_raw.reshape(n, -1), bits, blocks).astype(np.float32)
        else:  # float zero points: w = (q - zp) x scale with zp in the scales' type
            zero = zp_raw.astype(np.float32).reshape(n, blocks)
    else:
        zero = np.full((n, blocks), float(2 ** (bits - 1)), dtype=np.float32)
    w = q.astype(np.float32)  # [N, blocks, block], in place from here (one float32 copy)
    w -= zero[..., None]
    w *= scales[..., None]
    # [K, N] as the MatMul's B, a view of the [N, K] rows torch's Linear stores (no copy)
    weight = w.reshape(n, blocks * block)[:, :k].T
    return QuantizedNode(
        node=name,
        op=NBITS,
        bits=bits,
        block_size=block,
        weight=weight,
        steps=np.abs(scales),
        source=_source_name(ins[1]),
        scope=_scope(node),
        scales_name=ins[2],
        int8_input=int(attrs.get("accuracy_level", 0)) == 4,  # type: ignore[call-overload]
    )


def _dynamic(
    node: onnx.NodeProto,
    name: str,
    inits: Mapping[str, onnx.TensorProto],
    producers: Mapping[str, onnx.NodeProto],
    consumers: Mapping[str, Sequence[onnx.NodeProto]],
) -> QuantizedNode:
    ins = list(node.input) + [""] * 5
    q = _array(inits, ins[1])
    kernel: tuple[int, ...] = ()
    if node.op_type == CONV:  # [O, I/groups, kh, kw] as a MatMul's B [I/groups*kh*kw, O]
        if q.ndim < 3:
            raise OnnxLoadError(f"its weight has rank {q.ndim}, not a conv's")
        kernel = tuple(int(d) for d in q.shape)
        q = q.reshape(q.shape[0], -1).T
    if q.ndim != 2:
        raise OnnxLoadError(f"its weight has rank {q.ndim}, not 2")
    k, n = q.shape
    if node.op_type == "DynamicQuantizeMatMul":
        scale = _array(inits, ins[2]).astype(np.float32)
        scale_name = ins[2]
        zero = _array(inits, ins[3]).astype(np.float32) if ins[3] else np.zeros(1, np.float32)
    elif node.op_type == ATTENTION:  # input, weight, bias, input_scale, weight_scale, mask,
        scale = _array(inits, ins[4]).astype(np.float32)  # input_zero_point, weight_zero_point
        scale_name = ins[4]
        zero = _array(inits, ins[7]).astype(np.float32) if ins[7] else np.zeros(1, np.float32)
    elif node.op_type == TO_FLOAT:  # A, B, a_scale, b_scale, a_zero_point, b_zero_point
        scale = _array(inits, ins[3]).astype(np.float32)
        scale_name = ins[3]
        zero = _array(inits, ins[5]).astype(np.float32) if ins[5] else np.zeros(1, np.float32)
    else:  # MatMulInteger: the scale is the Mul of the activation's scale and a constant
        zero = _array(inits, ins[3]).astype(np.float32) if ins[3] else np.zeros(1, np.float32)
        scale_name, scale = _integer_scale(node.output[0], inits, producers, consumers)
    if scale.size not in (1, n) or zero.size not in (1, n):
        raise OnnxLoadError("its scale or zero point is neither per tensor nor per column")
    scale = np.broadcast_to(scale.reshape(-1), (n,))
    zero_n = np.broadcast_to(zero.reshape(-1), (n,))
    weight = ((q.astype(np.float32) - zero_n[None, :]) * scale[None, :]).astype(np.float32)
    return QuantizedNode(
        node=name,
        op=node.op_type,
        bits=8,
        block_size=k,
        weight=np.ascontiguousarray(weight),
        steps=np.abs(np.asarray(scale, np.float32)).reshape(n, 1),
        source=_source_name(ins[1]),
        scope=_scope(node),
        scales_name=scale_name,
        dynamic=True,
        kernel=kernel,
    )


def _integer_scale(
    output: str,
    inits: Mapping[str, onnx.TensorProto],
    producers: Mapping[str, onnx.NodeProto],
    consumers: Mapping[str, Sequence[onnx.NodeProto]],
) -> tuple[str, np.ndarray]:
    """The weight's scale of a MatMulInteger or ConvInteger: quantize_dynamic casts its
    output to float and multiplies it by (activation scale x weight scale), the weight's a
    constant."""
    value = output
    for _ in range(2):  # through the Cast to the Mul
        for user in consumers.get(value, []):
            if user.op_type == "Cast":
                value = user.output[0]
                break
    for user in consumers.get(value, []):
        if user.op_type != "Mul":
            continue
        other = next((i for i in user.input if i != value), "")
        made = producers.get(other)
        if made is not None and made.op_type == "Mul":
            constant = [i for i in made.input if i in inits]
            if constant:
                return constant[0], numpy_helper.to_array(inits[constant[0]]).astype(np.float32)
        if other in inits:
            return other, numpy_helper.to_array(inits[other]).astype(np.float32)
    raise OnnxLoadError("its weight scale was not found (no Mul of its output by a scale)")


def _consumers(nodes: Sequence[onnx.NodeProto]) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for i in node.input:
            out.setdefault(i, []).append(node)
    return out


def _is_product(node: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto] | set[str]) -> bool:
    """A quantized MatMul of two activations: its B is no stored weight (a MatMulInteger,
    or what ONNX Runtime's optimiser fused it into: DynamicQuantizeMatMul whose B comes
    from a DynamicQuantizeLinear, MatMulIntegerToFloat)."""
    ops = ("MatMulInteger", "DynamicQuantizeMatMul", TO_FLOAT)
    return node.op_type in ops and len(node.input) > 1 and node.input[1] not in inits


def _gather(
    node: onnx.NodeProto,
    inits: Mapping[str, onnx.TensorProto],
    consumers: Mapping[str, Sequence[onnx.NodeProto]],
) -> QuantizedNode | None:
    """A Gather of an 8-bit table whose rows a DequantizeLinear turns back to float (per
    tensor): the table it stands for, [V, D]; None for any other Gather."""
    table = inits.get(node.input[0]) if node.input else None
    if table is None or table.data_type not in INTEGER_TYPES or len(table.dims) != 2:
        return None
    users = consumers.get(node.output[0], [])
    if len(users) != 1 or users[0].op_type != "DequantizeLinear":
        return None
    dq = list(users[0].input) + [""]
    if dq[1] not in inits or (dq[2] and dq[2] not in inits):
        return None
    scale = numpy_helper.to_array(inits[dq[1]]).astype(np.float32)
    zero = numpy_helper.to_array(inits[dq[2]]).astype(np.float32) if dq[2] else np.zeros(1)
    if scale.size != 1 or zero.size != 1:
        return None  # per-axis tables are not read (the QDQ files' own reader's job)
    q = numpy_helper.to_array(table).astype(np.float32)
    weight = ((q - np.float32(zero.reshape(-1)[0])) * scale.reshape(-1)[0]).astype(np.float32)
    return QuantizedNode(
        node=node.name or users[0].name or node.input[0],
        op=GATHER,
        bits=8,
        block_size=int(weight.shape[0]),
        weight=weight,
        steps=np.full((weight.shape[1], 1), abs(float(scale.reshape(-1)[0])), np.float32),
        source=_source_name(node.input[0]),
        scope=_scope(node),
        scales_name=dq[1],
    )


def activation_products(model: onnx.ModelProto) -> dict[str, tuple[bool, ...]]:
    """Where the file multiplies two activations (an attention's q x k and p x v): per
    module scope, each such MatMul in graph order, True where it is a MatMulInteger (both
    sides rounded to uint8 per tensor first). Scopes without a quantized one are left out."""
    inits = {t.name for t in model.graph.initializer}
    found: dict[str, list[bool]] = {}
    for node in model.graph.node:
        quantized = _is_product(node, inits)
        if not quantized and (node.op_type != "MatMul" or node.input[1] in inits):
            continue
        if node.op_type == "MatMul" and node.input[0] in inits:
            continue
        scope = _scope(node)
        if scope is not None:
            found.setdefault(scope, []).append(quantized)
    return {scope: tuple(flags) for scope, flags in found.items() if any(flags)}


# QEmbedLayerNormalization's quantized inputs: (slot, its scale's slot, its zero point's)
_EMBED_PARTS = ((2, 8, 13), (3, 9, 14), (4, 10, 15), (5, 11, 16), (6, 12, 17))


def _embed(node: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto]) -> list[QuantizedNode]:
    """A QEmbedLayerNormalization's int8 word / position / segment tables ([V, D]) and its
    LayerNorm's gamma and beta ([1, D]), each per tensor, as the float values they stand
    for (named after the initializer: `embeddings.LayerNorm.bias_quantized` -> its bias)."""
    ins = list(node.input) + [""] * 18
    out = []
    for slot, scale_slot, zero_slot in _EMBED_PARTS:
        if not ins[slot]:
            continue
        q = _array(inits, ins[slot]).astype(np.float32)
        scale = _array(inits, ins[scale_slot]).astype(np.float32).reshape(-1)
        zero = (
            _array(inits, ins[zero_slot]).astype(np.float32).reshape(-1)
            if ins[zero_slot]
            else np.zeros(1, np.float32)
        )
        if scale.size != 1 or zero.size != 1:
            raise OnnxLoadError(f"{ins[slot]!r} is not quantized per tensor")
        weight = ((q - zero[0]) * scale[0]).astype(np.float32)
        weight = weight.reshape(1, -1) if weight.ndim == 1 else weight
        out.append(
            QuantizedNode(
                node=f"{node.name or EMBED} ({_source_name(ins[slot])})",
                op=EMBED,
                bits=8,
                block_size=int(weight.shape[0]),
                weight=weight,
                steps=np.full((weight.shape[1], 1), abs(float(scale[0])), np.float32),
                source=_source_name(ins[slot]),
                scope=None,
                scales_name=ins[scale_slot],
            )
        )
    return out
