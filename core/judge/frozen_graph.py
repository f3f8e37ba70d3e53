"""Where an ONNX graph can hold a size frozen at export, and the graph with it changed.

Tracing reads a size once and writes the number into the graph: a constant (a Constant node or
an initializer) feeding a shape input (Reshape, Expand, Tile, Slice, Pad, Resize, Range,
ConstantOfShape, ...) or a Div / Mul by a scalar (``y.sum((2, 3)) / float(h * w)``); the
constant may reach the shape input through shape arithmetic (the legacy exporter's
``Concat(Shape(y)[:2], [96, 64])`` before a Resize, a Cast, an Unsqueeze, a Mul), and a tensor
tracing made at the export's batch (``torch.zeros(int(b), 4)``) is a constant whose *shape*
holds the size. A branch tracing kept is an op that runs at every size although torch runs it
at some only (a Pad whose amount is computed from the input's shape). This module finds those
places (`suspects`, `branch_suspects`) and writes the graph with one constant replaced or one
op bypassed, for parity.judge.frozen to check against torch; it runs and reads nothing (the
caller hands it the proto, read through parity.load.onnx_read).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
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
# shape arithmetic a constant passes through on its way to a shape input: op -> the inputs
# that carry the value on (a Slice's starts / ends, an Unsqueeze's axes, a Gather's indices
# are positions, not sizes)
THROUGH: dict[str, tuple[int, ...] | None] = {
    "Concat": None,  # every input
    "Cast": (0,),
    "Identity": (0,),
    "Unsqueeze": (0,),
    "Squeeze": (0,),
    "Reshape": (0,),
    "Gather": (0,),
    "Slice": (0,),
    "Mul": (0, 1),
    "Div": (0, 1),
    "Add": (0, 1),
    "Sub": (0, 1),
    "Floor": (0,),
    "Ceil": (0,),
    "Where": (1, 2),  # the legacy exporter's expand(int(b), ...): Where(Equal(...), ..., [1, 1, 8])
}
MAX_DEPTH = 8  # shape arithmetic followed at most this many ops back
MAX_BAKED_ELEMENTS = 1 << 16  # a baked tensor larger than this is a weight, not looked at
MAX_BAKED = 64  # baked tensors looked at, at most
MIN_RANGE = 4  # a baked arange at least this long (shorter ones are axes and indices)


@dataclass(frozen=True)
class Suspect:
    """A constant that may hold a size: `values` feeds input `slot` of the node at
    `position`; `node` / `op` name the node that uses it as a size (the Resize a Concat
    feeds, or that node itself). `baked`: the constant is a tensor tracing made at the
    export's size, "fill" (uniform: ``torch.zeros(int(b), 4)``) or "range" (``torch.arange(
    int(n))``), and `values` is its shape (recomputed as such a tensor of the new shape)."""

    node: str
    op: str
    position: int  # the node's place in the graph (its identity when names are empty)
    slot: int
    values: tuple[float, ...]
    source: str | None  # FILE:LINE the exporter recorded (dynamo), else None
    baked: str = ""
    # a Resize of a learned tensor (an initializer: a position grid): its name and shape
    learned: tuple[str, tuple[int, ...]] | None = None
    # a Resize's scales read as sizes: `values` = scales × `per` (its input's static shape),
    # written back as sizes / per
    per: tuple[int, ...] = ()


def _constants(graph: onnx.GraphProto, baked: bool = False) -> dict[str, np.ndarray]:
    """Small constants by value name; `baked`: also tensors up to MAX_BAKED_ELEMENTS."""
    found: dict[str, np.ndarray] = {}
    fits = _bakeable if baked else _small
    for init in graph.initializer:
        if fits(init.dims) and not init.data_location:
            found[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and fits(attr.t.dims):
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


def _bakeable(dims) -> bool:
    return math.prod(int(d) for d in dims) <= MAX_BAKED_ELEMENTS


def model_numbers(model: onnx.ModelProto) -> frozenset[int]:
    """Every size of a weight (channels, features): a constant equal to one is more likely the
    model's own number than a size read at export."""
    return frozenset(int(d) for init in model.graph.initializer for d in init.dims if d > 1)


