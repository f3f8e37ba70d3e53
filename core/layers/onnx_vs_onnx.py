"""Layers of ONNX against ONNX: a reference file's values against a candidate's, by name.

A converter keeps most names: ONNX Runtime's float16 converter keeps every value and adds
``Cast`` nodes (new names) around what it converts; a QDQ quantizer keeps a float tensor's
name for its producer's float output and adds ``NAME_QuantizeLinear_Output`` and
``NAME_DequantizeLinear_Output`` after it. A reference value NAME is compared with what the
candidate's consumers read in its place: ``NAME_DequantizeLinear_Output`` where the tensor is
quantized, else ``NAME``. The criterion, the result types and the outputs are the torch
side's (parity.layers.criterion, parity.layers.result); both sides stream through
parity.layers.extra_outputs in batches under a memory budget planned from inferred shapes.

Contract:
match_values(reference: GraphIndex, candidate: GraphIndex) -> list[Match]
localise_onnx(reference_path, candidate_path, input_sets, *, reference_provider,
    reference_opt_level, provider, opt_level, memory_mb, keep_mb, progress,
    on_values=None) -> LayersResult
sqnr_db(ref, other) -> float | None     (None: no error at all, or nothing finite)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from parity.layers import criterion
from parity.layers.extra_outputs import ExtraOutputs, plan_batches
from parity.layers.localise import (
    DEFAULT_KEEP_MB,
    DEFAULT_MEMORY_MB,
    _Comparer,
    _Keeper,
    _values,
)
from parity.layers.matching import Pair
from parity.layers.onnx_graph import GraphIndex, read_graph
from parity.layers.result import LayersResult, LayerStatus
from parity.load.onnx_read import read_onnx
from parity.results import InputSet

ONNX_NAMES = "onnx names"
DQ_SUFFIX = "_DequantizeLinear_Output"
Q_SUFFIX = "_QuantizeLinear_Output"
_CHUNK = 1 << 22

# (input set, reference name) -> arrays a caller wants to see while they exist
ValuesCallback = Callable[[int, "Match", np.ndarray, Mapping[str, np.ndarray]], None]


@dataclass(frozen=True)
class Match:
    """A reference value and the candidate value compared with it. `quantized`: the
    candidate quantizes it (`before` is its float value before the Q/DQ pair)."""

    reference: str
    candidate: str
    quantized: bool = False

    @property
    def before(self) -> str:
        return self.reference


def match_values(reference: GraphIndex, candidate: GraphIndex) -> list[Match]:
    """Reference node outputs (Constant nodes aside), in its graph order, with the
    candidate's value of that name (after its Q/DQ pair where it is quantized)."""
    matches = []
    for name, value in reference.values.items():
        if value.op == "Constant":  # not computed: nothing a precision changes
            continue
        dq = name + DQ_SUFFIX
        if dq in candidate.values and name in candidate.values:
            matches.append(Match(name, dq, quantized=True))
        elif name in candidate.values:
            matches.append(Match(name, name))
    return matches


def sqnr_db(ref: np.ndarray, other: np.ndarray) -> float | None:
    """Signal-to-quantization-noise ratio, 10 log10(sum ref^2 / sum (other-ref)^2), over the
    elements finite on both sides (float64 sums, in chunks)."""
    if ref.shape != other.shape or ref.size == 0:
        return None
    r_all, o_all = np.ravel(ref), np.ravel(other)
    signal = noise = 0.0
    with np.errstate(all="ignore"):
        for start in range(0, r_all.size, _CHUNK):
            r = r_all[start : start + _CHUNK].astype(np.float64)
            o = o_all[start : start + _CHUNK].astype(np.float64)
            ok = np.isfinite(r) & np.isfinite(o)
            r, o = r[ok], o[ok]
            signal += float(np.dot(r, r))
            d = o - r
            noise += float(np.dot(d, d))
    if noise <= 0 or signal <= 0 or not math.isfinite(signal) or not math.isfinite(noise):
        return None
    return 10.0 * math.log10(signal / noise)


