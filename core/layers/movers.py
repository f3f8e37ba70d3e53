"""Ops that only move data, and where an error is born when unmatched nodes feed one.

A Transpose, Reshape, Squeeze, Unsqueeze, Identity, Flatten, Expand, Split, or a Concat,
Slice or Gather on activations, puts the values it is given elsewhere: it makes no number of
its own. When the value such a node makes is the first to diverge and unmatched nodes that
compute (a Dropout, a MatMul, a Softmax) feed it, the error is born among those, so the words
name them by op ("1 Dropout, 2 MatMul, 1 Softmax") and never the mover. A mover fed only by
other movers and shape arithmetic can still be the place (a Transpose with a wrong `perm`).
A Gather reading a weight (an embedding table) computes a lookup; it is not a mover.

Contract: moves_data(graph, value) -> bool; feeding(graph, value, compared) -> ((op, n), ...);
born_before(v: LayerValue) -> bool; feeding_words(v) -> "2 MatMul, 1 Dropout and 9 that
move data or compute sizes";
birth_place(v) -> "at the Reshape node x" or "among the 9 unmatched nodes feeding the Reshape
node x (1 Dropout, ...)"; the terminal, the findings, the HTML report and the Layers page say it
through these.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from parity.layers.onnx_graph import GraphIndex
from parity.layers.result import LayerValue

MOVES_DATA = frozenset(
    {
        "Transpose",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Flatten",
        "Expand",
        "Split",
        "Concat",
        "Slice",
        "Gather",
    }
)
# shape arithmetic: ops that feed a mover its sizes, never a number of the model's
SHAPES = frozenset({"Shape", "Size", "Range", "ConstantOfShape", "Cast", "Equal", "Where"})


def moves_data(graph: GraphIndex, value: str) -> bool:
    """The node making `value` only moves data (a Gather only when its data is a computed
    value, not a weight or a constant: a lookup computes)."""
    v = graph.values.get(value)
    if v is None or v.op not in MOVES_DATA:
        return False
    if v.op != "Gather":
        return True
    data = (graph.inputs_of.get(value) or ("",))[0]
    source = graph.values.get(data)
    return source is not None and source.op != "Constant"


def feeding(
    graph: GraphIndex, value: str, compared: Collection[str]
) -> tuple[tuple[str, int], ...]:
    """The nodes between `value` and the values compared on the same input set that feed it
    (its own node and Constants left out; a matched value torch never produced is passed
    through, as a confirmation's cut does), counted by op, most first."""
    matched = set(compared)
    seen: set[str] = {value}
    stack = [i for i in graph.inputs_of.get(value, ()) if i not in matched]
    ops: Counter[str] = Counter()
    while stack:
        name = stack.pop()
        v = graph.values.get(name)
        if name in seen or v is None or v.op == "Constant":
            continue
        seen.add(name)
        ops[v.op] += 1
        stack.extend(i for i in graph.inputs_of.get(name, ()) if i not in matched)
    return tuple(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))


def _computes(op: str) -> bool:
    return op not in MOVES_DATA and op not in SHAPES


def born_before(v: LayerValue) -> bool:
    """`v`'s node only moves data and an unmatched node that computes feeds it: the error is
    born among those nodes, not at `v`'s."""
    return v.moves_data and any(_computes(op) for op, _ in v.feeding)


def feeding_words(v: LayerValue) -> str:
    """The unmatched nodes feeding `v`, by op: those that compute one by one, the rest
    counted ("1 Dropout, 2 MatMul and 12 that move data or compute sizes")."""
    computing = sorted(
        ((op, n) for op, n in v.feeding if _computes(op)), key=lambda kv: (-kv[1], kv[0])
    )
    rest = sum(n for op, n in v.feeding if not _computes(op))
    said = ", ".join(f"{n} {op}" for op, n in computing)
    if not rest:
        return said
    others = f"{rest} that move data or compute sizes"
    if not computing:
        return ", ".join(f"{n} {op}" for op, n in v.feeding)
    return f"{said} and {others}"


def feeding_count(v: LayerValue) -> int:
    return sum(n for _, n in v.feeding)


def birth_place(v: LayerValue, article: str = "the") -> str:
    """Where the error of a first divergence is made, in words, with its preposition
    (`article` "its" where the module was just named)."""
    node = f"{article} {v.onnx_op} node {v.onnx_node}"
    if not born_before(v):
        return f"at {node}"
    return (
        f"among the {feeding_count(v)} unmatched nodes feeding {node} ({feeding_words(v)}; a "
        f"{v.onnx_op} only moves data)"
    )
