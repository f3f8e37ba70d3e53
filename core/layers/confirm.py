"""Run one ONNX node (or the few nodes that make one value) alone, fed with chosen arrays.

`cut` builds a small self-contained ModelProto around one value: its producer, and upstream of
it every node until each path reaches a value the caller can feed (`known`), an initializer
(copied in, with its data: external weights are read from the model's folder) or a node
without inputs (a Constant). Its graph inputs are typed and shaped from the arrays that will
feed them, its output from the expected array. The source model's opsets, IR version and
local functions come along, so the cut is checker-clean where the source was.

Reused by layer-level confirmation (parity.layers.birth), by the repro folder
(parity.layers.repro) and by anything else that needs to ask "does this node alone agree?".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from parity.errors import OnnxRunError, first_line

MAX_NODES = 32  # a cut larger than this is not "the node alone": not confirmed


@dataclass(frozen=True)
class Cut:
    """A small model computing `output` from `inputs` (fed) and its own initializers."""

    model: onnx.ModelProto
    inputs: tuple[str, ...]  # graph inputs, in the order they are first read
    output: str
    nodes: tuple[str, ...]  # names (or op_type_index) of its nodes, in graph order
    ops: tuple[str, ...]


@dataclass(frozen=True)
class Refused:
    """Why no cut was made (said as is, after "not confirmed: ")."""

    reason: str


@dataclass(frozen=True)
class Selection:
    """Which nodes a cut takes (indices in graph order), what it is fed and which weights."""

    output: str
    nodes: tuple[int, ...]
    inputs: tuple[str, ...]  # in the order the nodes first read them
    weights: tuple[str, ...]


def select(
    proto: onnx.ModelProto,
    output: str,
    known: Collection[str],
    *,
    max_nodes: int = MAX_NODES,
    producers: Mapping[str, int] | None = None,
    initializers: Collection[str] | None = None,
) -> Selection | Refused:
    """The nodes making `output` from values in `known`, initializers and Constants.
    (`producers` and `initializers`, the graph's, can be given by a caller selecting many.)"""
    graph = proto.graph
    producer = producers if producers is not None else producers_of(proto)
    if output not in producer:
        return Refused(f"no node of the ONNX graph makes {output!r}")
    inits = initializers if initializers is not None else {t.name for t in graph.initializer}
    known = known if isinstance(known, AbstractSet) else set(known)
    chosen: set[int] = set()
    inputs: set[str] = set()
    weights: dict[str, None] = {}
    stack = [producer[output]]
    while stack:
        k = stack.pop()
        if k in chosen:
            continue
        chosen.add(k)
        if len(chosen) > max_nodes:
            return Refused(
                f"more than {max_nodes} nodes lie between this value and the matched values "
                "feeding it (its inputs are not all matched)"
            )
        node = graph.node[k]
        if any(a.type in _GRAPH_ATTRIBUTES for a in node.attribute):
            return Refused(f"{node.op_type} node {node.name!r} holds a subgraph")
        for name in node.input:
            if not name or name in inputs or name in weights:
                continue
            if name in known:
                inputs.add(name)
            elif name in producer:
                stack.append(producer[name])
            elif name in inits:
                weights[name] = None
            else:
                return Refused(f"input {name!r} is neither matched nor computed in the graph")
    order = tuple(sorted(chosen))
    # a value the cut makes itself is not also fed (a node with two outputs, one of them
    # matched: EmbedLayerNormalization's output and the mask index an Attention reads)
    inputs -= {out for k in order for out in graph.node[k].output}
    read = [n for k in order for n in graph.node[k].input if n in inputs]
    return Selection(output, order, tuple(dict.fromkeys(read)), tuple(weights))


def producers_of(proto: onnx.ModelProto) -> dict[str, int]:
    """value name -> index of the node that makes it."""
    return {out: k for k, node in enumerate(proto.graph.node) for out in node.output if out}


def build(
    proto: onnx.ModelProto,
    selection: Selection,
    arrays: Mapping[str, np.ndarray],
    expected: np.ndarray,
    *,
    base_dir: str | Path | None = None,
) -> Cut:
    """The selection as a model: inputs shaped like `arrays`, the output like `expected`,
    each typed as the file declares it where it does (a float16 file's values are float16
    though torch's are float32: fed cast, as the file would compute them), else like the
    array; its weights copied in with their data."""
    graph = proto.graph
    nodes = [graph.node[k] for k in selection.nodes]
    inits = {t.name: t for t in graph.initializer}
    declared = _declared_types(proto)
    model = helper.make_model(
        helper.make_graph(
            nodes,
            f"parity_cut_{_safe(selection.output)}",
            [_value_info(n, arrays[n], declared.get(n)) for n in selection.inputs],
            [_value_info(selection.output, expected, declared.get(selection.output))],
            initializer=[_with_data(inits[n], base_dir) for n in selection.weights],
        ),
        opset_imports=list(proto.opset_import),
        ir_version=proto.ir_version,
        functions=list(proto.functions),
    )
    return Cut(
        model=model,
        inputs=selection.inputs,
        output=selection.output,
        nodes=tuple(
            n.name or f"{n.op_type}_{k}" for n, k in zip(nodes, selection.nodes, strict=True)
        ),
        ops=tuple(n.op_type for n in nodes),
    )


def cut(
    proto: onnx.ModelProto,
    output: str,
    known: Collection[str],
    arrays: Mapping[str, np.ndarray],
    expected: np.ndarray,
    *,
    base_dir: str | Path | None = None,
    max_nodes: int = MAX_NODES,
) -> Cut | Refused:
    """`select` then `build`: the smallest subgraph of `proto` making `output` from the
    values in `known` (whose arrays, in `arrays`, type and shape its inputs)."""
    selection = select(proto, output, known, max_nodes=max_nodes)
    if isinstance(selection, Refused):
        return selection
    missing = [n for n in selection.inputs if n not in arrays]
    if missing:
        return Refused(f"no reference value for {missing[0]!r}")
    return build(proto, selection, arrays, expected, base_dir=base_dir)


_GRAPH_ATTRIBUTES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def feeds_for(c: Cut, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The cut's inputs from `arrays`, in the element type its graph inputs declare."""
    feeds = {}
    for vi in c.model.graph.input:
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = np.ascontiguousarray(arrays[vi.name], dtype=dtype)
    return feeds


def run_cut(
    c: Cut,
    arrays: Mapping[str, np.ndarray],
    *,
    provider: str = "CPUExecutionProvider",
    opt_level: str = "all",
) -> np.ndarray:
    """ONNX Runtime's value of the cut's output, fed with `arrays`."""
    from parity.load.sessions import open_session

    try:
        session = open_session(c.model.SerializeToString(), provider=provider, opt_level=opt_level)
        (value,) = session.run([c.output], feeds_for(c, arrays))
    except Exception as exc:
        raise OnnxRunError(
            f"ONNX Runtime could not run the node making {c.output!r} alone: {first_line(exc)}"
        ) from exc
    return np.asarray(value)


def with_output_shape(c: Cut, got: np.ndarray) -> Cut:
    """The cut with its output declared as what it computes (where the expected shape, the
    reference's, differs from it, a strict checker would refuse the declaration)."""
    model = onnx.ModelProto()
    model.CopyFrom(c.model)
    out = model.graph.output[0]
    out.CopyFrom(_value_info(c.output, got))
    return Cut(model, c.inputs, c.output, c.nodes, c.ops)


_FLOATS = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
     onnx.TensorProto.DOUBLE}
)  # fmt: skip


def _declared_types(proto: onnx.ModelProto) -> dict[str, int]:
    """The float element type the file declares for each value it types (graph inputs and
    outputs, value_info): where torch's array is float32 and the file's value float16."""
    graph = proto.graph
    typed = (*graph.input, *graph.output, *graph.value_info)
    return {
        v.name: v.type.tensor_type.elem_type
        for v in typed
        if v.type.tensor_type.elem_type in _FLOATS
    }


def _value_info(name: str, array: np.ndarray, declared: int | None = None) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)
    if declared is not None and elem in _FLOATS:
        elem = declared
    return helper.make_tensor_value_info(name, elem, [int(d) for d in np.shape(array)])


def _with_data(tensor: onnx.TensorProto, base_dir: str | Path | None) -> onnx.TensorProto:
    """A copy of an initializer holding its data inline (external data read from its file)."""
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    if copy.data_location == onnx.TensorProto.EXTERNAL:
        from onnx.external_data_helper import load_external_data_for_tensor

        load_external_data_for_tensor(copy, str(base_dir or "."))
        copy.data_location = onnx.TensorProto.DEFAULT
        del copy.external_data[:]
    return copy


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)[:64]