def suspects(model: onnx.ModelProto) -> list[Suspect]:
    """Constants feeding a shape input (directly or through shape arithmetic), a scalar
    Div / Mul whose value is a whole number >= 2, and uniform tensors (zeros, ones, a fill)
    whose shape may be the export's (`Suspect.baked`)."""
    graph = model.graph
    constants = _constants(graph)
    producer = {out: k for k, node in enumerate(graph.node) for out in node.output if out}
    weights = _learned(graph)
    fed = _fed(graph)
    found: dict[tuple[int, int], Suspect] = {}
    for position, node in enumerate(graph.node):  # shape inputs first: they name the user
        name = node.name or f"{node.op_type}#{position}"
        if node.op_type == "Reshape" and node.input and node.input[0] not in fed:
            continue  # a learned tensor's reshape (pos.reshape(1, 4, 4, -1)): its own size
        learned = weights.get(node.input[0]) if node.op_type in _RESIZES and node.input else None
        for slot in SHAPE_INPUTS.get(node.op_type, ()):
            if slot >= len(node.input) or not node.input[slot]:
                continue
            values = constants.get(node.input[slot])
            per = _scaled_shape(node, slot, values, weights)
            if values is not None and per:  # scale_factor=6 / 4: the sizes it makes
                sizes = np.floor(values.reshape(-1) * np.array(per) + 1e-6)
                _add(found, name, node, position, slot, sizes, shape=True, learned=learned)
                if (position, slot) in found:
                    found[(position, slot)] = replace(found[(position, slot)], per=per)
                continue
            if values is not None:
                _add(found, name, node, position, slot, values, shape=True, learned=learned)
                continue
            for at, at_slot, values in _reaching(graph, node.input[slot], producer, constants):
                _add(found, name, node, at, at_slot, values, shape=True, learned=learned)
    for position, node in enumerate(graph.node):
        if node.op_type in SCALING:
            name = node.name or f"{node.op_type}#{position}"
            for slot in (0, 1):
                values = _input_constant(node, slot, constants)
                if values is not None and _size_like_scalar(values.reshape(-1)):
                    _add(found, name, node, position, slot, values)
    found_list = sorted(found.values(), key=lambda s: s.position)
    return found_list + _baked(graph, constants, {(s.position, s.slot) for s in found_list})


def _input_constant(
    node: onnx.NodeProto, slot: int, constants: dict[str, np.ndarray]
) -> np.ndarray | None:
    if slot >= len(node.input) or not node.input[slot]:
        return None
    return constants.get(node.input[slot])


def _add(
    found: dict[tuple[int, int], Suspect],
    name: str,
    user: onnx.NodeProto,
    position: int,
    slot: int,
    values: np.ndarray,
    *,
    shape: bool = False,
    learned: tuple[str, tuple[int, ...]] | None = None,
) -> None:
    """One suspect at (position, slot), the first that reaches it kept."""
    flat = values.reshape(-1)
    if (position, slot) in found or flat.size == 0 or not np.issubdtype(flat.dtype, np.number):
        return
    if shape and not np.all(np.mod(flat, 1) == 0):
        return  # Resize scales: not a size
    found[(position, slot)] = Suspect(
        node=name,
        op=user.op_type,
        position=position,
        slot=slot,
        values=tuple(float(v) for v in flat),
        source=stack_source(user),
        learned=learned,
    )


_RESIZES = ("Resize", "Upsample")


def _scaled_shape(
    node: onnx.NodeProto,
    slot: int,
    values: np.ndarray | None,
    weights: dict[str, tuple[str, tuple[int, ...]]],
) -> tuple[int, ...]:
    """The static input shape a Resize's constant scales multiply (its data a learned
    tensor of that shape, as an initializer), or () where they are no such scales."""
    if node.op_type != "Resize" or slot != 2 or values is None or not node.input:
        return ()
    learned = weights.get(node.input[0])
    flat = values.reshape(-1)
    if learned is None or learned[0] != node.input[0] or len(learned[1]) != flat.size:
        return ()  # scales of a computed tensor, or seen through a reshape: not followed
    if not np.issubdtype(flat.dtype, np.floating) or np.all(np.mod(flat, 1) == 0):
        return ()
    return learned[1]


def _fed(graph: onnx.GraphProto) -> set[str]:
    """Values that depend on a graph input: a Reshape of anything else reshapes a tensor of
    one size at every input size (its element count fixed), so its shape is no frozen size."""
    fed = {i.name for i in graph.input}
    for node in graph.node:
        if any(i in fed for i in node.input) or (not node.input and node.op_type != "Constant"):
            fed.update(o for o in node.output if o)
    return fed