def localise_onnx(
    reference_path: str | Path,
    candidate_path: str | Path,
    input_sets: Sequence[InputSet],
    *,
    reference_provider: str = "CPUExecutionProvider",
    reference_opt_level: str = "all",
    provider: str = "CPUExecutionProvider",
    opt_level: str = "all",
    memory_mb: int = DEFAULT_MEMORY_MB,
    keep_mb: int = DEFAULT_KEEP_MB,
    progress: Callable[[str], None] | None = None,
    on_values: ValuesCallback | None = None,
) -> LayersResult:
    """Compare every value the two files share by name on every input set and judge where
    the error is born (parity.layers.criterion), as `localise` does against torch."""
    from parity.load.onnx_model import load_onnx
    from parity.run.candidates import fit_signature

    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    say("reading both ONNX graphs")
    ref_graph, cand_graph = read_graph(reference_path), read_graph(candidate_path)
    matches = match_values(ref_graph, cand_graph)
    notes = _match_notes(matches, ref_graph, cand_graph)
    if not matches:
        return _result(ref_graph, cand_graph, [], (), (*notes, "no value was compared"))
    fit = fit_signature(load_onnx(reference_path).signature, load_onnx(candidate_path).signature)
    sizes = _sizes(reference_path, input_sets)
    # a batch holds both sides' arrays (and a quantized value's float one): count them
    wanted = [m.reference for m in matches]
    batches = plan_batches(wanted, {n: 3 * sizes.get(n, 0) for n in wanted}, memory_mb << 20)
    by_ref = {m.reference: m for m in matches}
    ref_runner = ExtraOutputs(
        reference_path, provider=reference_provider, opt_level=reference_opt_level
    )
    cand_runner = ExtraOutputs(candidate_path, provider=provider, opt_level=opt_level)
    pairs = {m.reference: Pair(m.reference, m.reference, None, None) for m in matches}
    inputs_of = ref_graph.matched_inputs(wanted)
    comparer = _Comparer(ref_graph, inputs_of, _Keeper(max(0, keep_mb) << 20))
    sqnr: dict[tuple[str, int], float | None] = {}
    for b, batch in enumerate(batches):
        say(f"batch {b + 1}/{len(batches)}: {len(batch)} values")
        cand_names = _candidate_names(by_ref[n] for n in batch)
        with ref_runner.session(batch) as rs, cand_runner.session(cand_names) as cs:
            for input_set in input_sets:
                ref_values = _run(ref_runner, rs, batch, input_set)
                cand_values = _run(cand_runner, cs, cand_names, fit.feeds(input_set))
                s = input_set.index
                for name in batch:
                    match = by_ref[name]
                    ref = ref_values[name]
                    cand = _own_precision(cand_values[match.candidate], cand_graph, match)
                    comparer.compare(pairs[name], ref, {name: cand}, s)
                    sqnr[(name, s)] = sqnr_db(ref, cand)
                    if on_values is not None:
                        on_values(s, match, ref, cand_values)
                del ref_values, cand_values
    values = [
        replace(v, sqnr_db=sqnr.get((v.onnx_value, v.input_set)))
        for v in _values(comparer.compared, ref_graph, inputs_of)
    ]
    first = next((v for v in values if LayerStatus(v.status).born), None)
    keeper = comparer.keeper
    kept = tuple(k for k in keeper.kept if first is not None and k.input_set == first.input_set)
    notes += [
        f"ONNX Runtime ran the reference ({reference_provider}, {reference_opt_level}) and "
        f"the candidate ({provider}, {opt_level}) with the matched values as extra outputs, "
        f"in {len(batches)} batch(es) of at most {memory_mb} MB; a value marked as an output "
        "is not fused away (a quantized file's Q/DQ pairs stay unfused where they are "
        "compared), so these runs can differ slightly from the plain ones",
        f"{len(matches)} values x {len(input_sets)} input set(s) compared in "
        f"{time.perf_counter() - start:.2f} s",
    ]
    return _result(ref_graph, cand_graph, matches, tuple(values), tuple(notes), first, kept)


