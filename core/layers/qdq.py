"""A QDQ-quantized candidate: which tensor's quantization loses the most, what to exclude,
and that exclusion checked without re-calibrating.

For each quantized tensor NAME (the candidate has NAME, NAME_QuantizeLinear_Output and
NAME_DequantizeLinear_Output) the comparison records, against the reference's float NAME,
the SQNR before and after its Q/DQ pair (parity.layers.precision.Quantized). The pair's own
loss is what it takes away from what flowed into it: SQNR before minus SQNR after, where the
candidate's producer of NAME is the reference's; where the quantizer folded an activation
into the producer (Conv+Relu: the candidate's Conv writes NAME, the reference's Relu does),
the value before the pair is not the reference's computation, and what flowed in is the
worst SQNR after the pairs feeding that producer.

The tensor losing the most is named as the first divergence (not the next op's output, where
the loss shows). Excluding only its producer does not help (its consumer still quantizes
it): the suggestion is its producer (and the op folded into it) and its consumers, the node
names for ``quantize_static(..., nodes_to_exclude=...)``. It is checked by bypassing the
tensor's pair in a copy of the candidate (the folded op put back in float) and comparing the
output SQNR over every input set before and after.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx

from parity.files.json_output import finite_or_none
from parity.layers.onnx_side import DQ_SUFFIX, Q_SUFFIX
from parity.layers.result import LayersResult


@dataclass(frozen=True)
class Quantized:
    """One quantized tensor on one input set: SQNR (dB) against the reference's float value
    before and after its Q/DQ pair, and of the pair alone (after against before)."""

    tensor: str
    input_set: int
    sqnr_db_before: float | None
    sqnr_db_after: float | None
    sqnr_db_pair: float | None


_CHAIN = 3  # ops a quantizer can fold into a producer (Relu, Clip, ...), walked back at most


def qdq_findings(
    result: LayersResult,
    reference: Any,
    candidate: Any,
    input_sets: Sequence[Any],
    quantized: list[Quantized],
) -> LayersResult:
    ref_proto = onnx.load(str(reference.path), load_external_data=False)
    cand_proto = onnx.load(str(candidate.path))
    ref_nodes = _producers(ref_proto.graph)
    cand_nodes = _producers(cand_proto.graph)
    tensors = list(dict.fromkeys(q.tensor for q in quantized))
    notes = list(result.notes)
    if len(tensors) > MAX_BYPASSED:
        notes.append(
            f"{len(tensors)} quantized tensors: only the first {MAX_BYPASSED} (graph order) "
            "were bypassed one at a time to measure their loss"
        )
    outputs = _Outputs(reference, candidate, ref_proto, input_sets)
    gains: dict[str, float | None] = {}
    why: dict[str, str] = {}
    for tensor in tensors[:MAX_BYPASSED]:
        try:
            exclude = _exclusions(tensor, ref_proto.graph, ref_nodes, cand_nodes)
            gains[tensor] = outputs.bypassed(float_island(cand_proto, ref_proto, tensor, exclude))
        except Exception as exc:  # this tensor's loss stays unmeasured; say why
            from parity.errors import describe_error

            gains[tensor], why[tensor] = None, describe_error(exc)[1]
    base = outputs.sqnr_before
    rows = [
        {
            "tensor": q.tensor,
            "input_set": q.input_set,
            "sqnr_db_before": finite_or_none(q.sqnr_db_before),
            "sqnr_db_after": finite_or_none(q.sqnr_db_after),
            "output_sqnr_db_bypassed": finite_or_none(gains.get(q.tensor)),
        }
        for q in quantized
    ]
    findings: dict[str, Any] = {"quantized": rows}
    if why:
        notes.append(
            f"{len(why)} quantized tensors' pairs could not be bypassed (e.g. "
            f"{next(iter(why))!r}: {next(iter(why.values()))})"
        )
    scored = [(g, t) for t, g in gains.items() if g is not None]
    if not scored or base is None:
        notes.append("no quantized tensor's loss could be measured")
        return replace(result, findings=findings, notes=tuple(notes))
    after, tensor = max(scored)
    exclude = _exclusions(tensor, ref_proto.graph, ref_nodes, cand_nodes)
    findings["exclude_from_quantization"] = exclude
    findings["exclusion_check"] = {
        "sqnr_db_before": finite_or_none(base),
        "sqnr_db_after": finite_or_none(after),
        "bypassed": exclude,
    }
    s = min(
        (q.input_set for q in quantized if q.tensor == tensor),
        key=lambda k: next(
            q.sqnr_db_after or math.inf
            for q in quantized
            if q.tensor == tensor and q.input_set == k
        ),
    )
    first = next(
        (v for v in result.values if v.onnx_value == tensor and v.input_set == s),
        result.first_divergence,
    )
    notes += [
        f"quantized file: the first divergence is the tensor whose Q/DQ pair loses the most "
        f"({tensor!r}: with its producer and consumers in float the outputs' SQNR goes from "
        f"{_db(base)} to {_db(after)}), not the next op's output where the loss shows; "
        "values are compared "
        "after their Q/DQ pair, quantized[] has each pair's SQNR before and after",
        f"suggested: quantize_static(..., nodes_to_exclude={exclude!r}) (its producer and "
        "consumers: excluding only the producer leaves the consumer quantizing it); checked "
        "without re-calibrating, in a copy of the candidate whose Q/DQ pairs around those "
        "nodes are bypassed (their weights and inputs read in float from the reference)",
    ]
    return replace(result, findings=findings, notes=tuple(notes), first_divergence=first)


MAX_BYPASSED = 48  # quantized tensors whose pair is bypassed one at a time


class _Outputs:
    """The reference's outputs on every input set (run once), and the outputs' SQNR of the
    candidate and of copies of it, over every input set and output."""

    def __init__(
        self, reference: Any, candidate: Any, ref_proto: onnx.ModelProto, input_sets: Any
    ) -> None:
        from parity.run.candidates import fit_signature

        fit = fit_signature(reference.signature, candidate.signature)
        self.names = [o.name for o in ref_proto.graph.output]
        self.provider = candidate.provider
        self.feeds = [
            {k: np.ascontiguousarray(a) for k, a in fit.feeds(s).feeds.items()} for s in input_sets
        ]
        self.ref = [
            reference.session.run(
                self.names, {k: np.ascontiguousarray(a) for k, a in s.feeds.items()}
            )
            for s in input_sets
        ]
        self.sqnr_before = self._sqnr(candidate.session)

    def bypassed(self, model: onnx.ModelProto) -> float | None:
        from parity.load.sessions import open_session

        session = open_session(model.SerializeToString(), provider=self.provider)
        return self._sqnr(session)

    def _sqnr(self, session: Any) -> float | None:
        signal = noise = 0.0
        for feeds, ref in zip(self.feeds, self.ref, strict=True):
            got = session.run(self.names, feeds)
            for r, o in zip(ref, got, strict=True):
                r64, o64 = np.asarray(r, np.float64), np.asarray(o, np.float64)
                if r64.shape != o64.shape:
                    continue
                ok = np.isfinite(r64) & np.isfinite(o64)
                signal += float(np.square(r64[ok]).sum())
                noise += float(np.square(o64[ok] - r64[ok]).sum())
        return _ratio(signal, noise)


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} dB"


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output if out}


def _exclusions(
    tensor: str,
    ref_graph: onnx.GraphProto,
    ref_nodes: dict[str, onnx.NodeProto],
    cand_nodes: dict[str, onnx.NodeProto],
) -> list[str]:
    """The reference's node names: the tensor's producer, the op(s) folded into it, its
    consumers (each a node of the float file quantize_static reads)."""
    names: dict[str, None] = {}
    cand_p = cand_nodes.get(tensor)
    if cand_p is not None and cand_p.name:
        names[cand_p.name] = None
    ref_p = ref_nodes.get(tensor)
    if ref_p is not None and ref_p.name:
        names[ref_p.name] = None
    for node in ref_graph.node:
        if tensor in node.input and node.name:
            names[node.name] = None
    return list(names)


def bypass_pair(cand: onnx.ModelProto, ref: onnx.ModelProto, tensor: str) -> onnx.ModelProto:
    """A copy of `cand` whose readers of NAME_DequantizeLinear_Output read NAME in float;
    where the quantizer folded an activation into NAME's producer, the reference's op(s)
    between that producer's own output and NAME are put back (in float)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(cand)
    graph = copy.graph
    dq, q = tensor + DQ_SUFFIX, tensor + Q_SUFFIX
    producers = _producers(graph)
    ref_producers = _producers(ref.graph)
    cand_p, ref_p = producers.get(tensor), ref_producers.get(tensor)
    extra: list[onnx.NodeProto] = []
    if cand_p is not None and ref_p is not None and cand_p.name != ref_p.name:
        chain = _chain(ref_producers, tensor, cand_p.name)
        if chain is None:
            raise ValueError(
                f"cannot tell which ops were folded into {cand_p.name!r} for {tensor!r}"
            )
        start, nodes = chain
        for k, out in enumerate(cand_p.output):
            if out == tensor:
                cand_p.output[k] = start
        have = {t.name for t in graph.initializer}
        ref_inits = {t.name: t for t in ref.graph.initializer}
        for node in nodes:
            for i in node.input:
                if i in ref_inits and i not in have:
                    graph.initializer.append(ref_inits[i])
                    have.add(i)
            extra.append(node)
    kept = [n for n in graph.node if not (set(n.output) & {dq, q})]
    for node in kept:
        for k, i in enumerate(node.input):
            if i == dq:
                node.input[k] = tensor
    if any(out.name == dq for out in graph.output):
        raise ValueError(f"{tensor!r} is a graph output's pair: nothing to bypass")
    del graph.node[:]
    graph.node.extend(kept)
    graph.node.extend(extra)
    from parity.load.onnx_model import topological_nodes

    ordered = topological_nodes(graph)
    if ordered is None:
        raise ValueError(f"bypassing the pair on {tensor!r} leaves an unsortable graph")
    del graph.node[:]
    graph.node.extend(ordered)
    return copy


