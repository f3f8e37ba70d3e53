"""The calibrated range of a quantized file's graph inputs: what its first `QuantizeLinear`
keeps. A QDQ quantizer puts a QuantizeLinear on each graph input it quantizes, with the scale
and zero point calibration chose; the values it can represent are
[(qmin - zero_point) * scale, (qmax - zero_point) * scale] (qmin, qmax: the zero point's
integer type). Anything outside is clipped, so inputs generated for such a file stay inside,
and given inputs outside are counted (parity.run.inputs).

Contract:
Calibrated (parity.signature): name, low, high, scale, zero_point
input_ranges(proto) -> tuple[Calibrated, ...]   graph inputs read by a QuantizeLinear
merged(*groups) -> tuple[Calibrated, ...]       one range per input: the narrowest
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from parity.signature import Calibrated

_INT_TYPES = {  # ONNX element type of the zero point -> (qmin, qmax)
    onnx.TensorProto.INT8: (-128, 127),
    onnx.TensorProto.UINT8: (0, 255),
    onnx.TensorProto.INT16: (-32768, 32767),
    onnx.TensorProto.UINT16: (0, 65535),
    onnx.TensorProto.INT4: (-8, 7),
    onnx.TensorProto.UINT4: (0, 15),
}


def input_ranges(proto: onnx.ModelProto) -> tuple[Calibrated, ...]:
    """Each graph input that a QuantizeLinear reads directly, with the range it keeps (a
    per-axis quantizer: the range every channel keeps). Scales or zero points that are not
    constants in the file (external data, computed) leave that input out."""
    graph = proto.graph
    inputs = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    consts = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                consts[node.output[0]] = value
    found: dict[str, Calibrated] = {}
    for node in graph.node:
        if node.op_type != "QuantizeLinear" or not node.input or node.input[0] not in inputs:
            continue
        calibrated = _range(node, consts)
        if calibrated is not None:
            found[node.input[0]] = _narrowest(found.get(node.input[0]), calibrated)
    return tuple(found.values())


def _range(node: onnx.NodeProto, consts: dict[str, onnx.TensorProto]) -> Calibrated | None:
    name = node.input[0]
    scale_t = consts.get(node.input[1]) if len(node.input) > 1 else None
    zp_t = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if scale_t is None or scale_t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    if zp_t is not None and zp_t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    elem = zp_t.data_type if zp_t is not None else onnx.TensorProto.UINT8  # the default
    if elem not in _INT_TYPES:
        return None  # a float8 quantizer: no integer range to state
    try:
        scale = np.asarray(numpy_helper.to_array(scale_t), np.float64).ravel()
        zp = (
            np.asarray(numpy_helper.to_array(zp_t), np.float64).ravel()
            if zp_t is not None
            else np.zeros(1)
        )
    except Exception:
        return None
    if scale.size == 0 or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return None
    qmin, qmax = _INT_TYPES[elem]
    lows, highs = (qmin - zp) * scale, (qmax - zp) * scale
    low, high = float(np.max(lows)), float(np.min(highs))
    if not low < high:
        return None
    return Calibrated(name, low, high, float(scale.max()), int(zp.ravel()[0]))


def _narrowest(a: Calibrated | None, b: Calibrated) -> Calibrated:
    if a is None:
        return b
    low, high = max(a.low, b.low), min(a.high, b.high)
    if not low < high:  # disjoint ranges: keep the first file's
        return a
    scale = a if (a.high - a.low) <= (b.high - b.low) else b
    return Calibrated(a.name, low, high, scale.scale, scale.zero_point)


def merged(groups: Iterable[Iterable[Calibrated]]) -> tuple[Calibrated, ...]:
    """One range per input over several files (candidates): the narrowest, so that no
    file's QuantizeLinear clips a generated value."""
    found: dict[str, Calibrated] = {}
    for group in groups:
        for c in group:
            found[c.name] = _narrowest(found.get(c.name), c)
    return tuple(found.values())
