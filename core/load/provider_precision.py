"""What precision a provider really computed a float16 / bfloat16 file in.

ONNX Runtime has float16 kernels for few ops on its CPU provider; for the rest it inserts
casts (``InsertedPrecisionFreeCast_*``) and runs the op in float32, so a float16 file that
overflows on a GPU can pass on CPU. That is read from the graph ONNX Runtime itself made: a
session at optimisation level "disable" (node names kept; the casts are inserted when the
graph is partitioned onto the provider's kernels, at every level) writes its graph
(``SessionOptions.optimized_model_filepath``, weights to a file beside it) to a temp folder;
each 16-bit node of the file whose outputs there are float32 ran in float32.

Contract:
@dataclass(frozen=True) class ProviderPrecision: provider; dtype; total; in_float32
provider_precision(path, provider) -> ProviderPrecision | None   (None: no 16-bit nodes,
    or ONNX Runtime would not say; never raises)
precision_notes(notes) -> the notes that say it (the Overview shows them by the verdict)
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto

from parity.load.onnx_read import read_onnx

SIXTEEN_BIT = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}
_WIDE = {TensorProto.FLOAT, TensorProto.DOUBLE}
_NOT_COMPUTE = {"Cast", "CastLike", "Constant", "Identity"}
NOTE_START = "ONNX Runtime ran "


@dataclass(frozen=True)
class ProviderPrecision:
    provider: str
    dtype: str  # "float16" or "bfloat16" (the file's most common 16-bit type)
    total: int  # the file's nodes computing in that type (casts and constants aside)
    in_float32: int  # of those, how many the provider ran in float32

    @property
    def note(self) -> str:
        where = self.provider.removesuffix("ExecutionProvider")
        gpu = "; a GPU run may differ" if where == "CPU" else ""
        return (
            f"{NOTE_START}{self.in_float32} of {self.total} {self.dtype} nodes in float32 on "
            f"{where} (casts it inserted around ops without a {self.dtype} kernel there){gpu}"
        )


def precision_notes(notes: tuple[str, ...] | list[str]) -> list[str]:
    return [n for n in notes if n.startswith(NOTE_START)]


def provider_precision(path: str | Path, provider: str) -> ProviderPrecision | None:
    """How many of the file's 16-bit nodes `provider` ran in float32 (see module doc)."""
    try:
        proto = read_onnx(path, external_data=False)
        if not has_sixteen_bit(proto.graph):
            return None
        sixteen = _sixteen_bit_nodes(proto)
        if not sixteen:
            return None
        by_node, by_value = _provider_graph_types(Path(path), provider)
    except Exception:  # the validation stands; this is only a note
        return None
    dtype = Counter(t for t, _ in sixteen.values()).most_common(1)[0][0]
    in_float32 = sum(
        1 for name, (_, out) in sixteen.items() if by_node.get(name, by_value.get(out)) in _WIDE
    )
    return ProviderPrecision(provider, SIXTEEN_BIT[dtype], len(sixteen), in_float32)


def has_sixteen_bit(graph: onnx.GraphProto) -> bool:
    """A cheap look (no inference) for anything 16-bit: most files have none."""
    typed = [*graph.input, *graph.output, *graph.value_info]
    if any(v.type.tensor_type.elem_type in SIXTEEN_BIT for v in typed):
        return True
    if any(t.data_type in SIXTEEN_BIT for t in graph.initializer):
        return True
    return any(
        n.op_type == "Cast" and any(a.name == "to" and a.i in SIXTEEN_BIT for a in n.attribute)
        for n in graph.node
    )


def _sixteen_bit_nodes(proto: onnx.ModelProto) -> dict[str, tuple[int, str]]:
    """Named compute nodes with a 16-bit output (types inferred) -> (that type, that
    output's name)."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    types = _types(inferred.graph)
    names = Counter(n.name for n in proto.graph.node)
    found: dict[str, tuple[int, str]] = {}
    for node in proto.graph.node:
        if node.op_type in _NOT_COMPUTE or not node.name or names[node.name] > 1:
            continue
        out = next((o for o in node.output if types.get(o) in SIXTEEN_BIT), None)
        if out is not None:
            found[node.name] = (types[out], out)
    return found


def _provider_graph_types(path: Path, provider: str) -> tuple[dict[str, int], dict[str, int]]:
    """Node name, and value name, -> the element type of the node's first typed output
    (of that value) in the graph `provider` ran. A node ONNX Runtime replaced (a function
    it inlined) is found by its output's name."""
    from parity.load.sessions import open_session

    with tempfile.TemporaryDirectory(prefix="parity-precision-") as tmp:
        written = Path(tmp) / "provider_graph.onnx"
        session = open_session(
            path,
            provider=provider,
            opt_level="disable",
            optimized_path=written,
            config=(
                ("session.optimized_model_external_initializers_file_name", "weights.bin"),
                ("session.optimized_model_external_initializers_min_size_in_bytes", "1024"),
            ),
        )
        del session
        graph_proto = read_onnx(written, external_data=False)
    types = _types(onnx.shape_inference.infer_shapes(graph_proto).graph)
    by_node: dict[str, int] = {}
    for node in graph_proto.graph.node:
        out = next((types[o] for o in node.output if types.get(o)), None)
        if node.name and out is not None:
            by_node[node.name] = out
    return by_node, types


def _types(graph: onnx.GraphProto) -> dict[str, int]:
    types = {t.name: t.data_type for t in graph.initializer}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    return types
