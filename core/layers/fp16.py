"""A float16 or bfloat16 candidate: the reference nodes to keep in float32, found and checked.

Starting from the layers comparison, the node where the error is born (a one-sided Inf/NaN
first, else the first divergence) is added to ``node_block_list`` (where that node already
computes in float32, the nearest 16-bit nodes upstream of it instead: their rounding is what
it reads); the reference is converted again with ONNX Runtime's own converter
(``onnxruntime.transformers.float16.convert_float_to_float16(model, keep_io_types=...,
node_block_list=[...])``) and compared again, value by value, until nothing is born (at most
`MAX_NODES` nodes); then each node is dropped again if the file stays fixed without it, so
the set is small. The result is ``layers.keep_float32`` (the node names), with
``layers.keep_float32_check`` saying what the re-validation found, and the Python call that
makes the fixed file (`write_fixed` writes it: ``parity validate --write-fixed FILE.onnx``).

bfloat16: ONNX Runtime's converter makes float16 only, so a bfloat16 file is converted the
same way and then retyped (`to_bfloat16`: every float16 type, Cast and constant made
bfloat16, initializers taken again from the reference's float32 values, since bfloat16
keeps float32's range). ONNX Runtime's CPU provider has bfloat16 kernels for data movement
and casts only (Transpose, Reshape, Cast, ...; no MatMul, Add, Conv or Relu), so the ops the
candidate does not compute in bfloat16 are passed as ``op_block_list``: the re-converted file
computes in bfloat16 exactly where the candidate does, and runs where it runs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from parity.layers.result import LayersResult, LayerStatus
from parity.load.onnx_read import read_onnx

MAX_NODES = 8


def convert(
    reference: str | Path,
    keep_io_types: bool,
    block: Sequence[str],
    dtype: str = "float16",
    op_block_list: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """The reference converted to float16 (or bfloat16, `dtype`) with `block` kept in
    float32: ONNX Runtime's converter (`op_block_list` None: its default), then `join_kept`
    (its casts between two kept nodes round-trip through float16, where a large value
    overflows), then for bfloat16 `to_bfloat16`."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    source = read_onnx(reference)
    options: dict[str, Any] = {}
    if op_block_list is not None:
        options["op_block_list"] = list(op_block_list)
    model = convert_float_to_float16(
        read_onnx(reference),
        keep_io_types=keep_io_types,
        node_block_list=list(block),
        **options,
    )
    model = join_kept(model)
    return to_bfloat16(model, source) if dtype == "bfloat16" else model


def to_bfloat16(model: onnx.ModelProto, reference: onnx.ModelProto) -> onnx.ModelProto:
    """A float16 conversion retyped to bfloat16: value types, Casts' `to`, tensor
    attributes (Constant) and initializers, the latter from the reference's float32 values
    where it has them by name (float16's conversion clamped them to its range)."""
    import ml_dtypes
    from onnx import numpy_helper

    half, bf16 = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16
    originals = {t.name: t for t in reference.graph.initializer}

    def retyped(t: onnx.TensorProto) -> onnx.TensorProto:
        source = originals.get(t.name)
        if source is not None and source.data_type == onnx.TensorProto.FLOAT:
            values = numpy_helper.to_array(source)
        else:
            values = numpy_helper.to_array(t).astype(np.float32)
        return numpy_helper.from_array(values.astype(ml_dtypes.bfloat16), t.name)

    graph = model.graph
    for i, t in enumerate(graph.initializer):
        if t.data_type == half:
            graph.initializer[i].CopyFrom(retyped(t))
    for v in [*graph.input, *graph.output, *graph.value_info]:
        if v.type.tensor_type.elem_type == half:
            v.type.tensor_type.elem_type = bf16
    for node in graph.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == half:
                a.i = bf16
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == half:
                a.t.CopyFrom(retyped(a.t))
    return model


