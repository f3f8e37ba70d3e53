"""Which quantized nodes to keep in float, measured: each candidate exclusion is simulated in
a copy of the QDQ file and run with ONNX Runtime on the run's inputs, and the one whose
outputs come closest to the reference (highest output SQNR) is suggested, with its gain.

Simulating ``quantize_static(..., nodes_to_exclude=S)`` in the quantized file, by what
onnxruntime's QDQ quantizer does (checked on ORT 1.32 against re-quantizing):

- a tensor keeps its Q/DQ pair while some quantized node that is not in S reads or writes
  it (a Conv quantizes its input, weight and output; an op the quantizer does not handle,
  such as PRelu, quantizes nothing); otherwise its readers read it in float. Excluding only
  the producer of a badly quantized activation does not help: its consumer still quantizes
  it (so adjacent pairs are searched too);
- an excluded node reads its weights and bias in float: the reference's (the float ONNX
  file's initializer, or the torch model's parameter of that name, accepted only where it
  agrees with the dequantized weight within half a quantization step), else the
  dequantized one (the weight's rounding stays; said in the notes);
- where the quantizer folded a ReLU into its producer (the pair's range starts at 0), the
  ReLU is put back when the pair goes (the reference file's own ops when there is one).

Candidates: every quantized Conv / ConvTranspose / MatMul / Gemm alone (the first conv
included), then pairs of adjacent ones (one feeds the other through ops that are neither),
best single gains first, at most MAX_TRIED simulations and MAX_SECONDS in all (the notes
say how many were tried). Checked against re-quantizing, conv by conv, in the tests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
MAX_TRIED = 48  # simulated exclusions per candidate file (each one ONNX Runtime session)
MAX_SECONDS = 300.0  # and no more started after this long
MIN_GAIN_DB = 0.5  # a smaller gain is noise: nothing is suggested (nor a second node)
_REMOVABLE = frozenset({"Relu", "Clip"})  # quantized only when their input is (ORT's rule)
_FALLBACK_OPS = frozenset(  # ops onnxruntime's quantizer handles, if its registry is absent
    {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul", "Relu", "Clip", "LeakyRelu",
     "Sigmoid", "MaxPool", "AveragePool", "GlobalAveragePool", "Concat", "Reshape", "Resize",
     "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Split", "Gather", "Softmax", "Pad",
     "Slice", "Where", "ArgMax", "LayerNormalization", "InstanceNormalization",
     "BatchNormalization", "Tanh", "Sqrt", "Pow", "ReduceMean", "Erf", "Gelu"}
)  # fmt: skip


@dataclass(frozen=True)
class Tried:
    """One simulated exclusion: the node names, and the outputs' SQNR (dB) it gave."""

    nodes: tuple[str, ...]
    sqnr_db: float | None


@dataclass(frozen=True)
class Search:
    """The simulated exclusions and the best one (None: none gains MIN_GAIN_DB)."""

    before: float | None
    tried: tuple[Tried, ...]
    possible: int  # candidates there were (singles and adjacent pairs)
    best: Tried | None
    notes: tuple[str, ...]

    def findings(self) -> dict[str, Any]:
        """`exclude_from_quantization` and `exclusion_check` (JSON) for the layers result."""
        from parity.files.json_output import finite_or_none

        found: dict[str, Any] = {}
        if not self.possible:
            return found
        if self.best is not None:
            found["exclude_from_quantization"] = list(self.best.nodes)
        best = self.best
        found["exclusion_check"] = {
            "sqnr_db_before": finite_or_none(self.before),
            "sqnr_db_after": finite_or_none(best.sqnr_db) if best else None,
            "gain_db": finite_or_none(_gain(self.before, best.sqnr_db)) if best else None,
            "bypassed": list(best.nodes) if best else [],
            "method": "simulated in the quantized file, run with ONNX Runtime on the run's "
            "inputs; not re-calibrated",
            "tried": len(self.tried),
            "candidates": self.possible,
            "results": [
                {"nodes": list(t.nodes), "sqnr_db": finite_or_none(t.sqnr_db)}
                for t in sorted(self.tried, key=lambda t: -(t.sqnr_db or -math.inf))[:10]
            ],
        }
        return found


FloatWeights = Callable[[Sequence[str], np.ndarray, float], np.ndarray | None]
"""(names the weight may have, its dequantized value, half a quantization step) -> the
float weight, or None."""


