"""The rows an integer graph input may index: where it feeds (through value-keeping ops such
as Cast, Unsqueeze, Reshape) the indices of a `Gather` on a constant table, that table's size
along the gathered axis. Generated ids stay inside it (parity.run.inputs): ids drawn in the
default [0, 100) would overflow a 29-entry embedding and torch would raise IndexError."""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from parity.signature import IndexLimit

# ops whose output holds the same integer values as their first input (reshaped, cast)
_KEEPS_VALUES = frozenset(
    {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Transpose", "Expand"}
)
MAX_NODES = 200_000  # a graph larger than this is not followed (the default range stays)


def index_limits(proto: onnx.ModelProto) -> tuple[IndexLimit, ...]:
    """Each integer graph input that reaches a Gather's indices on a constant table, with the
    smallest such table's size (one input may index several)."""
    graph = proto.graph
    if len(graph.node) > MAX_NODES:
        return ()
    ints = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
    initializers = {t.name: t for t in graph.initializer}
    inputs = [
        i.name
        for i in graph.input
        if i.name not in initializers and i.type.tensor_type.elem_type in ints
    ]
    if not inputs:
        return ()
    tables = {name: tuple(t.dims) for name, t in initializers.items()}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                tables[node.output[0]] = tuple(value.dims)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            if position == 0 or node.op_type == "Gather":
                readers.setdefault(name, []).append(node)
    found: dict[str, IndexLimit] = {}
    for name in inputs:
        for limit in _limits(name, readers, tables):
            kept = found.get(name)
            if kept is None or limit.size < kept.size:
                found[name] = IndexLimit(name, limit.size, limit.node)
    return tuple(found.values())


def _limits(
    start: str, readers: dict[str, list[onnx.NodeProto]], tables: dict[str, tuple[int, ...]]
) -> Iterable[IndexLimit]:
    seen, todo = {start}, [start]
    while todo:
        value = todo.pop()
        for node in readers.get(value, ()):
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == value:
                shape = tables.get(node.input[0])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                if shape and -len(shape) <= axis < len(shape) and shape[axis] > 0:
                    yield IndexLimit(start, int(shape[axis]), node.name or node.output[0])
            elif node.op_type in _KEEPS_VALUES and node.input and node.input[0] == value:
                for out in node.output:
                    if out not in seen:
                        seen.add(out)
                        todo.append(out)


def merged(groups: Iterable[Iterable[IndexLimit]]) -> tuple[IndexLimit, ...]:
    """One limit per input over several files (candidates): the smallest table."""
    found: dict[str, IndexLimit] = {}
    for group in groups:
        for limit in group:
            kept = found.get(limit.name)
            if kept is None or limit.size < kept.size:
                found[limit.name] = limit
    return tuple(found.values())
