"""A float16 candidate: the reference nodes to keep in float32, found and checked.

Starting from the layers comparison, the node where the error is born (a one-sided Inf/NaN
first, else the first divergence) is added to ``node_block_list``; the reference is converted
again with ONNX Runtime's own converter
(``onnxruntime.transformers.float16.convert_float_to_float16(model, keep_io_types=...,
node_block_list=[...])``) and compared again, value by value, until nothing is born (at most
`MAX_NODES` nodes); then each node is dropped again if the file stays fixed without it, so
the set is small. The result is ``layers.keep_float32`` (the node names), with
``layers.keep_float32_check`` saying what the re-validation found, and the Python call that
makes the fixed file (`write_fixed` writes it: ``parity validate --write-fixed FILE.onnx``).

bfloat16 files are not re-converted (the converter makes float16 only): said in notes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnx

from parity.layers.result import LayersResult, LayerStatus

MAX_NODES = 8


def convert(reference: str | Path, keep_io_types: bool, block: Sequence[str]) -> onnx.ModelProto:
    """The reference converted to float16 with `block` kept in float32: ONNX Runtime's
    converter, then `join_kept` (its casts between two kept nodes round-trip through
    float16, where a large value overflows)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(
        onnx.load(str(reference)), keep_io_types=keep_io_types, node_block_list=list(block)
    )
    return join_kept(model)


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
        dropped.add(id(node))
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


def python_call(reference: str, keep_io_types: bool, block: Sequence[str], out: str) -> str:
    """The Python that makes the fixed file (Parity's `convert`: ONNX Runtime's converter
    with node_block_list, then the float16 round trips between kept nodes dropped)."""
    return (
        "import onnx\n"
        "from parity.layers.fp16 import convert  # convert_float_to_float16 + join_kept\n\n"
        f"model = convert({reference!r}, keep_io_types={keep_io_types!r}, "
        f"block={list(block)!r})\n"
        f"onnx.save(model, {out!r})\n"
    )


def keeps_io_types(candidate: Any, reference: Any) -> bool:
    """The candidate takes and returns the reference's float32 where the reference does."""
    ref = {t.name: t.dtype for t in (*reference.signature.inputs, *reference.signature.outputs)}
    own = {t.name: t.dtype for t in (*candidate.signature.inputs, *candidate.signature.outputs)}
    return all(own.get(n) == d for n, d in ref.items() if d == "float32")


def fp16_findings(
    result: LayersResult, reference: Any, candidate: Any, input_sets: Sequence[Any], config: Any
) -> LayersResult:
    from parity.layers.onnx_side import localise_onnx

    notes = list(result.notes)
    born = _born(result)
    if born is None:
        notes.append("float16 file: no value is born diverging, nothing to keep in float32")
        return replace(result, notes=tuple(notes))
    keep_io = keeps_io_types(candidate, reference)
    ref_graph = onnx.load(str(reference.path), load_external_data=False).graph
    ref_nodes = {n.name for n in ref_graph.node}
    readers: dict[str, list[str]] = {}
    for n in ref_graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.name)

    def check(block: Sequence[str]) -> LayersResult:
        with tempfile.TemporaryDirectory(prefix="parity-fp16-") as tmp:
            path = Path(tmp) / "fixed.onnx"
            onnx.save(convert(reference.path, keep_io, block), str(path))
            return localise_onnx(
                reference.path, path, input_sets,
                reference_provider=reference.provider,
                reference_opt_level=reference.opt_level,
                provider=candidate.provider, opt_level=candidate.opt_level,
                memory_mb=config.layers_memory_mb,
            )  # fmt: skip

    block: list[str] = []
    last = result
    while born is not None and len(block) < MAX_NODES:
        # a kept node whose value is still born: the file still holds that value in
        # float16 for its readers, so they are kept in float32 too
        adding = (
            [born.onnx_node]
            if born.onnx_node not in block
            else [r for r in readers.get(born.onnx_value, ()) if r not in block]
        )
        adding = [n for n in adding if n in ref_nodes][: MAX_NODES - len(block)]
        if not adding:
            break
        block.extend(adding)
        last = check(block)
        born = _born(last)
    fixed = born is None
    if fixed:
        for node in list(block):
            if len(block) == 1:
                break
            trial = [n for n in block if n != node]
            again = check(trial)
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
            "python": python_call(str(reference.path), keep_io, block, "fixed.onnx"),
        },
    }
    if fixed:
        notes.append(
            f"float16 file: keeping {block!r} in float32 fixes it: converted again with "
            f"convert_float_to_float16(keep_io_types={keep_io}, node_block_list={block!r}), "
            "no value is born diverging any more (write it with --write-fixed FILE.onnx)"
        )
    else:
        notes.append(
            f"float16 file: keeping {block!r} in float32 did not fix it (a value is still born "
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
            "keep in float32 (it needs --layers, a reference ONNX file and a float16 "
            "candidate that diverges)"
        )
    model = convert(reference, bool(check["keep_io_types"]), check["node_block_list"])
    return write_bytes(path, model.SerializeToString())