def search_exclusions(
    candidate: onnx.ModelProto,
    *,
    provider: str,
    feeds: Sequence[Mapping[str, np.ndarray]],
    references: Sequence[Mapping[str, np.ndarray]],
    float_weights: FloatWeights,
    reference_graph: onnx.GraphProto | None = None,
    max_tried: int = MAX_TRIED,
    max_seconds: float = MAX_SECONDS,
) -> Search:
    """Simulate excluding each quantized compute node, then adjacent pairs, and keep the
    exclusion with the best outputs' SQNR against `references` (one mapping of output name
    -> array per input set, the reference's outputs on `feeds`)."""
    nodes = quantized_compute_nodes(candidate.graph)
    if not nodes:
        note = (
            "no exclusion searched: no Conv, ConvTranspose, MatMul or Gemm reads a "
            "dequantized value (not a QDQ file)"
        )
        return Search(None, (), 0, None, (note,))
    names = [o.name for o in candidate.graph.output]
    measure = OutputsSqnr(provider, feeds, references, names)
    start = time.perf_counter()
    before = measure(candidate)
    pairs = adjacent_pairs(candidate.graph, nodes)
    possible = len(nodes) + len(pairs)
    notes: list[str] = []
    simulator = _Simulator(candidate, float_weights, reference_graph)
    tried: list[Tried] = []

    def more() -> bool:
        return len(tried) < max_tried and time.perf_counter() - start < max_seconds

    for name in nodes:
        if not more():
            break
        tried.append(Tried((name,), measure(simulator.excluding({name}))))
    gain = {t.nodes[0]: t.sqnr_db if t.sqnr_db is not None else -math.inf for t in tried}
    ranked = sorted(
        (p for p in pairs if p[0] in gain and p[1] in gain),
        key=lambda p: -(gain[p[0]] + gain[p[1]]),
    )
    for a, b in ranked:
        if not more():
            break
        tried.append(Tried((a, b), measure(simulator.excluding({a, b}))))
    if len(tried) < possible:
        notes.append(
            f"{len(tried)} of {possible} candidate exclusions simulated (at most {max_tried} "
            f"and {max_seconds:.0f} s: every quantized node alone first, in graph order, then "
            "adjacent pairs, best single gains first)"
        )
    notes.extend(simulator.notes())
    scored = [t for t in tried if t.sqnr_db is not None]
    best = max(scored, key=lambda t: (t.sqnr_db, -len(t.nodes)), default=None)
    if best is not None and len(best.nodes) > 1:  # fewer nodes in float at about the same SQNR
        alone = [t for t in scored if len(t.nodes) == 1 and t.nodes[0] in best.nodes]
        near = [t for t in alone if t.sqnr_db >= best.sqnr_db - MIN_GAIN_DB]  # type: ignore[operator]
        best = max(near, key=lambda t: t.sqnr_db, default=best)  # type: ignore[arg-type, return-value]
    if (
        best is not None
        and best.sqnr_db is not None
        and before is not None
        and best.sqnr_db - before < MIN_GAIN_DB
    ):
        best = None
    return Search(before, tuple(tried), possible, best, tuple(notes))


