"""Values of a quantized file that are integers (or their scales), not a float torch computes.

Dynamic int8 (ONNX Runtime's `quantize_dynamic`, Optimum's `quantize --avx2/--avx512/
--arm64`) rounds a float to uint8 with `DynamicQuantizeLinear` (outputs: the integers, their
scale, their zero point), multiplies integers with `MatMulInteger` / `ConvInteger` (int32
accumulators), casts those to float and only then multiplies by the scales; its quantized
embeddings are `Gather`s of an 8-bit table before a `DequantizeLinear`. None of those values
means what a torch value means (comparing a uint8 with a float gave "diverges" by 251): they
are not comparable, with the reason; the float that goes into the rounding, and the scaled
product that comes out, are compared as usual.

A `DynamicQuantizeLinear` is named after the value it rounds (in that value's module), yet
no module makes it: the quantizer put it there for the op that reads it. It belongs to no
module (`is_inserted_rounding`), so the float it rounds is what crosses the module's boundary
and is compared.

Contract: integer_meanings(nodes) -> {value name: why it is not comparable}
is_inserted_rounding(node) -> bool   a rounding the quantizer inserted (no module's)
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

_DQL = "DynamicQuantizeLinear"
_INTEGER_PRODUCTS = ("MatMulInteger", "ConvInteger")


def is_inserted_rounding(node: onnx.NodeProto) -> bool:
    """A DynamicQuantizeLinear (see module)."""
    return node.op_type == _DQL


def integer_meanings(nodes: Iterable[onnx.NodeProto]) -> dict[str, str]:
    """Value name -> why no torch value stands for it (see module)."""
    listed = list(nodes)
    producers = {o: n for n in listed for o in n.output if o}
    lost: dict[str, str] = {}
    scales: set[str] = set()
    products: set[str] = set()
    for node in listed:
        if node.op_type == _DQL:
            source = node.input[0] if node.input else "?"
            for what, out in zip(
                ("uint8 integers", "scale", "zero point"), node.output, strict=False
            ):
                if out:
                    lost[out] = (
                        f"quantized: the {what} of DynamicQuantizeLinear {node.name!r} (its "
                        f"rounding of {source}), not a float torch computes"
                    )
            scales.update(node.output[1:2])
        elif node.op_type in _INTEGER_PRODUCTS and node.output:
            products.add(node.output[0])
            lost[node.output[0]] = (
                f"quantized: the int32 accumulator of {node.op_type} {node.name!r}, before "
                "its scales, not a float torch computes"
            )
    for node in listed:
        ins = [i for i in node.input if i]
        if not node.output or not ins:
            continue
        if node.op_type == "Cast" and ins[0] in products:
            lost[node.output[0]] = (
                f"quantized: {ins[0]} cast to float before its scales (an integer product), "
                "not a float torch computes"
            )
        elif node.op_type == "Mul" and any(i in scales for i in ins):
            if all(i in scales or i not in producers for i in ins):  # scales and constants
                lost[node.output[0]] = (
                    f"quantized: the product of scales {node.name!r}, not a value torch computes"
                )
        elif node.op_type == "DequantizeLinear":
            maker = producers.get(ins[0])
            if maker is not None and maker.op_type == "Gather":
                lost[ins[0]] = (
                    f"quantized: 8-bit rows of {maker.input[0]} before DequantizeLinear "
                    f"{node.name!r}, not a float torch computes"
                )
    return lost