def join_kept(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop each Cast float32 -> float16 whose every reader casts straight back to float32
    (between two nodes kept in float32): those readers read the float32 value, which gets
    its original name back (the converter names it NAME_cast_to_fp16)."""
    graph = model.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    outputs = {o.name for o in graph.output}
    graph_inputs = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    dropped: set[int] = set()
    renames: dict[str, str] = {}
    for node in graph.node:
        if not _cast_to(node, onnx.TensorProto.FLOAT16) or node.output[0] in outputs:
            continue
        half = node.output[0]
        backs = readers.get(half, [])
        if not backs or not all(_cast_to(b, onnx.TensorProto.FLOAT) for b in backs):
            continue
        source = node.input[0]
        to_output = [b for b in backs if b.output[0] in outputs]
        if to_output and (len(backs) > 1 or source in graph_inputs):
            continue  # a graph output read back: kept as the converter wrote it
        dropped.add(id(node))
        if to_output:  # the kept node writes the graph output itself
            dropped.add(id(to_output[0]))
            renames[source] = to_output[0].output[0]
            continue
        for back in backs:
            dropped.add(id(back))
            renames[back.output[0]] = source
        if source == f"{half}_cast_to_fp16":
            renames[source] = half
    if not dropped:
        return model

    def final(name: str) -> str:
        seen = 0
        while name in renames and seen < 4:
            name, seen = renames[name], seen + 1
        return name

    kept = [n for n in graph.node if id(n) not in dropped]
    for node in kept:
        node.input[:] = [final(i) for i in node.input]
        node.output[:] = [final(o) if o in renames and renames[o] != o else o for o in node.output]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.value_info[:]  # types of renamed values: ONNX Runtime infers them again
    return model


def _cast_to(node: onnx.NodeProto, to: int) -> bool:
    return node.op_type == "Cast" and any(a.name == "to" and a.i == to for a in node.attribute)


def python_call(
    reference: str,
    keep_io_types: bool,
    block: Sequence[str],
    out: str,
    dtype: str = "float16",
    op_block_list: Sequence[str] | None = None,
) -> str:
    """The Python that makes the fixed file (Parity's `convert`: ONNX Runtime's converter
    with node_block_list, then the float16 round trips between kept nodes dropped, and for
    bfloat16 the retyping)."""
    extra = ""
    if dtype != "float16":
        extra = f", dtype={dtype!r}, op_block_list={list(op_block_list or ())!r}"
    what = "convert_float_to_float16 + join_kept" + (" + to_bfloat16" if extra else "")
    return (
        "import onnx\n"
        f"from parity.layers.fp16 import convert  # {what}\n\n"
        f"model = convert({reference!r}, keep_io_types={keep_io_types!r}, "
        f"block={list(block)!r}{extra})\n"
        f"onnx.save(model, {out!r})\n"
    )


def sixteen_bit_nodes(model: onnx.ModelProto) -> set[str]:
    """Named nodes (Casts aside) with an output typed float16 or bfloat16: where the file
    computes (or moves data) in 16 bits."""
    from parity.load.file_precision import value_types

    types = value_types(model)
    sixteen = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    return {
        n.name
        for n in model.graph.node
        if n.name and n.op_type != "Cast" and any(types.get(o) in sixteen for o in n.output)
    }


def sixteen_bit_ops(model: onnx.ModelProto) -> set[str]:
    """The op types the file computes in 16 bits (by the types of their outputs)."""
    names = sixteen_bit_nodes(model)
    return {n.op_type for n in model.graph.node if n.name in names}


def upstream_sixteen(model: onnx.ModelProto, node: str, limit: int = MAX_NODES) -> list[str]:
    """The nearest 16-bit nodes upstream of `node` (through nodes that are not): the
    rounding it reads. At most `limit`, nearest first."""
    sixteen = sixteen_bit_nodes(model)
    producers = {o: n for n in model.graph.node for o in n.output}
    by_name = {n.name: n for n in model.graph.node if n.name}
    start = by_name.get(node)
    if start is None:
        return []
    found: list[str] = []
    seen: set[int] = set()  # the nodes visited, by id
    frontier = list(start.input)
    while frontier and len(found) < limit:
        following = []
        for value in frontier:
            up = producers.get(value)
            if up is None or id(up) in seen:
                continue
            seen.add(id(up))
            if up.name in sixteen:
                found.append(up.name)
            else:
                following.extend(up.input)
        frontier = following
    return found[:limit]


def keeps_io_types(candidate: Any, reference: Any) -> bool:
    """The candidate takes and returns the reference's float32 where the reference does."""
    ref = {t.name: t.dtype for t in (*reference.signature.inputs, *reference.signature.outputs)}
    own = {t.name: t.dtype for t in (*candidate.signature.inputs, *candidate.signature.outputs)}
    return all(own.get(n) == d for n, d in ref.items() if d == "float32")


def fp16_findings(
    result: LayersResult,
    reference: Any,
    candidate: Any,
    input_sets: Sequence[Any],
    config: Any,
    dtype: str = "float16",
) -> LayersResult:
    from parity.layers.onnx_vs_onnx import localise_onnx

    notes = list(result.notes)
    born = _born(result)
    if born is None:
        notes.append(f"{dtype} file: no value is born diverging, nothing to keep in float32")
        return replace(result, notes=tuple(notes))
    keep_io = keeps_io_types(candidate, reference)
    ref_proto = read_onnx(reference.path, external_data=False)
    ref_graph = ref_proto.graph
    ref_nodes = {n.name for n in ref_graph.node}
    readers: dict[str, list[str]] = {}
    for n in ref_graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.name)
    current = read_onnx(candidate.path, external_data=False)
    op_block_list = None
    if dtype == "bfloat16":  # compute in bfloat16 only where the candidate does (CPU: little)
        allowed = sixteen_bit_ops(current)
        op_block_list = sorted({n.op_type for n in ref_graph.node} - allowed - {"Cast"})

    def check(block: Sequence[str]) -> tuple[LayersResult, onnx.ModelProto]:
        with tempfile.TemporaryDirectory(prefix="parity-fp16-") as tmp:
            path = Path(tmp) / "fixed.onnx"
            model = convert(reference.path, keep_io, block, dtype, op_block_list)
            onnx.save(model, str(path))
            return localise_onnx(
                reference.path, path, input_sets,
                reference_provider=reference.provider,
                reference_opt_level=reference.opt_level,
                provider=candidate.provider, opt_level=candidate.opt_level,
                memory_mb=config.layers_memory_mb,
            ), model  # fmt: skip

    block: list[str] = []
    last = result
    while born is not None and len(block) < MAX_NODES:
        room = MAX_NODES - len(block)
        if born.onnx_node not in block and born.onnx_node in sixteen_bit_nodes(current):
            adding = [born.onnx_node]
        elif born.onnx_node not in block and (up := upstream_sixteen(current, born.onnx_node)):
            adding = up  # it computes in float32 already: the 16-bit rounding it reads
        else:
            # a kept node whose value is still born: the file still holds that value in
            # 16 bits for its readers, so they are kept in float32 too
            adding = [r for r in readers.get(born.onnx_value, ()) if r not in block]
        adding = [n for n in adding if n in ref_nodes and n not in block][:room]
        if not adding:
            break
        block.extend(adding)
        last, current = check(block)
        born = _born(last)
    fixed = born is None
    if fixed:
        for node in list(block):
            if len(block) == 1:
                break
            trial = [n for n in block if n != node]
            again, _ = check(trial)
            if _born(again) is None:
                block, last = trial, again
    first_before = result.first_divergence
    findings = {
        **result.findings,
        "keep_float32": block if fixed else [],
        "keep_float32_check": {
            "node_block_list": block,
            "keep_io_types": keep_io,
            "fixed": fixed,
            "first_divergence_before": None if first_before is None else first_before.onnx_value,
            "first_divergence_after": None
            if last.first_divergence is None
            else last.first_divergence.onnx_value,
            "nonfinite_values_before": _nonfinite(result),
            "nonfinite_values_after": _nonfinite(last),
            "dtype": dtype,
            "op_block_list": op_block_list,
            "python": python_call(
                str(reference.path), keep_io, block, "fixed.onnx", dtype, op_block_list
            ),
        },
    }
    how = f"keep_io_types={keep_io}, node_block_list={block!r}"
    if op_block_list is not None:
        how += f", op_block_list={op_block_list!r}, retyped to bfloat16"
    if fixed:
        notes.append(
            f"{dtype} file: keeping {block!r} in float32 fixes it: converted again with "
            f"convert_float_to_float16({how}), no value is born diverging any more (write it "
            "with --write-fixed FILE.onnx)"
        )
    else:
        notes.append(
            f"{dtype} file: keeping {block!r} in float32 did not fix it (a value is still born "
            f"diverging, at most {MAX_NODES} nodes are tried)"
        )
    return replace(result, findings=findings, notes=tuple(notes))


def _born(result: LayersResult) -> Any:
    """Where to keep float32 next: the first one-sided Inf/NaN, else the first divergence."""
    values = result.values
    nonfinite = next((v for v in values if v.status == LayerStatus.NONFINITE.value), None)
    return nonfinite or result.first_divergence


def _nonfinite(result: LayersResult) -> int:
    return sum(1 for v in result.values if v.status == LayerStatus.NONFINITE.value)


def write_fixed(result: LayersResult, reference: str | Path, path: str | Path) -> Path:
    """Write the fixed float16 file the run found (`parity validate --write-fixed`)."""
    from parity.errors import UsageError
    from parity.files.atomic import write_bytes

    check = result.findings.get("keep_float32_check")
    if not check or not check.get("fixed"):
        raise UsageError(
            f"no fixed float16 file to write to {path}: this run found no set of nodes to "
            "keep in float32 (it needs --layers, a reference ONNX file and a float16 or "
            "bfloat16 candidate that diverges)"
        )
    model = convert(
        reference,
        bool(check["keep_io_types"]),
        check["node_block_list"],
        str(check.get("dtype") or "float16"),
        check.get("op_block_list"),
    )
    return write_bytes(path, model.SerializeToString())
