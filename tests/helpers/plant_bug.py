"""Plant one bug in one node of a real ONNX export (for localisation tests and the benchmark).

Initializers can be shared between nodes (exporters deduplicate equal tensors), so a nudged
weight is a fresh copy wired into the one node only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from parity.results import ValidationRun


def plant(src: str | Path, dst: str | Path, node: str, kind: str, value: object = None) -> str:
    """Write `src` with one bug in `node` to `dst`; returns the node's first output name.

    kind: "bias" (add `value` to element 0 of the node's last float initializer input),
    "scale" (multiply its first float initializer input by 1 + `value`),
    "attribute" (`value` = (name, new value)), "op" (`value` = new op type).
    """
    model = onnx.load(str(src))
    graph = model.graph
    target = next((n for n in graph.node if n.name == node), None)
    if target is None:
        raise KeyError(f"no node {node!r}")
    inits = {t.name: t for t in graph.initializer}
    # the legacy exporter feeds deduplicated initializers through Identity nodes
    aliases = {
        n.output[0]: n.input[0]
        for n in graph.node
        if n.op_type == "Identity" and n.input and n.input[0] in inits
    }
    if kind in ("bias", "scale"):
        slots = [i for i, name in enumerate(target.input) if name in inits or name in aliases]
        slot = slots[-1] if kind == "bias" else slots[0]
        source = aliases.get(target.input[slot], target.input[slot])
        array = numpy_helper.to_array(inits[source]).copy()
        if kind == "bias":
            array.reshape(-1)[0] += np.asarray(value, array.dtype)
        else:
            array *= np.asarray(1 + value, array.dtype)
        new_name = f"{target.input[slot]}__planted"
        graph.initializer.append(numpy_helper.from_array(array, new_name))
        target.input[slot] = new_name
    elif kind == "attribute":
        name, new = value  # type: ignore[misc]
        for attr in target.attribute:
            if attr.name == name:
                target.attribute.remove(attr)
                break
        target.attribute.append(onnx.helper.make_attribute(name, new))
    elif kind == "op":
        target.op_type = str(value)
        del target.attribute[:]
    else:
        raise ValueError(kind)
    onnx.save(model, str(dst))
    return target.output[0]


def export_with_bias_bug(model: object, folder: Path) -> tuple[Path, Path]:
    """`model` (a conv net on x[b, 4, t] whose second conv is `c2`, output "activations")
    exported by the legacy exporter with dynamic b and t, and a copy with /c2/Conv's bias
    + 0.01: (clean, bug). The findings and suggestion tests share it."""
    import warnings

    import torch

    clean, bug = Path(folder) / "net.onnx", Path(folder) / "bug.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 4, 64),), str(clean), dynamo=False,
                          input_names=["x"], output_names=["activations"],
                          dynamic_axes={"x": {0: "b", 2: "t"}})  # fmt: skip
    plant(clean, bug, "/c2/Conv", "bias", 0.01)
    return clean, bug


def wrong_scale(src: str | Path, dst: str | Path, node: str, factor: float = 2.0) -> Path:
    """`src` with the `..._scales` initializer of one MatMulNBits node multiplied by
    `factor` (a fresh copy: the node's weights then are not a rounding of the model's)."""
    model = onnx.load(str(src))
    target = next(n for n in model.graph.node if n.name == node)
    for tensor in model.graph.initializer:
        if tensor.name == target.input[2]:
            scaled = numpy_helper.to_array(tensor) * np.float32(factor)
            tensor.CopyFrom(numpy_helper.from_array(scaled, tensor.name))
    onnx.save(model, str(dst))
    return Path(dst)


def wrong_weight_scale(src: str | Path, dst: str | Path, node: str, factor: float = 1.5) -> Path:
    """`src` (a statically quantized file, QDQ or QOperator) with the weight scale of one
    Conv / Gemm / MatMul / QLinearConv / QGemm / QLinearMatMul node multiplied by `factor`
    (per channel: every channel's), as a fresh initializer wired into that node only."""
    model = onnx.load(str(src))
    graph = model.graph
    target = next(n for n in graph.node if n.name == node)
    if target.op_type in ("QLinearConv", "QGemm", "QLinearMatMul"):
        holder, slot = target, 4
    else:
        holder = next(n for n in graph.node if target.input[1] in n.output)
        assert holder.op_type == "DequantizeLinear", holder.op_type
        slot = 1
    scale = next(t for t in graph.initializer if t.name == holder.input[slot])
    name = f"{scale.name}__planted"
    graph.initializer.append(
        numpy_helper.from_array(numpy_helper.to_array(scale) * np.float32(factor), name)
    )
    holder.input[slot] = name
    onnx.save(model, str(dst))
    return Path(dst)


def scale_for_error(
    run: ValidationRun, path: str | Path, node: str, output: str, target: float
) -> float:
    """The `plant(..., "scale", s)` amount that moves `output` by at most `target` x torch's
    own error (the run's measured noise floor) on each of the run's own input sets. `node`
    makes `output` as weight x something + offset (a Gemm's B and C, a
    SkipLayerNormalization's gamma and beta: its first and second initializer inputs), so
    scaling the weight by 1 + s moves the output by s x |output - offset|, read from the
    run's ONNX outputs, judged elements only."""
    model = onnx.load(str(path))
    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    found = next(n for n in graph.node if n.name == node)
    offset = [inits[i] for i in found.input if i in inits][1].astype(np.float64)
    floors = {
        c.input_set: c.noise.torch_error
        for c in run.outputs
        if c.name == output and c.noise is not None and c.candidate == 0
    }
    assert floors, "the run measured no noise floor for this output"
    amounts = []  # per input set: the s that moves it by target x its own floor
    made = run.candidates[0].onnx_outputs
    for case, outputs in zip(run.cases, made, strict=True):
        values = np.asarray(outputs.arrays[output], np.float64) - offset
        mask = case.exclusions.get(output)
        if mask is not None:
            values = values[~np.broadcast_to(mask, values.shape)]
        amounts.append(target * floors[case.input_set.index] / float(np.abs(values).max()))
    return min(amounts)
