"""A 16-bit file's float32 twin: the same graph and the same weights, computed in float32.

float16 and bfloat16 values widen to float32 exactly, so the twin holds the file's own
weights bit for bit; only the arithmetic between them is wider. The file against its twin
is then its 16-bit arithmetic alone, as ONNX Runtime computes it on this provider (on the
CPU most fused float16 nodes compute in float32 inside: torch rounding every op's output
to float16 overstates what such a file rounds), and the twin against torch run with the
file's own weights is the export alone (parity.analyses.approximation). Every 16-bit
initializer, Constant, Cast target, `dtype` attribute and declared type is widened,
subgraphs included.

Contract:
float32_twin(proto) -> ModelProto   (`proto` widened in place, and returned)
sixteen_bit_weights(proto) -> "float16" | "bfloat16" | ""   (every float weight 16-bit)
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, numpy_helper

SIXTEEN = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}
TYPE_ATTRIBUTES = ("to", "dtype", "output_dtype")  # attributes that name an element type


def float32_twin(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` itself with every 16-bit type and tensor widened to float32 (in place: a
    large file's weights are not held twice)."""
    _widen_graph(proto.graph)
    return proto


def sixteen_bit_weights(proto: onnx.ModelProto) -> str:
    """The file's 16-bit type where every float weight of more than one element is 16-bit
    (a float16 converter's file), else "" (a float32 file, or one that kept some weights in
    float32: torch cannot be given "the file's weights" by rounding them all)."""
    kinds = set()
    for tensor in proto.graph.initializer:
        count = 1
        for d in tensor.dims:
            count *= d
        if count > 1 and tensor.data_type in (TensorProto.FLOAT, *SIXTEEN):
            kinds.add(tensor.data_type)
    if len(kinds) == 1 and (kind := kinds.pop()) in SIXTEEN:
        return SIXTEEN[kind]
    return ""


def _widen_graph(graph: onnx.GraphProto) -> None:
    for k, tensor in enumerate(graph.initializer):
        if tensor.data_type in SIXTEEN:
            graph.initializer[k].CopyFrom(_widened(tensor))
    for value in [*graph.input, *graph.output, *graph.value_info]:
        t = value.type.tensor_type
        if t.elem_type in SIXTEEN:
            t.elem_type = TensorProto.FLOAT
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.name in TYPE_ATTRIBUTES and attribute.i in SIXTEEN:
                attribute.i = TensorProto.FLOAT
            if attribute.HasField("t") and attribute.t.data_type in SIXTEEN:
                attribute.t.CopyFrom(_widened(attribute.t))
            for tensor in attribute.tensors:
                if tensor.data_type in SIXTEEN:
                    tensor.CopyFrom(_widened(tensor))
            if attribute.HasField("g"):
                _widen_graph(attribute.g)
            for sub in attribute.graphs:
                _widen_graph(sub)


def _widened(tensor: onnx.TensorProto) -> onnx.TensorProto:
    array = numpy_helper.to_array(tensor).astype("float32")
    return numpy_helper.from_array(array, tensor.name)