def _chain(
    ref_producers: dict[str, onnx.NodeProto], tensor: str, producer: str
) -> tuple[str, list[onnx.NodeProto]] | None:
    """In the reference: (the output of node `producer`, the nodes from it to `tensor`)."""
    nodes: list[onnx.NodeProto] = []
    value = tensor
    for _ in range(_CHAIN):
        node = ref_producers.get(value)
        if node is None or not node.input:
            return None
        nodes.insert(0, node)
        value = node.input[0]
        up = ref_producers.get(value)
        if up is not None and up.name == producer:
            return value, [_copy(n) for n in nodes]
    return None


def float_island(
    cand: onnx.ModelProto, ref: onnx.ModelProto, tensor: str, exclude: Sequence[str]
) -> onnx.ModelProto:
    """What ``nodes_to_exclude=exclude`` would make, without re-calibrating: a copy of
    `cand` where `tensor`'s pair is bypassed (bypass_pair: its producer and consumers are
    all excluded) and every excluded node reads its weights and biases in float (the
    reference's initializers). Activations other nodes make stay quantized, as
    quantize_static keeps them (and the value before a pair is not the reference's where
    an activation was folded into the pair)."""
    copy = bypass_pair(cand, ref, tensor)
    graph = copy.graph
    producers = _producers(graph)
    ref_inits = {t.name: t for t in ref.graph.initializer}
    have = {t.name for t in graph.initializer}
    wanted = set(exclude)
    for node in graph.node:
        if node.name not in wanted:
            continue
        for k, name in enumerate(node.input):
            dq = producers.get(name)
            if dq is None or dq.op_type != "DequantizeLinear" or not dq.input:
                continue
            q = producers.get(dq.input[0])
            if q is not None and q.op_type == "QuantizeLinear":
                continue  # an activation another (quantized) node makes: still quantized
            original = name.removesuffix(DQ_SUFFIX)
            if original in ref_inits:  # a quantized weight or bias: the float one
                float_name = f"{original}_parity_float"
                if float_name not in have:
                    init = onnx.TensorProto()
                    init.CopyFrom(ref_inits[original])
                    init.name = float_name
                    graph.initializer.append(init)
                    have.add(float_name)
                node.input[k] = float_name
    return copy


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _ratio(signal: float, noise: float) -> float | None:
    if signal <= 0 or noise <= 0:
        return None
    return 10.0 * math.log10(signal / noise)