def _gain(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def quantized_compute_nodes(graph: onnx.GraphProto) -> list[str]:
    """Conv / ConvTranspose / MatMul / Gemm nodes that read a dequantized value, in graph
    order (the first conv included)."""
    dq_outputs = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return [
        n.name
        for n in graph.node
        if n.op_type in COMPUTE_OPS and n.name and any(i in dq_outputs for i in n.input)
    ]


def adjacent_pairs(graph: onnx.GraphProto, nodes: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b): compute node a's output reaches compute node b through other ops only."""
    wanted = set(nodes)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    by_name = {n.name: n for n in graph.node}
    pairs: list[tuple[str, str]] = []
    for a in nodes:
        seen: set[str] = set()
        frontier = list(by_name[a].output)
        for _ in range(16):  # ops between two compute nodes (Q/DQ, activations, pools)
            following: list[str] = []
            for value in frontier:
                for reader in readers.get(value, ()):
                    key = reader.name or id(reader)
                    if key in seen:
                        continue
                    seen.add(key)  # type: ignore[arg-type]
                    if reader.name in wanted:
                        if reader.name != a and (a, reader.name) not in pairs:
                            pairs.append((a, reader.name))
                    elif reader.op_type not in COMPUTE_OPS:
                        following.extend(reader.output)
            frontier = following
            if not frontier:
                break
    return pairs


class OutputsSqnr:
    """The outputs' SQNR (dB, over every input set and output) of the candidate or of a
    copy of it, against the reference's outputs on the same feeds."""

    def __init__(
        self,
        provider: str,
        feeds: Sequence[Mapping[str, np.ndarray]],
        references: Sequence[Mapping[str, np.ndarray]],
        names: list[str],
    ) -> None:
        self.provider = provider
        self.feeds = [{k: np.ascontiguousarray(a) for k, a in f.items()} for f in feeds]
        self.references = references
        self.names = names

    def __call__(self, model: onnx.ModelProto | None) -> float | None:
        """A copy's SQNR; None when it cannot be built or run."""
        if model is None:
            return None
        try:
            return self.of_model(model)
        except Exception:
            return None

    def of_model(self, model: onnx.ModelProto) -> float | None:
        from parity.load.sessions import open_session

        return self.of_session(open_session(model.SerializeToString(), provider=self.provider))

    def of_session(self, session: Any) -> float | None:
        signal = noise = 0.0
        for feeds, ref in zip(self.feeds, self.references, strict=True):
            got = session.run(self.names, feeds)
            for name, o in zip(self.names, got, strict=True):
                r = ref.get(name)
                if r is None or np.shape(r) != np.shape(o):
                    continue
                r64, o64 = np.asarray(r, np.float64), np.asarray(o, np.float64)
                ok = np.isfinite(r64) & np.isfinite(o64)
                signal += float(np.square(r64[ok]).sum())
                noise += float(np.square(o64[ok] - r64[ok]).sum())
        if signal <= 0:
            return None
        return math.inf if noise <= 0 else 10.0 * math.log10(signal / noise)


def _quantizing_ops() -> frozenset[str]:
    try:
        from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

        return frozenset(QDQRegistry) | frozenset(QLinearOpsRegistry)
    except Exception:  # an onnxruntime without its quantization package
        return _FALLBACK_OPS


_QMIN = {
    onnx.TensorProto.INT8: -128,
    onnx.TensorProto.UINT8: 0,
    onnx.TensorProto.INT16: -32768,
    onnx.TensorProto.UINT16: 0,
    onnx.TensorProto.INT4: -8,
    onnx.TensorProto.UINT4: 0,
}


class _Simulator:
    """Copies of the candidate with a set of nodes taken out of quantization."""

    def __init__(
        self,
        candidate: onnx.ModelProto,
        float_weights: FloatWeights,
        reference_graph: onnx.GraphProto | None,
    ) -> None:
        self.model = candidate
        graph = candidate.graph
        self.float_weights = float_weights
        self.reference_graph = reference_graph
        self.ops = _quantizing_ops()
        self.inits = {t.name: t for t in graph.initializer}
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for n in graph.node:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in graph.output}
        self.dequantized_weights: set[str] = set()  # no float weight found: rounding stays
        self.float_found: set[str] = set()
        self.relus_assumed = 0
        self._float: dict[str, np.ndarray | None] = {}

    def notes(self) -> list[str]:
        notes = []
        if self.dequantized_weights:
            names = sorted(self.dequantized_weights)
            notes.append(
                f"{len(names)} weight(s) of simulated excluded nodes have no float original "
                f"in the reference (e.g. {names[0]!r}): their dequantized values were used, "
                "so those exclusions keep the weights' rounding"
            )
        if self.relus_assumed:
            notes.append(
                "where a removed pair's range started at 0 with no float reference file to "
                "tell, a ReLU folded into its producer was assumed and put back"
            )
        return notes

    # --- what stays quantized --------------------------------------------------------

    def _quantizing(self, node: onnx.NodeProto | None, excluded: set[str]) -> bool:
        if node is None or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            return False
        if node.name in excluded or node.op_type not in self.ops:
            return False
        if node.op_type in _REMOVABLE:  # quantized only when its input is (producer's doing)
            up = self.producer.get(self._float_of(node.input[0])) if node.input else None
            return self._quantizing(up, excluded)
        return True

    def _float_of(self, value: str) -> str:
        """The float tensor behind a dequantized value (itself otherwise)."""
        dq = self.producer.get(value)
        if dq is not None and dq.op_type == "DequantizeLinear" and dq.input:
            q = self.producer.get(dq.input[0])
            if q is not None and q.op_type == "QuantizeLinear" and q.input:
                return q.input[0]
        return value

    def excluding(self, excluded: set[str]) -> onnx.ModelProto | None:
        """A copy of the candidate as quantize_static would make it with `excluded` kept
        in float (None: the copy cannot be built)."""
        try:
            return self._excluding(excluded)
        except Exception:
            return None

    def _excluding(self, excluded: set[str]) -> onnx.ModelProto:
        graph = self.model.graph
        rename: dict[tuple[int, int], str] = {}  # (node index, input index) -> new input
        drop: set[int] = set()
        extra: list[onnx.NodeProto] = []
        new_inits: dict[str, onnx.TensorProto] = {}
        index = {id(n): k for k, n in enumerate(graph.node)}
        for q in graph.node:
            if q.op_type != "QuantizeLinear" or not q.input or q.input[0] in self.inits:
                continue
            tensor = q.input[0]
            dqs = [n for n in self.readers.get(q.output[0], ()) if n.op_type == "DequantizeLinear"]
            if len(dqs) != len(self.readers.get(q.output[0], ())):
                continue  # a Q read by something else: leave it
            touching = [self.producer.get(tensor)] + [
                r for dq in dqs for r in self.readers.get(dq.output[0], ())
            ]
            if any(self._quantizing(n, excluded) for n in touching):
                continue
            source = self._unfolded(tensor, q, extra, new_inits)
            drop.add(index[id(q)])
            for dq in dqs:
                drop.add(index[id(dq)])
                for reader in self.readers.get(dq.output[0], ()):
                    for k, i in enumerate(reader.input):
                        if i == dq.output[0]:
                            rename[(index[id(reader)], k)] = source
                if dq.output[0] in self.outputs:
                    extra.append(helper.make_node("Identity", [source], [dq.output[0]]))
        for node in graph.node:
            if node.name not in excluded:
                continue
            for k, value in enumerate(node.input):
                weight = self._float_weight(value, new_inits)
                if weight is not None:
                    rename[(index[id(node)], k)] = weight
        copy = onnx.ModelProto()
        copy.CopyFrom(self.model)
        nodes = []
        for k, node in enumerate(copy.graph.node):
            if k in drop:
                continue
            for j in range(len(node.input)):
                if (k, j) in rename:
                    node.input[j] = rename[(k, j)]
            nodes.append(node)
        del copy.graph.node[:]
        copy.graph.node.extend(nodes + extra)
        copy.graph.initializer.extend(new_inits.values())
        from parity.load.onnx_model import topological_nodes

        ordered = topological_nodes(copy.graph)
        if ordered is None:
            raise ValueError("the simulated exclusion leaves an unsortable graph")
        del copy.graph.node[:]
        copy.graph.node.extend(ordered)
        return copy

    def _unfolded(
        self,
        tensor: str,
        q: onnx.NodeProto,
        extra: list[onnx.NodeProto],
        new_inits: dict[str, onnx.TensorProto],
    ) -> str:
        """The float value readers get once `tensor`'s pair is gone: `tensor` itself, or,
        where the quantizer folded an activation into its producer, that activation put
        back on the producer's output."""
        producer = self.producer.get(tensor)
        if producer is None or producer.op_type not in COMPUTE_OPS or len(q.input) < 3:
            return tensor
        if self.reference_graph is not None:
            chain = _folded_chain(self.reference_graph, tensor, producer.name)
            if chain is None:
                return tensor
            start = f"{tensor}_parity_unfolded"
            ref_inits = {t.name: t for t in self.reference_graph.initializer}
            value = start
            for k, node in enumerate(chain):
                copy = onnx.NodeProto()
                copy.CopyFrom(node)
                copy.name = f"{node.name}_parity_unfolded"
                copy.input[0] = value
                for i in copy.input[1:]:
                    if i in ref_inits and i not in self.inits and i not in new_inits:
                        new_inits[i] = ref_inits[i]
                value = f"{tensor}_parity_unfolded_{k}"
                copy.output[0] = value
                extra.append(copy)
            extra.append(helper.make_node("Identity", [tensor], [start]))
            return value
        zp = self.inits.get(q.input[2])
        if zp is None or zp.data_type not in _QMIN:
            return tensor
        if int(numpy_helper.to_array(zp).ravel()[0]) != _QMIN[zp.data_type]:
            return tensor
        self.relus_assumed += 1
        out = f"{tensor}_parity_relu"
        extra.append(helper.make_node("Relu", [tensor], [out], name=f"{tensor}_parity_relu"))
        return out

    def _float_weight(self, value: str, new_inits: dict[str, onnx.TensorProto]) -> str | None:
        """The name of `value`'s float weight (added to `new_inits`) when `value` is a
        dequantized initializer; None when it is not a weight."""
        dq = self.producer.get(value)
        if dq is None or dq.op_type != "DequantizeLinear" or not dq.input:
            return None
        source = dq.input[0]
        q = self.producer.get(source)
        if q is not None and q.op_type == "QuantizeLinear" and q.input:
            return q.input[0] if q.input[0] in self.inits else None  # Q on a float weight
        if source not in self.inits:
            return None  # an activation's pair
        name = f"{value}_parity_float"
        if name in new_inits:
            return name
        array = self._float_array(value, dq)
        if array is None:
            return None
        new_inits[name] = numpy_helper.from_array(array, name)
        return name

    def _float_array(self, value: str, dq: onnx.NodeProto) -> np.ndarray | None:
        if value in self._float:
            return self._float[value]
        dequantized, half_step = _dequantize(dq, self.inits)
        from parity.layers.onnx_vs_onnx import DQ_SUFFIX

        names = list(dict.fromkeys([value.removesuffix(DQ_SUFFIX), dq.input[0].removesuffix(
            "_quantized"), value]))  # fmt: skip
        found = self.float_weights(names, dequantized, half_step)
        if found is None:
            self.dequantized_weights.add(names[0])
            found = dequantized
        else:
            self.float_found.add(names[0])
        self._float[value] = found
        return found


