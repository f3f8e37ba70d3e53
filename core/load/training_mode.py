"""Whether an ONNX file was exported in training mode, read from the file alone.

`torch.onnx.export(..., training=TrainingMode.TRAINING)`, or a model left in `train()` and
exported with `TrainingMode.PRESERVE`, writes Dropout nodes whose `training_mode` input is a
constant true (each drops a random share of its values on every run; one whose ratio is a
constant 0 drops nothing and is not counted) and BatchNormalization
nodes with `training_mode=1` (they normalise with each batch's own statistics, not the running
ones). Either is a bug in the file whatever a runtime makes of it: ONNX Runtime's default
optimiser removes such Dropouts, so a run at its default level can pass, while other
runtimes, and ONNX Runtime at `--ort-opt-level disable`, compute something else; no
optimiser removes a BatchNormalization that trains (it fails at every level).

Contract: training_nodes(proto) -> tuple[(op, count), ...] (ops in a fixed order; () where no
node is in training mode or the flag cannot be read from the file);
training_words(counts, file="") -> the one sentence every front shows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

_OPS = ("Dropout", "BatchNormalization")


def training_nodes(proto: onnx.ModelProto) -> tuple[tuple[str, int], ...]:
    """Per op (Dropout, BatchNormalization), how many nodes of the graph (subgraphs
    included) run in training mode; only ops that have some."""
    consts = _constants(proto.graph)
    counts = dict.fromkeys(_OPS, 0)
    for node in _nodes(proto.graph):
        if node.op_type == "Dropout" and _dropout_trains(node, consts):
            counts["Dropout"] += 1
        elif node.op_type == "BatchNormalization" and _attribute(node, "training_mode") == 1:
            counts["BatchNormalization"] += 1
    return tuple((op, n) for op, n in counts.items() if n)


def training_words(counts: tuple[tuple[str, int], ...], file: str = "") -> str:
    """One sentence: what was exported in training mode and what to do."""
    what = []
    for op, n in counts:
        if op == "Dropout":
            what.append(
                f"{n} Dropout node(s) have training_mode true (each zeroes a random share of "
                "its values on every run)"
            )
        else:
            what.append(
                f"{n} BatchNormalization node(s) have training_mode=1 (each normalises with "
                "the batch's own statistics, not the running ones)"
            )
    subject = f"{file} was" if file else "The file was"
    ops = {op for op, _ in counts}
    if ops == {"Dropout"}:
        why = (
            "ONNX Runtime's default optimiser removes such Dropouts, so a run can pass at its "
            "default level while other runtimes (and --ort-opt-level disable) give other numbers"
        )
    elif "Dropout" in ops:
        why = (
            "its BatchNormalization gives other numbers at every level, and ONNX Runtime's "
            "default optimiser removes its Dropouts (other runtimes and --ort-opt-level "
            "disable keep them)"
        )
    else:  # no optimiser removes a BatchNormalization that trains
        why = "it gives other numbers than the model in eval mode at every level and runtime"
    return (
        f"{subject} exported in training mode: {'; '.join(what)}. A bug in the export: {why}; "
        "export after model.eval(), with training=torch.onnx.TrainingMode.EVAL."
    )


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _nodes(g)


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Scalar-sized tensors a flag can be read from: initializers and Constant nodes (the
    main graph's; a subgraph reads them from there)."""
    out = {t.name: t for t in graph.initializer if _small(t)}
    for node in _nodes(graph):
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and _small(a.t):
                    out[node.output[0]] = a.t
    return out


def _small(tensor: onnx.TensorProto) -> bool:
    return int(np.prod(tensor.dims, dtype=np.int64)) <= 1 and not tensor.external_data


def _dropout_trains(node: onnx.NodeProto, consts: dict[str, onnx.TensorProto]) -> bool:
    """Opset 12+: a third input `training_mode` that is a constant true, and a ratio that
    is not a constant 0 (such a Dropout passes its values on, training or not)."""
    if len(node.input) < 3 or not node.input[2]:
        return False
    if not _scalar(consts, node.input[2]):
        return False
    ratio = node.input[1] if len(node.input) > 1 else ""
    return not ratio or ratio not in consts or _scalar(consts, ratio) != 0


def _scalar(consts: dict[str, onnx.TensorProto], name: str) -> float:
    """The value of a one-element constant (0 where it cannot be read)."""
    tensor = consts.get(name)
    if tensor is None:
        return 0.0
    try:
        return float(np.asarray(numpy_helper.to_array(tensor)).reshape(-1)[0])
    except (IndexError, ValueError, TypeError):
        return 0.0


def _attribute(node: onnx.NodeProto, name: str) -> int | None:
    for a in node.attribute:
        if a.name == name and a.type == onnx.AttributeProto.INT:
            return int(a.i)
    return None
