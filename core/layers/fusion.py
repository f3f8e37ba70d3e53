"""Fused ONNX Runtime ops: which torch value each of their outputs means.

ONNX Runtime's transformers optimizer (and Olive, which runs the same passes) and ONNX
Runtime GenAI's model builder replace spans of a transformer by one contrib op: a fused node
stands for several torch modules, and its outputs mean only some of their values
(`MEANINGS`). A legacy export's fused node loses its scoped name (`SkipLayerNorm_AddBias_0`)
but keeps the output name of the last op it replaced
(`/encoder/layer.0/attention/output/LayerNorm/LayerNormalization_output_0`): that name gives
the node its module scope (`fused_scope`). A plain node whose meaning a fusion took away (a
MatMul whose bias was moved into the `BiasGelu` after it: the Linear's output *without* its
bias) is not comparable with any torch value, and neither is a fused output torch has no
value for (an attention mask index, a LayerNorm's mean): `lost_meanings` says why.

Contract:
MEANINGS: {op type: {output slot: what it means}}; a slot not listed means nothing in torch
fused_scope(node, initializers) -> str | None   the legacy scope of a fused node
lost_meanings(nodes) -> {value name: reason}    values no torch value stands for
fusion_notes(values) -> [str]                   the layers' notes on fusions
covered(graph, value, modules, scoped) -> (str, ...)  the modules a fused output stands for
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import onnx

from parity.layers.result import LayerStatus, LayerValue

NOT_COMPARABLE = LayerStatus.NOT_COMPARABLE.value

MODULE_OUTPUT = "module output"  # the output of the module the node's scope names
MODULE_INPUT = "module input"  # that module's input (a SkipLayerNorm's residual sum)

# each fused op: what each output slot is in torch (the rest: nothing torch computes)
MEANINGS: Mapping[str, Mapping[int, str]] = {
    "SkipLayerNormalization": {0: MODULE_OUTPUT, 3: MODULE_INPUT},
    "SkipSimplifiedLayerNormalization": {0: MODULE_OUTPUT, 3: MODULE_INPUT},
    "SimplifiedLayerNormalization": {0: MODULE_OUTPUT},
    "EmbedLayerNormalization": {0: MODULE_OUTPUT},
    "BiasGelu": {0: MODULE_OUTPUT},
    "FastGelu": {0: MODULE_OUTPUT},
    "Gelu": {0: MODULE_OUTPUT},
    "QuickGelu": {0: MODULE_OUTPUT},
    "BiasAdd": {0: MODULE_OUTPUT},
    "Attention": {0: MODULE_OUTPUT},
    "MultiHeadAttention": {0: MODULE_OUTPUT},
    "GroupQueryAttention": {0: MODULE_OUTPUT},
    "PackedAttention": {0: MODULE_OUTPUT},
    "RotaryEmbedding": {0: MODULE_OUTPUT},
    "MatMulNBits": {0: MODULE_OUTPUT},
    "GemmFastGelu": {0: MODULE_OUTPUT},
}

# fused ops that add a bias the node before them no longer adds: op -> the bias's input slot
BIAS_SLOT: Mapping[str, int] = {
    "BiasGelu": 1,
    "FastGelu": 1,
    "BiasAdd": 1,
    "SkipLayerNormalization": 4,
    "SkipSimplifiedLayerNormalization": 3,
}

# fused ops that sum some of their inputs first: none of those alone is the input of the
# module the node stands for (a SkipLayerNorm's LayerNorm reads input + skip + bias)
SUMMED_INPUTS: Mapping[str, int] = {
    "SkipLayerNormalization": 2,
    "SkipSimplifiedLayerNormalization": 2,
}

# what a slot no torch value stands for is, in words
_AUX = {
    "EmbedLayerNormalization": "the attention mask index",
    "SkipLayerNormalization": "the LayerNorm's mean or inverse deviation",
    "SkipSimplifiedLayerNormalization": "the RMS norm's inverse deviation",
    "SimplifiedLayerNormalization": "the RMS norm's inverse deviation",
    "Attention": "the key/value cache",
    "MultiHeadAttention": "the key/value cache",
    "GroupQueryAttention": "the key/value cache",
}

# op types whose weight input names the module they compute (`<module path>.weight`)
_EMBEDDING_INPUT = {"EmbedLayerNormalization": 2}  # the word embedding: its module's parent


def is_fused(node: onnx.NodeProto) -> bool:
    """A node ONNX Runtime's fusions made: a contrib op (com.microsoft), or one of the
    fused ops ONNX Runtime registers in the default domain."""
    return node.domain == "com.microsoft" or (
        node.domain in ("", "ai.onnx") and node.op_type in _DEFAULT_DOMAIN_FUSED
    )


_DEFAULT_DOMAIN_FUSED = frozenset(
    {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}
)


def is_fused_op(op: str) -> bool:
    """`op` as parity.layers.onnx_graph writes it (``domain.Type``) is a fused node's."""
    return op.startswith("com.microsoft.") or op in _DEFAULT_DOMAIN_FUSED