def _dequantize(
    dq: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto]
) -> tuple[np.ndarray, float]:
    """A DequantizeLinear of initializers, in numpy (per-tensor or per-axis): the value and
    half its largest quantization step."""
    q = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float64)
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
    zp = (
        numpy_helper.to_array(inits[dq.input[2]]).astype(np.float64)
        if len(dq.input) > 2 and dq.input[2]
        else np.zeros_like(scale)
    )
    if scale.ndim == 1 and scale.size > 1 and q.ndim > 1:
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    out_type = helper.tensor_dtype_to_np_dtype(
        inits[dq.input[1]].data_type
    )  # the scale's type is the output's
    return ((q - zp) * scale).astype(out_type), float(np.max(scale)) / 2


def _folded_chain(
    ref_graph: onnx.GraphProto, tensor: str, producer: str
) -> list[onnx.NodeProto] | None:
    """In the reference: the nodes between node `producer`'s output and `tensor` (the
    activation a quantizer folded), or None."""
    made = {o: n for n in ref_graph.node for o in n.output if o}
    chain: list[onnx.NodeProto] = []
    value = tensor
    for _ in range(3):
        node = made.get(value)
        if node is None or not node.input:
            return None
        if node.name == producer:
            return chain or None
        chain.insert(0, node)
        value = node.input[0]
    return None


