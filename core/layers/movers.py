"""Ops that only move data, and where an error is born when unmatched nodes feed one.

A Transpose, Reshape, Squeeze, Unsqueeze, Identity, Flatten, Expand, Split, or a Concat,
Slice or Gather on activations, puts the values it is given elsewhere: it makes no number of
its own. When the value such a node makes is the first to diverge and unmatched nodes that
compute (a Dropout, a MatMul, a Softmax) feed it, the error is born among those, so the words
name them by op ("1 Dropout, 2 MatMul, 1 Softmax") and never the mover. A mover fed only by
other movers and shape arithmetic can still be the place (a Transpose with a wrong `perm`).
A Gather reading a weight (an embedding table) computes a lookup; it is not a mover.

Contract: moves_data(graph, value) -> bool; feeding(graph, value, compared) -> ((op, n), ...),
stored on each flagged LayerValue (`moves_data`, `feeding`); the words every front says
them in are parity.show.births's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from parity.layers.onnx_graph import GraphIndex, GraphValue
from parity.show.births import MOVES_DATA


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
    ops = Counter(v.op for v in unmatched_upstream(graph, value, compared))
    return tuple(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))


def unmatched_upstream(graph: GraphIndex, value: str, matched: Collection[str]) -> list[GraphValue]:
    """The nodes between `value` and the `matched` values that feed it: every producer up
    the graph until a matched value, `value`'s own node and Constants left out."""
    stop = set(matched)
    seen: set[str] = {value}
    stack = [i for i in graph.inputs_of.get(value, ()) if i not in stop]
    found: list[GraphValue] = []
    while stack:
        name = stack.pop()
        v = graph.values.get(name)
        if name in seen or v is None or v.op == "Constant":
            continue
        seen.add(name)
        found.append(v)
        stack.extend(i for i in graph.inputs_of.get(name, ()) if i not in stop)
    return found
