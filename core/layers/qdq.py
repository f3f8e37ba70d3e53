"""A QDQ-quantized candidate: which tensor's quantization loses the most, and what to
exclude from quantization, measured.

For each quantized tensor NAME (the candidate has NAME, NAME_QuantizeLinear_Output and
NAME_DequantizeLinear_Output) the comparison records, against the reference's float NAME,
the SQNR before and after its Q/DQ pair (parity.layers.precision.Quantized). The pair's own
loss is what it takes away from what flowed into it: SQNR before minus SQNR after, where the
candidate's producer of NAME is the reference's; where the quantizer folded an activation
into the producer (Conv+Relu: the candidate's Conv writes NAME, the reference's Relu does),
the value before the pair is not the reference's computation, and what flowed in is the
worst SQNR after the pairs feeding that producer.

The tensor losing the most (its pair bypassed, the outputs' SQNR gains the most) is named
as the first divergence, not the next op's output where the loss shows. What to exclude is
searched apart (parity.layers.qdq_search): each quantized conv/matmul and adjacent pairs,
simulated as ``quantize_static(..., nodes_to_exclude=...)`` would make them and run on the
run's inputs; the best outputs' SQNR is suggested with its gain. Against a float ONNX file
(`qdq_findings`) and against a torch model (`torch_exclusions`, the float weights read from
its parameters) alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from parity.files.json_output import finite_or_none
from parity.layers.onnx_vs_onnx import DQ_SUFFIX, Q_SUFFIX
from parity.layers.qdq_search import (
    MIN_GAIN_DB,
    OutputsSqnr,
    Search,
    reference_weights,
    search_exclusions,
)
from parity.layers.result import LayersResult
from parity.load.onnx_read import read_onnx


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
    ref_proto = read_onnx(reference.path, external_data=False)
    cand_proto = read_onnx(candidate.path)
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
    search = search_exclusions(
        cand_proto,
        provider=candidate.provider,
        feeds=outputs.measure.feeds,
        references=outputs.measure.references,
        float_weights=reference_weights(_initializers(ref_proto, reference.path)),
        reference_graph=ref_proto.graph,
    )
    findings.update(search.findings())
    scored = [(g, t) for t, g in gains.items() if g is not None]
    if not scored or base is None:
        notes.append("no quantized tensor's loss could be measured")
        notes.extend(exclusion_notes(search, len(input_sets)))
        return replace(result, findings=findings, notes=tuple(notes))
    after, tensor = max(scored)
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
    notes.append(
        f"quantized file: the first divergence is the tensor whose Q/DQ pair loses the most "
        f"({tensor!r}: with its producer and consumers in float the outputs' SQNR goes from "
        f"{_db(base)} to {_db(after)}), not the next op's output where the loss shows; "
        "values are compared "
        "after their Q/DQ pair, quantized[] has each pair's SQNR before and after",
    )
    notes.extend(exclusion_notes(search, len(input_sets)))
    return replace(result, findings=findings, notes=tuple(notes), first_divergence=first)


def exclusion_notes(search: Search, n_sets: int) -> list[str]:
    """What the exclusion search suggests and how it was measured, in words."""
    if not search.possible:
        return list(search.notes)
    sets = f"{n_sets} input set{'s' if n_sets != 1 else ''}"
    how = (
        f"{len(search.tried)} exclusions simulated (each quantized conv/matmul alone, then "
        "adjacent pairs): in a copy of the quantized file the excluded nodes read their "
        "weights in float and lose the Q/DQ pairs no other quantized node keeps, run with "
        f"ONNX Runtime on the run's {sets}; not re-calibrated"
    )
    best = search.best
    if best is None:
        scored = [(db, t.nodes) for t in search.tried if (db := t.sqnr_db) is not None]
        top = max(scored, key=lambda s: s[0], default=None)
        tail = f" (best {list(top[1])}: {_db(top[0])})" if top is not None else ""
        return [
            f"no exclusion suggested: none raises the outputs' SQNR ({_db(search.before)}) by "
            f"{MIN_GAIN_DB} dB or more{tail}; {how}",
            *search.notes,
        ]
    after, before = best.sqnr_db, search.before
    gain = after - before if after is not None and before is not None else None
    return [
        f"suggested: quantize_static(..., nodes_to_exclude={list(best.nodes)!r}): outputs' "
        f"SQNR {_db(search.before)} -> {_db(best.sqnr_db)}"
        + (f" (+{gain:.1f} dB)" if gain is not None else "")
        + f", the best of {how}",
        *search.notes,
    ]


def _initializers(proto: onnx.ModelProto, path: Any) -> Any:
    """name -> the float file's initializer as an array (external data read beside it)."""
    from pathlib import Path

    inits = {t.name: t for t in proto.graph.initializer}
    base = str(Path(str(path)).parent)

    def array(name: str) -> np.ndarray | None:
        t = inits.get(name)
        if t is None:
            return None
        try:
            return numpy_helper.to_array(t, base_dir=base)
        except Exception:
            return None

    return array


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
        self.feeds = [
            {k: np.ascontiguousarray(a) for k, a in fit.feeds(s).feeds.items()} for s in input_sets
        ]
        self.ref = [
            reference.session.run(
                self.names, {k: np.ascontiguousarray(a) for k, a in s.feeds.items()}
            )
            for s in input_sets
        ]
        refs = [dict(zip(self.names, r, strict=True)) for r in self.ref]
        self.measure = OutputsSqnr(candidate.provider, self.feeds, refs, self.names)
        self.sqnr_before = self.measure.of_session(candidate.session)

    def bypassed(self, model: onnx.ModelProto) -> float | None:
        return self.measure.of_model(model)


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


