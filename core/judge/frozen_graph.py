"""Where an ONNX graph can hold a size frozen at export, and the graph with it changed.

Tracing reads a size once and writes the number into the graph: a constant (a Constant node or
an initializer) feeding a shape input (Reshape, Expand, Tile, Slice, Pad, Resize, Range,
ConstantOfShape, ...) or a Div / Mul by a scalar (``y.sum((2, 3)) / float(h * w)``). A branch
tracing kept is an op that runs at every size although torch runs it at some only (a Pad whose
amount is computed from the input's shape). This module finds those places (`suspects`,
`branch_suspects`) and writes the graph with one constant replaced or one op bypassed, for
parity.judge.frozen to check against torch; it runs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np
import onnx
from onnx import numpy_helper

# op -> the inputs that carry a shape, a size or an index range
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2),
    "Pad": (1,),
    "Resize": (2, 3),
    "Upsample": (1,),
    "Range": (0, 1, 2),
    "ConstantOfShape": (0,),
}
SCALING = ("Div", "Mul")  # a scalar equal to a size: a mean written by hand
BRANCH_OPS = ("Pad",)  # ops a branch kept; bypassed to take the branch torch took
MAX_ELEMENTS = 8  # a shape, not a weight


@dataclass(frozen=True)
class Suspect:
    """A constant that may hold a size: `values` feeds input `slot` of node `node`."""

    node: str
    op: str
    position: int  # the node's place in the graph (its identity when names are empty)
    slot: int
    values: tuple[float, ...]
    source: str | None  # FILE:LINE the exporter recorded (dynamo), else None


def load(path: str) -> onnx.ModelProto:
    """The graph without its weights' data (external data left where it is)."""
    return onnx.load(path, load_external_data=False)


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        if _small(init.dims) and not init.data_location:
            found[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and _small(attr.t.dims):
                    found[node.output[0]] = numpy_helper.to_array(attr.t)
                elif attr.name == "value_int":
                    found[node.output[0]] = np.array(attr.i)
                elif attr.name == "value_ints" and len(attr.ints) <= MAX_ELEMENTS:
                    found[node.output[0]] = np.array(list(attr.ints))
                elif attr.name == "value_float":
                    found[node.output[0]] = np.array(attr.f)
    return found


def _small(dims) -> bool:
    return len(dims) <= 1 and int(np.prod(list(dims) or [1])) <= MAX_ELEMENTS


def model_numbers(model: onnx.ModelProto) -> frozenset[int]:
    """Every size of a weight (channels, features): a constant equal to one is more likely the
    model's own number than a size read at export."""
    return frozenset(int(d) for init in model.graph.initializer for d in init.dims if d > 1)


def suspects(model: onnx.ModelProto) -> list[Suspect]:
    """Constants feeding a shape input, or a scalar Div / Mul whose value is a whole number >= 2."""
    graph = model.graph
    constants = _constants(graph)
    found: list[Suspect] = []
    for position, node in enumerate(graph.node):
        slots: tuple[int, ...] = SHAPE_INPUTS.get(node.op_type, ())
        if node.op_type in SCALING:
            slots = (0, 1)
        for slot in slots:
            if slot >= len(node.input) or not node.input[slot]:
                continue
            values = constants.get(node.input[slot])
            if values is None:
                continue
            flat = values.reshape(-1)
            if node.op_type in SCALING and not _size_like_scalar(flat):
                continue
            if not np.issubdtype(flat.dtype, np.number) or flat.size == 0:
                continue
            if node.op_type in SHAPE_INPUTS and not np.all(np.mod(flat, 1) == 0):
                continue  # Resize scales: not a size
            found.append(
                Suspect(
                    node=node.name or f"{node.op_type}#{position}",
                    op=node.op_type,
                    position=position,
                    slot=slot,
                    values=tuple(float(v) for v in flat),
                    source=stack_source(node),
                )
            )
    return found


def _size_like_scalar(flat: np.ndarray) -> bool:
    if flat.size != 1 or not np.issubdtype(flat.dtype, np.number):
        return False
    value = float(flat[0])
    return np.isfinite(value) and value >= 2 and value == int(value)


def branch_suspects(model: onnx.ModelProto) -> list[Suspect]:
    """Ops a kept branch leaves in the graph: a Pad whose amount is computed (not constant)."""
    constants = _constants(model.graph)
    found = []
    for position, node in enumerate(model.graph.node):
        if node.op_type in BRANCH_OPS and len(node.input) > 1 and node.input[1] not in constants:
            found.append(
                Suspect(
                    node=node.name or f"{node.op_type}#{position}",
                    op=node.op_type,
                    position=position,
                    slot=1,
                    values=(),
                    source=stack_source(node),
                )
            )
    return found


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def stack_source(node: onnx.NodeProto) -> str | None:
    """``models.py:18``: the last frame of the dynamo exporter's stack trace that is the
    user's code (not torch's), or None (a legacy export records none)."""
    props = {p.key: p.value for p in node.metadata_props}
    return user_frame(_FRAME.finditer(props.get("pkg.torch.onnx.stack_trace", "")))


def user_frame(frames) -> str | None:
    """The last of (file, line) matches outside torch and site-packages, as FILE:LINE."""
    chosen = None
    for m in frames:
        path = m["file"].replace("\\", "/")
        if "site-packages/" in path or "/torch/" in path or path.startswith("torch/"):
            continue
        if path.startswith("<"):
            continue
        chosen = f"{PurePath(path).name}:{m['line']}"
    return chosen


def with_constant(model: onnx.ModelProto, changes: dict[tuple[int, int], np.ndarray]) -> bytes:
    """The model's bytes with input `slot` of node at `position` fed a new constant (a fresh
    initializer, so another node reading the same constant keeps its value)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for k, ((position, slot), values) in enumerate(changes.items()):
        node = copy.graph.node[position]
        old = _constants(copy.graph).get(node.input[slot])
        dtype = old.dtype if old is not None else values.dtype
        shape = old.shape if old is not None else values.shape
        name = f"parity_frozen_{k}_{node.input[slot]}"
        tensor = numpy_helper.from_array(np.asarray(values, dtype=dtype).reshape(shape), name)
        copy.graph.initializer.append(tensor)
        node.input[slot] = name
    return copy.SerializeToString()


def without_node(model: onnx.ModelProto, position: int) -> bytes:
    """The model's bytes with the node at `position` bypassed: its first output is its first
    input (the branch torch took where it did not pad)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    node = copy.graph.node[position]
    source, target = node.input[0], node.output[0]
    del copy.graph.node[position]
    for other in copy.graph.node:
        for i, name in enumerate(other.input):
            if name == target:
                other.input[i] = source
    for output in copy.graph.output:
        if output.name == target:  # a graph output: an Identity keeps its name
            copy.graph.node.append(onnx.helper.make_node("Identity", [source], [target]))
    return copy.SerializeToString()