def _learned(graph: onnx.GraphProto) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Value name -> (initializer, its shape) for every initializer of two or more axes, also
    seen through ops that only move its data (_MOVES): what a Resize reading it resizes is a
    learned tensor (the legacy exporter folds ``pos_embed[:, 1:].reshape(...).permute(...)``
    into one initializer, or keeps the ops without constant folding)."""
    found = {
        init.name: (init.name, tuple(int(d) for d in init.dims))
        for init in graph.initializer
        if len(init.dims) >= 2
    }
    for node in graph.node:
        if node.op_type in _MOVES and node.input and node.input[0] in found and node.output:
            found[node.output[0]] = found[node.input[0]]
    return found


# ops that move a tensor's data without computing on it: pos_embed[:, 1:].reshape(1, 4, 4, -1)
# .permute(0, 3, 1, 2) is still the learned tensor where a Resize reads it
_MOVES = ("Identity", "Cast", "Slice", "Reshape", "Transpose", "Squeeze", "Unsqueeze")


def patch_strides(model: onnx.ModelProto) -> tuple[int, ...]:
    """Strides of Convs whose kernel equals their stride (a ViT's patch embedding), largest
    first: a token count there is height / stride × width / stride (+ a class token)."""
    found = set()
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: list(a.ints) for a in node.attribute}
        strides, kernel = attrs.get("strides", []), attrs.get("kernel_shape", [])
        if len(set(strides)) == 1 and strides == kernel and strides[0] > 1:
            found.add(strides[0])
    return tuple(sorted(found, reverse=True))


def _reaching(
    graph: onnx.GraphProto,
    value: str,
    producer: dict[str, int],
    constants: dict[str, np.ndarray],
) -> list[tuple[int, int, np.ndarray]]:
    """(node position, input slot, constant) of every constant that reaches `value` through
    shape arithmetic (THROUGH), at most MAX_DEPTH ops back."""
    found: list[tuple[int, int, np.ndarray]] = []
    seen: set[int] = set()
    todo = [(value, 0)]
    while todo and len(seen) < 8 * MAX_DEPTH:
        name, depth = todo.pop()
        k = producer.get(name)
        if k is None or k in seen or depth >= MAX_DEPTH:
            continue
        seen.add(k)
        node = graph.node[k]
        if node.op_type not in THROUGH:
            continue
        slots = THROUGH[node.op_type]
        for slot in range(len(node.input)) if slots is None else slots:
            if slot >= len(node.input) or not node.input[slot]:
                continue
            values = constants.get(node.input[slot])
            if values is not None:
                found.append((k, slot, values))
            else:
                todo.append((node.input[slot], depth + 1))
    return found


def baked_kind(tensor: np.ndarray, *, small: bool) -> str:
    """ "fill": a uniform tensor of two or more axes; "range": 0, 1, ..., n - 1 (n >= MIN_RANGE);
    else "" (a weight, an axis list)."""
    if tensor.size == 0 or not np.issubdtype(tensor.dtype, np.number):
        return ""
    if tensor.ndim >= 2 and not small and np.all(tensor == tensor.reshape(-1)[0]):
        return "fill"
    counting = tensor.ndim == 1 and tensor.size >= MIN_RANGE
    if counting and np.array_equal(tensor, np.arange(tensor.size)):
        return "range"
    return ""


def _baked(
    graph: onnx.GraphProto, small: dict[str, np.ndarray], taken: set[tuple[int, int]]
) -> list[Suspect]:
    """Uniform tensors of two or more axes (``torch.zeros(int(b), 4)``: tracing made them at
    the export's size): their shape is the suspect, recomputed by a tensor of the new shape
    filled alike."""
    tensors = _constants(graph, baked=True)
    found: list[Suspect] = []
    for position, node in enumerate(graph.node):
        for slot, name in enumerate(node.input):
            tensor = tensors.get(name)
            if tensor is None or (position, slot) in taken or len(found) >= MAX_BAKED:
                continue
            kind = baked_kind(tensor, small=name in small)
            if not kind:
                continue
            found.append(
                Suspect(
                    node=node.name or f"{node.op_type}#{position}",
                    op=node.op_type,
                    position=position,
                    slot=slot,
                    values=tuple(float(d) for d in tensor.shape),
                    source=stack_source(node),
                    baked=kind,
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
    initializer, so another node reading the same constant keeps its value). A new value of
    the old one's size keeps its shape and dtype; another size (a baked tensor remade at a
    new shape) keeps its own shape."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    constants = _constants(copy.graph, baked=True)  # once: a plan may change thousands
    for k, ((position, slot), values) in enumerate(changes.items()):
        node = copy.graph.node[position]
        old = constants.get(node.input[slot])
        new = np.asarray(values)
        if old is not None:
            new = new.astype(old.dtype)
            if new.size == old.size:
                new = new.reshape(old.shape)
        name = f"parity_frozen_{k}_{node.input[slot]}"
        copy.graph.initializer.append(numpy_helper.from_array(new, name))
        node.input[slot] = name
    return copy.SerializeToString()


def remade(model: onnx.ModelProto, s: Suspect, shape: tuple[int, ...]) -> np.ndarray:
    """A baked suspect's tensor made again at `shape`: filled as the file's is, or counting."""
    tensor = _constants(model.graph, baked=True).get(model.graph.node[s.position].input[s.slot])
    dtype = tensor.dtype if tensor is not None else np.float32
    if s.baked == "range":
        return np.arange(shape[0] if shape else 0).astype(dtype)
    fill = tensor.reshape(-1)[0] if tensor is not None and tensor.size else 0
    return np.full(shape, fill, dtype=dtype)


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