def reference_weights(arrays: Callable[[str], np.ndarray | None]) -> FloatWeights:
    """A FloatWeights reading the reference's arrays by name (`arrays`: name -> array or
    None), each accepted only where it agrees with the dequantized weight (or its
    transpose) within half a quantization step, plus float32 rounding."""

    def find(names: Sequence[str], dequantized: np.ndarray, half_step: float) -> np.ndarray | None:
        for name in names:
            array = arrays(name)
            if array is None:
                continue
            array = np.asarray(array)
            for candidate in (array, array.T if array.ndim == 2 else None):
                if candidate is None or candidate.shape != dequantized.shape:
                    continue
                diff = np.abs(candidate.astype(np.float64) - dequantized.astype(np.float64))
                limit = half_step * 1.01 + 1e-6 * float(np.max(np.abs(dequantized), initial=0))
                if float(np.max(diff, initial=0.0)) <= limit:
                    return np.ascontiguousarray(candidate.astype(dequantized.dtype))
        return None

    return find


def without_activation_rounding(candidate: onnx.ModelProto) -> onnx.ModelProto | None:
    """The QDQ file with every activation's Q/DQ pair taken out (a ReLU the quantizer folded
    put back) and its weights in their dequantized values: the file's own graph computing in
    float (parity.load.static_quant's float twin); None where it cannot be built."""
    simulator = _Simulator(candidate, lambda _names, _value, _half: None, None)
    return simulator.excluding({n.name for n in candidate.graph.node})