def _run(
    runner: ExtraOutputs, session: Any, names: Sequence[str], input_set: InputSet
) -> dict[str, np.ndarray]:
    """The values as numpy; bfloat16 ones (ORT's numpy bridge has none) through OrtValues,
    kept bfloat16 (ml_dtypes) so they are judged at bfloat16's threshold."""
    wanted = set(names)
    types = {o.name: o.type for o in session.get_outputs() if o.name in wanted}
    feeds_bf16 = any(a.dtype.name == "bfloat16" for a in input_set.feeds.values())
    if "tensor(bfloat16)" not in types.values() and not feeds_bf16:
        return runner.run(session, names, input_set)
    import ml_dtypes
    import torch

    from parity.errors import OnnxRunError, first_line
    from parity.run.runner import _run_bfloat16

    feeds = {k: np.ascontiguousarray(a) for k, a in input_set.feeds.items()}
    try:
        values = _run_bfloat16(session, list(names), feeds)
    except Exception as exc:
        raise OnnxRunError(
            f"ONNX Runtime failed on input set {input_set.index} with intermediate values "
            f"as outputs: {first_line(exc)}"
        ) from exc
    arrays = {}
    for name, v in zip(names, values, strict=True):
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        arrays[name] = v
    return arrays


def _own_precision(array: np.ndarray, graph: GraphIndex, match: Match) -> np.ndarray:
    """A float32 value a Cast made from float16 (a converter's output cast) is judged as the
    float16 it holds, at float16's threshold: it is that value, exactly."""
    value = graph.values.get(match.candidate)
    if value is None or value.op != "Cast" or array.dtype != np.float32:
        return array
    half = array.astype(np.float16)
    with np.errstate(all="ignore"):
        exact = np.array_equal(half.astype(np.float32), array, equal_nan=True)
    return half if exact else array


def _candidate_names(matches: Any) -> list[str]:
    names: dict[str, None] = {}
    for m in matches:
        names[m.candidate] = None
        if m.quantized:
            names[m.before] = None
    return list(names)


def _match_notes(matches: list[Match], ref: GraphIndex, cand: GraphIndex) -> list[str]:
    quantized = sum(m.quantized for m in matches)
    notes = [
        f"matched {len(matches)} of the reference's {len(ref.values)} values to the "
        f"candidate's by name"
        + (
            f"; {quantized} of them are quantized in the candidate and are compared after "
            f"their Q/DQ pair (NAME{DQ_SUFFIX})"
            if quantized
            else ""
        )
    ]
    added = (
        len(cand.values)
        - len(matches)
        - sum(1 for n in cand.values if n.endswith((DQ_SUFFIX, Q_SUFFIX)))
    )
    if added > 0:
        notes.append(
            f"{added} candidate values have no reference value of their name (casts or "
            "nodes a converter added): not compared"
        )
    return notes


def _sizes(path: str | Path, input_sets: Sequence[InputSet]) -> dict[str, int]:
    """Bytes of each value at the largest input set, from ONNX shape inference with the
    inputs' shapes made concrete; a value whose shape stays unknown counts as the largest
    input."""
    proto = read_onnx(path, external_data=False)
    graph = proto.graph
    sizes: dict[str, int] = {}
    for input_set in input_sets:
        shapes = {n: a.shape for n, a in input_set.feeds.items()}
        fallback = max((a.nbytes for a in input_set.feeds.values()), default=0)
        for vi in graph.input:
            if vi.name in shapes:
                dims = vi.type.tensor_type.shape.dim
                for d, n in zip(dims, shapes[vi.name], strict=False):
                    d.Clear()
                    d.dim_value = int(n)
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True).graph
        except Exception:
            inferred = graph
        known = {}
        for vi in [*inferred.value_info, *inferred.output]:
            t = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            if t.HasField("shape") and all(d >= 0 for d in dims) and t.elem_type:
                item = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
                known[vi.name] = int(np.prod(dims, dtype=np.int64)) * item
        for node in graph.node:
            for out in node.output:
                size = known.get(out, fallback)
                sizes[out] = max(sizes.get(out, 0), size)
    return sizes


def _result(
    ref: GraphIndex,
    cand: GraphIndex,
    matches: list[Match],
    values: tuple,
    notes: tuple[str, ...],
    first: Any = None,
    kept: tuple = (),
) -> LayersResult:
    return LayersResult(
        criterion=criterion.CRITERION,
        matching=ONNX_NAMES,
        matched=len(matches),
        unmatched_onnx=len(ref.values) - len(matches),
        unmatched_torch=len(cand.values) - len(matches),
        first_divergence=first,
        values=values,
        notes=notes,
        threshold=criterion.THRESHOLD,
        min_jump=criterion.MIN_JUMP,
        kept=kept,
    )