def fused_scope(node: onnx.NodeProto, initializers: Iterable[str] = ()) -> str | None:
    """A legacy export's scope (slash form, as in node names) of a fused node that lost its
    scoped name: the scope of its first output's name where the optimizer kept the replaced
    op's (`/encoder/layer.0/intermediate/intermediate_act_fn/Mul_1_output_0`), or the module
    owning its word embedding (`EmbedLayerNormalization`: `embeddings.word_embeddings.weight`
    -> `embeddings`); None when neither says."""
    if not is_fused(node) or node.name.startswith("/"):
        return None
    first = node.output[0] if node.output else ""
    if first.startswith("/") and first.count("/") >= 2:
        return "/".join(first.split("/")[1:-1])
    slot = _EMBEDDING_INPUT.get(node.op_type)
    if slot is not None and slot < len(node.input):
        weight = node.input[slot]
        if weight in set(initializers) and weight.endswith(".weight") and weight.count(".") >= 2:
            return weight.removesuffix(".weight").rpartition(".")[0]
    return None


def lost_meanings(nodes: Iterable[onnx.NodeProto]) -> dict[str, str]:
    """Value name -> why no torch value stands for it: the input a fused node adds a bias to
    (its producer's module adds that bias in torch), and the fused outputs torch has no value
    for (`MEANINGS`)."""
    lost: dict[str, str] = {}
    for node in nodes:
        if not is_fused(node):
            continue
        op = node.op_type
        where = f"{op} {node.name!r}"
        bias = BIAS_SLOT.get(op)
        if bias is not None and bias < len(node.input) and node.input[bias] and node.input[0]:
            lost.setdefault(
                node.input[0],
                f"fused: its bias was moved into {where}, so it is its module's output "
                "without the bias",
            )
        meant = MEANINGS.get(op, {0: MODULE_OUTPUT})
        for slot, out in enumerate(node.output):
            if out and slot not in meant:
                what = _AUX.get(op, "a value of its own")
                lost[out] = (
                    f"fused: output {slot} of {where} is {what}, which torch has no value for"
                )
    return lost


def summed_input(op: str, position: int) -> bool:
    """Input `position` of `op` (``domain.Type`` as parity.layers.onnx_graph writes it) is
    one the fused node sums before it computes: not its module's input alone."""
    return position < SUMMED_INPUTS.get(op.rpartition(".")[2], 0) and is_fused_op(op)


def meaning(op: str, slot: int) -> str | None:
    """What output `slot` of a fused `op` (its type, without domain) means in torch."""
    return MEANINGS.get(op, {0: MODULE_OUTPUT}).get(slot)


_LISTED = 4


def fusion_notes(values: Sequence[LayerValue]) -> list[str]:
    """What the layers say of fusions: the fused nodes compared and the modules they stand
    for, and the values not comparable (with why)."""
    notes = []
    fused = {
        (v.onnx_node, v.onnx_op, v.torch_module or "?")
        for v in values
        if "." in v.onnx_op and v.status != NOT_COMPARABLE
    }
    if fused:
        shown = sorted(fused)[:_LISTED]
        notes.append(
            f"{len(fused)} fused node(s) (ONNX Runtime's contrib ops) each stand for a span "
            "of torch modules; each output is compared only with the torch value it means "
            "(a SkipLayerNorm with the LayerNorm's output, a BiasGelu with the activation's, "
            "an Attention with the attention core's before its output projection): "
            + ", ".join(f"{op.rpartition('.')[2]} {node!r} -> {m!r}" for node, op, m in shown)
            + (", ..." if len(fused) > _LISTED else "")
        )
    lost = {v.onnx_value: v for v in values if v.status == NOT_COMPARABLE}
    if lost:
        shown_lost = list(lost.values())[:_LISTED]
        notes.append(
            f"{len(lost)} value(s) not comparable, listed but never judged: "
            + "; ".join(
                f"{v.onnx_value!r} ({v.torch_module or 'top level'}): {v.reason}"
                for v in shown_lost
            )
            + ("; ..." if len(lost) > _LISTED else "")
        )
    return notes


def covered(
    graph: Any, value: str, modules: Iterable[str], scoped: Collection[str]
) -> tuple[str, ...]:
    """The torch modules a fused node's output stands for (`graph`: a GraphIndex): its
    scope's module, the leaf modules under it with no scope of their own in the graph (an
    Attention's query, key, value), and the modules whose bias it took, as "PATH (bias)";
    () for a value no fused node made."""
    v = graph.values.get(value)
    if v is None or not v.scope or not is_fused_op(v.op):
        return ()
    under = sorted(m for m in modules if m.startswith(v.scope + ".") and m not in scoped)
    leaves = [m for m in under if not any(o.startswith(m + ".") for o in under)]
    took = [
        f"{graph.values[i].scope} (bias)"
        for i in graph.inputs_of.get(value, ())
        if i in graph.values
        and graph.values[i].scope
        and (graph.values[i].not_comparable or "").startswith("fused: its bias")
    ]
    return (v.scope, *leaves, *took)