def torch_exclusions(result: LayersResult, candidate: Any, run: Any, model: Any) -> LayersResult:
    """The torch route (``--model m.pt2 --onnx int8.onnx --layers``): the same measured
    exclusion search as against a float ONNX file, against torch's outputs on the run's
    input sets, the float weights read from the torch model's parameters. `result` comes
    back unchanged for a file that quantizes nothing."""
    head = read_onnx(candidate.path, external_data=False)
    if not any(n.op_type == "DequantizeLinear" for n in head.graph.node):
        return result
    from parity.run.candidates import fit_signature

    try:
        proto = read_onnx(candidate.path)
        fit = fit_signature(run.signature, candidate.signature)
        search = search_exclusions(
            proto,
            provider=candidate.provider,
            feeds=[fit.feeds(s).feeds for s in run.input_sets],
            references=[dict(o.arrays) for o in run.ref_outputs],
            float_weights=torch_weights(model),
        )
    except Exception as exc:  # the outputs' verdict and the localisation stand
        from parity.errors import describe_error

        note = f"exclusions not searched: {describe_error(exc)[1]}"
        return replace(result, notes=(*result.notes, note))
    findings = {**result.findings, **search.findings()}
    notes = (*result.notes, *exclusion_notes(search, len(run.input_sets)))
    return replace(result, findings=findings, notes=notes)


_SAME_SIZE = 64  # torch arrays of a weight's shape checked by value when no name matches


def torch_weights(model: Any) -> Any:
    """A FloatWeights (parity.layers.qdq_search) over the torch model's parameters,
    buffers and constants: by name (an exporter keeps state-dict names), else by value
    among the arrays of the weight's shape; each checked against the dequantized weight."""
    import re

    tensors: dict[str, Any] = {}
    program = getattr(model, "program", None)
    if program is not None:
        tensors.update(getattr(program, "state_dict", {}) or {})
        tensors.update(getattr(program, "constants", {}) or {})
    else:
        state = getattr(getattr(model, "module", None), "state_dict", None)
        if callable(state):
            tensors.update(state())

    def key(name: str) -> str:
        return re.sub(r"\W", "_", name).removeprefix("p_").removeprefix("b_")

    by_key = {key(n): t for n, t in tensors.items()}
    cache: dict[str, np.ndarray | None] = {}

    def array(name: str) -> np.ndarray | None:
        if name not in cache:
            t = tensors.get(name, by_key.get(key(name)))
            cache[name] = _to_numpy(t)
        return cache[name]

    by_name = reference_weights(array)

    def find(names: Any, dequantized: np.ndarray, half_step: float) -> np.ndarray | None:
        found = by_name(names, dequantized, half_step)
        if found is not None:
            return found
        same = [n for n, t in tensors.items() if tuple(getattr(t, "shape", ())) in (
            dequantized.shape, dequantized.shape[::-1])][:_SAME_SIZE]  # fmt: skip
        return reference_weights(array)(same, dequantized, half_step)

    return find


def _to_numpy(t: Any) -> np.ndarray | None:
    if t is None or not hasattr(t, "detach"):
        return None
    try:
        t = t.detach().cpu()
        if not t.is_floating_point():
            return None
        return t.float().numpy() if str(t.dtype) == "torch.bfloat16" else t.numpy()
    except Exception:
        return None
