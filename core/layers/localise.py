"""Find where an export starts to diverge: the one entry point of parity.layers.

Streams: for each batch of matched values (planned under `memory_mb` from the sizes one
torch pass reports), ONNX Runtime computes that batch with the values as extra outputs,
then the torch side runs once more and each matched value is compared the moment torch
produces it; only its statistics are kept (and, within `keep_mb`, the arrays of the first
divergence and the values just after it, for inspection). Nothing holds every intermediate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from parity.layers import criterion
from parity.layers.birth import Exclude, HeldRefs, confirm_births, masked
from parity.layers.extra_outputs import ExtraOutputs, plan_batches
from parity.layers.fusion import fusion_notes
from parity.layers.matching import (
    FX_NAMES,
    MODULE_BOUNDARIES,
    Pair,
    Plan,
    eager_plan,
    make_plan,
)
from parity.layers.movers import feeding, moves_data, unmatched_upstream
from parity.layers.onnx_graph import (
    GraphIndex,
    flattened_branch,
    index_graph,
    merged_condition,
    read_graph,
)
from parity.layers.result import KeptValue, LayersResult, LayerStatus, LayerValue
from parity.layers.stats import ValueStats, value_stats
from parity.layers.torch_side import tensor_leaves, to_numpy
from parity.results import InputSet
from parity.signature import OnnxSignature
from parity.sources import NO_TORCH_MODEL, TorchSide

DEFAULT_MEMORY_MB = 1024
DEFAULT_KEEP_MB = 64
_KEEP_AFTER = 3
_MAX_CANDIDATES = 3


@dataclass
class _Compared:
    pair: Pair
    onnx_value: str
    input_set: int
    shape: tuple[int, ...]
    stats: ValueStats
    judgement: criterion.Judgement
    dtype: str


@dataclass
class _Keeper:
    """Arrays of the first divergence per input set, the value before it and a few after."""

    budget: int
    kept: list[KeptValue] = field(default_factory=list)
    used: int = 0
    previous: dict[int, KeptValue] = field(default_factory=dict)
    after: dict[int, int] = field(default_factory=dict)  # set -> values still to keep
    skipped: int = 0

    def offer(self, order: int, c: _Compared, ref: np.ndarray, onnx: np.ndarray) -> None:
        s = c.input_set
        size = ref.nbytes + onnx.nbytes
        item = None
        if size <= self.budget // 4:
            item = KeptValue(order, s, c.onnx_value, np.array(ref), np.array(onnx))
        if s not in self.after and c.judgement.status.born:
            self.after[s] = _KEEP_AFTER
            if s in self.previous:
                self._keep(self.previous.pop(s))
            self._keep(item)
            return
        if self.after.get(s, 0) > 0:
            self.after[s] -= 1
            self._keep(item)
        elif s not in self.after and item is not None:
            self.previous[s] = item

    def _keep(self, item: KeptValue | None) -> None:
        if item is None or self.used + item.nbytes > self.budget:
            self.skipped += 1
            return
        self.kept.append(item)
        self.used += item.nbytes


class _Comparer:
    """Compares each matched value the moment torch produces it; keeps statistics only."""

    def __init__(
        self,
        graph: GraphIndex,
        inputs_of: dict[str, tuple[str, ...]],
        keeper: _Keeper,
        held: HeldRefs | None = None,
        exclude: Exclude | None = None,
    ) -> None:
        self.graph = graph
        self.inputs_of = inputs_of
        self.keeper = keeper
        self.held = held  # torch's values the confirmation will read
        self.exclude = exclude  # elements not judged (an hf: run's padding)
        self.compared: dict[tuple[str, int], _Compared] = {}
        self.taken: frozenset[str] = frozenset()  # values other pairs compare

    def callback(
        self,
        by_key: dict[str, list[Pair]],
        matching: str,
        in_batch: frozenset[str],
        onnx_values: dict[str, np.ndarray],
        s: int,
    ) -> Callable[[str, Any], None]:
        def on_value(key: str, value: Any) -> None:
            arrays = _torch_arrays(value, matching)
            for pair in by_key.get(key, ()):
                if pair.onnx_value not in in_batch or not arrays:
                    continue
                if (pair.onnx_value, s) in self.compared:
                    continue  # a module called twice: its first call is compared
                if pair.feeds is not None:  # a module's input: the one ONNX value of its shape
                    name = _input_value(pair, arrays[0], onnx_values, self.taken)
                    if name is not None:
                        self.compare(replace(pair, onnx_value=name), arrays[0], onnx_values, s)
                    continue
                if pair.leaf is not None:  # one tensor of a tuple (an LSTM's h_n)
                    if pair.leaf < len(arrays):
                        self.compare(pair, arrays[pair.leaf], onnx_values, s, leaf=True)
                    continue
                twins = sum(1 for a in arrays if a.shape == arrays[0].shape)
                self.compare(pair, arrays[0], onnx_values, s, twins)
                if matching == FX_NAMES:  # one pair per value: ONNX Runtime's array is done
                    onnx_values.pop(pair.onnx_value, None)

        return on_value

    def flowing(self, value: str, s: int, depth: int = 0) -> float:
        """The error `value` passes on: its own; where its shape did not pair with torch's
        (no error of its own: a Squeeze or Transpose of a GRU's output), the error flowing
        into it, read now (the GRU is compared after the Squeeze), so what follows a
        diverging value is carried, not born again. 0 for a value not compared."""
        c = self.compared.get((value, s))
        if c is not None and c.stats.shape_ok:
            return c.stats.error_ratio or 0.0
        if c is None or depth > 64:
            return 0.0
        ins = self.inputs_of.get(value, ())
        return max((self.flowing(i, s, depth + 1) for i in ins), default=0.0)

    def compare(
        self,
        pair: Pair,
        ref: np.ndarray,
        onnx_values: dict,
        s: int,
        twins: int = 1,
        *,
        leaf: bool = False,
    ) -> None:
        if leaf or pair.feeds is not None:
            name, onnx = pair.onnx_value, onnx_values[pair.onnx_value]
        else:
            name, onnx = _pick(pair, ref, onnx_values, twins)
        stats = value_stats(ref, masked(onnx, ref, self.exclude, s))
        ins = self.inputs_of.get(pair.onnx_value, ())
        prior = [self.compared[(i, s)] for i in ins if (i, s) in self.compared]
        dtype = str(onnx.dtype)
        flowing = max((self.flowing(i, s) for i in ins), default=0.0)
        judgement = criterion.judge(
            stats,
            inputs_ratio=flowing,
            inputs_nonfinite=any(c.judgement.nonfinite for c in prior),
            dtype=dtype,
        )
        if self.graph.values[name].not_comparable is not None:  # a fusion took its meaning
            judgement = criterion.Judgement(LayerStatus.NOT_COMPARABLE, None, False)
        if judgement.status is LayerStatus.SHAPE_MISMATCH and any(
            c.judgement.status is LayerStatus.SHAPE_MISMATCH for c in prior
        ):
            judgement = criterion.Judgement(LayerStatus.CARRIED, None, judgement.nonfinite)
        c = _Compared(pair, name, s, tuple(ref.shape), stats, judgement, dtype)
        self.compared[(pair.onnx_value, s)] = c
        self.keeper.offer(self.graph.values[name].order, c, ref, onnx)
        if self.held is not None:
            self.held.offer(name, s, ref, judgement.status.born)


def localise(
    model: Any | TorchSide,
    onnx_path: str | Path,
    input_sets: Sequence[InputSet],
    signature: OnnxSignature,
    *,
    provider: str = "CPUExecutionProvider",
    opt_level: str = "all",
    memory_mb: int = DEFAULT_MEMORY_MB,
    keep_mb: int = DEFAULT_KEEP_MB,
    progress: Callable[[str], None] | None = None,
    confirm: bool = True,
) -> LayersResult:
    """Compare the matched intermediate values of `model` (a TorchModel, or a source's
    TorchSide) and the ONNX file on every input set and judge where the error is born
    (parity.layers.criterion); with `confirm`, each flagged value's node is re-run alone on
    torch's inputs (parity.layers.birth). A merged decoder's two branches are each compared
    as a graph of their own, on the input sets that run them."""
    side = model if isinstance(model, TorchSide) else TorchSide(model)
    say = progress or (lambda _msg: None)
    options: dict[str, Any] = {
        "provider": provider,
        "opt_level": opt_level,
        "memory_mb": memory_mb,
        "keep_mb": keep_mb,
        "say": say,
        "confirm": confirm,
    }
    name = merged_condition(onnx_path)
    if name is None:
        return _localise_graph(side, onnx_path, None, input_sets, signature, **options)
    results: list[tuple[bool, LayersResult]] = []
    for value in (False, True):  # the no-cache branch runs the first step
        sets = [s for s in input_sets if name in s.feeds and _truth(s.feeds[name]) == value]
        if sets:
            say(f"merged decoder: the {BRANCH_WORDS[value]} branch")
            proto = flattened_branch(onnx_path, value)  # one branch in memory at a time
            result = _localise_graph(side, onnx_path, proto, sets, signature, **options)
            del proto
            results.append((value, result))
    if not results:
        return not_compared(f"no input set feeds the merged decoder's {name!r}")
    return _merged(results, name)


BRANCH_WORDS = {False: "no-cache", True: "cache"}


def _truth(array: Any) -> bool:
    flat = np.asarray(array).ravel()
    return bool(flat[0]) if flat.size else False


def _merged(results: list[tuple[bool, LayersResult]], name: str) -> LayersResult:
    """One result from a merged decoder's branches: each branch's orders follow the one
    before it (two graphs have no common order); the first divergence is the earliest input
    set's, and its repro comes with it."""
    from dataclasses import replace

    offset = 0
    values: list[LayerValue] = []
    confirmations: list[Any] = []
    kept: list[KeptValue] = []
    firsts: list[tuple[LayerValue, Any]] = []
    notes = [
        f"merged decoder: the input sets with {name} false ran its no-cache branch, the others "
        "its cache branch; each branch is compared as a graph of its own (the cache branch's "
        "orders follow the no-cache branch's)"
    ]
    for value, r in results:

        def shift(v: LayerValue, by: int = offset) -> LayerValue:
            return replace(v, order=v.order + by, inputs=tuple(i + by for i in v.inputs))

        values += [shift(v) for v in r.values]
        confirmations += [replace(c, order=c.order + offset) for c in r.confirmations]
        kept += [replace(k, order=k.order + offset) for k in r.kept]
        if r.first_divergence is not None:
            firsts.append((shift(r.first_divergence), r.repro))
        notes += [f"{BRANCH_WORDS[value]} branch: {note}" for note in r.notes]
        offset += 1 + max((v.order for v in r.values), default=0)
    first, repro = min(firsts, key=lambda f: f[0].input_set, default=(None, None))
    head = results[0][1]
    values.sort(key=lambda v: (v.order, v.input_set))
    return LayersResult(
        criterion=head.criterion,
        matching=next((r.matching for _, r in results if r.matched), head.matching),
        matched=sum(r.matched for _, r in results),
        unmatched_onnx=sum(r.unmatched_onnx for _, r in results),
        unmatched_torch=max(r.unmatched_torch for _, r in results),
        first_divergence=first,
        values=tuple(values),
        notes=tuple(notes),
        threshold=head.threshold,
        min_jump=head.min_jump,
        kept=tuple(k for k in kept if first is not None and k.input_set == first.input_set),
        confirmations=tuple(sorted(confirmations, key=lambda c: (c.order, c.input_set))),
        repro=repro,
    )


def _localise_graph(
    side: TorchSide,
    onnx_path: str | Path,
    proto: onnx.ModelProto | None,
    input_sets: Sequence[InputSet],
    signature: OnnxSignature,
    *,
    provider: str,
    opt_level: str,
    memory_mb: int,
    keep_mb: int,
    say: Callable[[str], None],
    confirm: bool,
) -> LayersResult:
    """`localise` on one graph: the file's, or `proto` (a merged decoder's branch)."""
    start = time.perf_counter()
    say("reading the ONNX graph")
    graph = read_graph(onnx_path) if proto is None else index_graph(proto)
    say("matching ONNX values to the torch model")
    plan = make_plan(side, graph, input_sets[0], signature)
    if not plan.pairs:
        return _empty(plan, graph)

    by_key: dict[str, list[Pair]] = {}
    for pair in plan.pairs:
        by_key.setdefault(pair.key, []).append(pair)

    say("measuring intermediate sizes (one torch pass per input set)")
    sizes = _probe(plan, by_key, input_sets)
    if not isinstance(sizes, dict):  # the program is not eager torch: compare with eager
        say("the exporter's program disagrees with eager torch: comparing with eager torch")
        plan = eager_plan(side, graph, input_sets[0], signature, sizes)
        if not plan.pairs:
            return _empty(plan, graph)
        by_key = {}
        for pair in plan.pairs:
            by_key.setdefault(pair.key, []).append(pair)
        sizes = _probe(plan, by_key, input_sets)
        assert isinstance(sizes, dict)
    requested = _requested(plan, graph)

    budget = max(1, memory_mb) << 20
    # the budget bounds every array held at once: a batch's ONNX values and torch's values
    # held for the confirmation (an eighth; past it, the confirmation captures what it
    # needs in a torch pass of its own, after the batches, within the whole budget)
    held_budget = budget // 8 if confirm else 0
    batches = plan_batches(requested, sizes, max(1, budget - held_budget))
    runner = ExtraOutputs(onnx_path, provider=provider, opt_level=opt_level, proto=proto)
    inputs_of = graph.matched_inputs(  # a value with no torch meaning feeds no judgement
        p.onnx_value for p in plan.pairs if graph.values[p.onnx_value].not_comparable is None
    )
    held = None
    if confirm:
        feeds = {n for s in input_sets for n in s.feeds}
        comparable = [n for n in requested if graph.values[n].not_comparable is None]
        held = HeldRefs(runner.proto, comparable, feeds, held_budget)
    comparer = _Comparer(graph, inputs_of, _Keeper(max(0, keep_mb) << 20), held, side.exclude)
    comparer.taken = frozenset(p.onnx_value for p in plan.pairs if p.feeds is None)

    for b, batch in enumerate(batches):
        in_batch = frozenset(batch)
        keys = {p.key for p in plan.pairs if p.onnx_value in in_batch}
        say(f"batch {b + 1}/{len(batches)}: {len(keys)} values")
        with runner.session(batch) as session:
            for input_set in input_sets:
                onnx_values = runner.run(session, batch, input_set)
                plan.capture.run(
                    input_set,
                    keys,
                    comparer.callback(
                        by_key, plan.matching, in_batch, onnx_values, input_set.index
                    ),
                )
                del onnx_values
    compared, keeper = comparer.compared, comparer.keeper

    values = _values(compared, graph, inputs_of)
    first = next((v for v in values if LayerStatus(v.status).born), None)
    births = None
    if confirm and first is not None:
        say("confirming: re-running flagged nodes alone on torch's inputs")
        births = confirm_births(
            values,
            _known(compared),
            proto=runner.proto,
            onnx_path=onnx_path,
            input_sets=input_sets,
            capture=plan.capture,
            arrays_of=lambda value: _torch_arrays(value, plan.matching),
            provider=provider,
            opt_level=opt_level,
            memory_mb=memory_mb,
            held=held,
            each_set=side.steps,
            exclude=side.exclude,
            weights_dir=runner.weights_dir,
        )
        values, first = list(births.values), births.first
    keep = [k for k in keeper.kept if first is not None and k.input_set == first.input_set]
    notes = [
        *plan.notes,
        f"ONNX Runtime ({provider}, optimisation level {opt_level}) re-ran the graph with the "
        f"matched values as extra outputs, in {len(batches)} batch(es) within "
        f"{memory_mb} MB (torch's values held for the confirmation included); a value marked "
        "as an output is not fused away, so ONNX Runtime's optimised graph for intermediates "
        "can differ slightly from the plain run's",
        f"{len(plan.pairs)} values x {len(input_sets)} input set(s) compared in "
        f"{time.perf_counter() - start:.2f} s",
    ]
    missing = len(plan.pairs) * len(input_sets) - len(compared)
    if missing:
        notes.append(
            f"{missing} matched (value, input set) pairs were never produced by the torch "
            "side (modules not called on that input): not compared"
        )
    notes.extend(fusion_notes(values))
    mismatched = sorted({v.onnx_value for v in values if v.status == LayerStatus.SHAPE_MISMATCH})
    outputs = [n for n in mismatched if n in signature.output_names]
    if outputs:  # the run's own rows say it: a file that fixes a size, never a pairing
        mismatched = [n for n in mismatched if n not in outputs]
        notes.append(
            f"{len(outputs)} output(s) have another shape in ONNX than in torch on some input "
            "set, as the run's own rows say: not judged here, never a divergence: "
            f"{', '.join(repr(n) for n in outputs[:4])}{', ...' if len(outputs) > 4 else ''}"
        )
    if mismatched:
        notes.append(
            f"{len(mismatched)} matched values have another shape in torch than in ONNX: the "
            "pairing failed there (not an error of the export, never a divergence), so they "
            f"are not judged: {', '.join(repr(n) for n in mismatched[:4])}"
            f"{', ...' if len(mismatched) > 4 else ''}"
        )
    if births is not None:
        notes.extend(births.notes)
    if keeper.skipped and first is not None:
        notes.append(
            f"arrays of {keeper.skipped} values near the first divergence not kept "
            f"(over the {keep_mb} MB kept-arrays budget)"
        )
    return LayersResult(
        criterion=criterion.CRITERION,
        matching=plan.matching,
        matched=len(plan.pairs),
        unmatched_onnx=plan.unmatched_onnx,
        unmatched_torch=plan.unmatched_torch,
        first_divergence=first,
        values=tuple(values),
        notes=tuple(notes),
        threshold=criterion.THRESHOLD,
        min_jump=criterion.MIN_JUMP,
        kept=tuple(keep),
        confirmations=() if births is None else births.confirmations,
        repro=None if births is None else births.case,
    )


def _probe(
    plan: Plan, by_key: dict[str, list[Pair]], input_sets: Sequence[InputSet]
) -> dict[str, int] | str:
    """Each requested value's bytes (the largest over the input sets), from one torch pass
    per set. An exporter's program (FX names) is checked against eager torch at its
    outputs on the way: where they disagree, why (and no sizes)."""
    sizes: dict[str, int] = {}
    check = plan.matching == FX_NAMES and getattr(plan.capture, "eager", None) is not None
    for input_set in input_sets:

        def probe(key: str, value: Any) -> None:
            arrays = _torch_arrays(value, plan.matching)
            for pair in by_key.get(key, ()):
                leaf = pair.leaf or 0
                n = arrays[leaf].nbytes if leaf < len(arrays) else 0
                many = len(pair.candidates) if pair.feeds is not None else _MAX_CANDIDATES
                for name in (pair.onnx_value, *pair.candidates[:many]):
                    sizes[name] = max(sizes.get(name, 0), n)

        outputs = plan.capture.run(input_set, by_key.keys(), probe)
        if check:
            why = eager_disagreement(plan.capture.eager, input_set, outputs)
            if why is not None:
                return why
    return sizes


def eager_disagreement(eager: Any, input_set: InputSet, outputs: Any) -> str | None:
    """Why the exporter's program (re-exported by torch.export: it can freeze a size read in
    Python, `float(h * w)`, as the ONNX file did) is not eager torch on `input_set`, or None
    when their outputs agree (or cannot be set side by side)."""
    got: list[Any] = []
    eager.run(input_set, [""], lambda _key, value: got.append(value))
    if not got:
        return None
    ref = [to_numpy(t) for t in tensor_leaves(got[0])]
    fx = [to_numpy(t) for t in tensor_leaves(outputs)]
    if len(ref) != len(fx) or any(a is None for a in (*ref, *fx)):
        return None
    for k, (r, f) in enumerate(zip(ref, fx, strict=True)):
        assert r is not None and f is not None
        if r.shape != f.shape:
            differs = f"output {k}'s shape {tuple(f.shape)} against {tuple(r.shape)}"
        else:
            stats = value_stats(r, f)
            ratio = stats.error_ratio or 0.0
            if ratio <= criterion.THRESHOLD and not stats.n_nonfinite_mismatch:
                continue
            differs = f"output {k} off by max |error| {stats.max_abs:.3g}"
        return (
            "the torch side's program (torch.export of the model, as the dynamo exporter "
            f"traced it) disagrees with eager torch at its outputs on input set "
            f"{input_set.index} ({differs}): it froze something eager torch computes per "
            "input, as the ONNX file may have; so intermediate values are compared with eager "
            "torch's module outputs and inputs (forward hooks), not with that program's"
        )
    return None


def _known(compared: dict[tuple[str, int], _Compared]) -> dict[int, dict[str, Pair]]:
    """Per input set: the ONNX values compared with the same shape on both sides -> pair."""
    known: dict[int, dict[str, Pair]] = {}
    for (_value, s), c in compared.items():
        if c.stats.shape_ok and c.judgement.status is not LayerStatus.NOT_COMPARABLE:
            known.setdefault(s, {})[c.onnx_value] = c.pair
    return known


def _requested(plan: Plan, graph: GraphIndex) -> list[str]:
    """Every ONNX value the batches must produce, in graph order."""
    names: dict[str, None] = {}
    for pair in plan.pairs:
        names[pair.onnx_value] = None
        if plan.matching == MODULE_BOUNDARIES:
            many = len(pair.candidates) if pair.feeds is not None else _MAX_CANDIDATES
            for c in pair.candidates[:many]:
                names[c] = None
    return sorted(names, key=lambda n: graph.values[n].order)


def _torch_arrays(value: Any, matching: str) -> list[np.ndarray]:
    leaves = tensor_leaves(value) if matching == MODULE_BOUNDARIES else [value]
    arrays = [to_numpy(v) for v in leaves]
    return [a for a in arrays if a is not None]


def _input_value(
    pair: Pair, ref: np.ndarray, onnx_values: dict, taken: frozenset[str]
) -> str | None:
    """The ONNX value a module's input is: the only one of its outside reads with torch's
    input's shape, unless another pair compares it already; None when none or several fit
    (never compared across shapes, never guessed)."""
    fits = [n for n in pair.candidates if n in onnx_values and onnx_values[n].shape == ref.shape]
    if len(fits) != 1 or fits[0] in taken or fits[0] != pair.onnx_value:
        return None  # the plan's value (its matched inputs are known) or none
    return fits[0]


def _pick(pair: Pair, ref: np.ndarray, onnx_values: dict, twins: int = 1) -> tuple[str, np.ndarray]:
    """The ONNX array for a pair: in module mode the last boundary value of ref's shape.
    A module returning `twins` tensors of that shape (rotary embeddings' cos and sin) made
    them last, in order: its first one is the `twins`-th last."""
    fits = [
        name
        for name in dict.fromkeys((pair.onnx_value, *pair.candidates[:_MAX_CANDIDATES]))
        if name in onnx_values and onnx_values[name].shape == ref.shape
    ]
    if fits:
        name = fits[min(twins, len(fits)) - 1]
        return name, onnx_values[name]
    return pair.onnx_value, onnx_values[pair.onnx_value]


MAX_OPS = 12


def stands_for(
    graph: GraphIndex, value: str, inputs_of: dict[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """The ONNX nodes a compared value stands for, in graph order: its producer and the
    unmatched nodes between it and the matched values feeding it (Constants left out), as
    "Op 'node'"; at most MAX_OPS (the last ones, nearest the value), then a count."""
    own = graph.values.get(value)
    found = unmatched_upstream(graph, value, inputs_of)
    if own is not None and own.op != "Constant":
        found.append(own)
    nodes = {v.order: f"{v.op} {v.node!r}" for v in found}  # a node once, however many outputs
    ordered = [nodes[k] for k in sorted(nodes)]
    if len(ordered) > MAX_OPS:
        return (f"... {len(ordered) - MAX_OPS} more", *ordered[-MAX_OPS:])
    return tuple(ordered)


def _values(
    compared: dict[tuple[str, int], _Compared],
    graph: GraphIndex,
    inputs_of: dict[str, tuple[str, ...]],
) -> list[LayerValue]:
    values = []
    known: dict[int, set[str]] = {}  # per input set, the values compared (a cut's stops)
    for value, s in compared:
        known.setdefault(s, set()).add(value)
    for (value, s), c in compared.items():
        g = graph.values[c.onnx_value]
        st = c.stats
        values.append(
            LayerValue(
                order=g.order,
                onnx_value=c.onnx_value,
                onnx_node=g.node,
                onnx_op=g.op,
                torch_module=c.pair.torch_module,
                torch_node=c.pair.torch_node,
                input_set=s,
                shape=c.shape,
                max_abs=st.max_abs,
                max_rel=st.max_rel,
                scale=st.scale,
                error_ratio=st.error_ratio,
                jump=c.judgement.jump,
                cosine=st.cosine,
                status=c.judgement.status.value,
                inputs=tuple(graph.values[i].order for i in inputs_of.get(value, ())),
                dtype=c.dtype,
                feeds=c.pair.feeds,
                ops=stands_for(graph, value, inputs_of) if c.judgement.status.born else (),
                feeding=feeding(graph, value, known[s]) if c.judgement.status.born else (),
                moves_data=c.judgement.status.born and moves_data(graph, value),
                reason=g.not_comparable,
                covers=c.pair.covers,
            )
        )
    values.sort(key=lambda v: (v.order, v.input_set))
    return values


def _empty(plan: Plan, graph: GraphIndex) -> LayersResult:
    return LayersResult(
        criterion=criterion.CRITERION,
        matching=plan.matching,
        matched=0,
        unmatched_onnx=plan.unmatched_onnx,
        unmatched_torch=plan.unmatched_torch,
        first_divergence=None,
        values=(),
        notes=(*plan.notes, "no intermediate value was compared"),
        threshold=criterion.THRESHOLD,
        min_jump=criterion.MIN_JUMP,
    )


def localise_run(
    side: TorchSide | None,
    onnx_path: str | Path,
    input_sets: Sequence[InputSet],
    signature: OnnxSignature,
    **options: Any,
) -> LayersResult:
    """`localise` for a validation run (`side`: the source's torch side): never raises,
    never changes the outputs' verdict; whatever stopped it is said in the result's notes."""
    if side is None or side.model is None:
        return not_compared(NO_TORCH_MODEL if side is None else side.missing or NO_TORCH_MODEL)
    try:
        return localise(side, onnx_path, input_sets, signature, **options)
    except Exception as exc:  # the outputs' verdict stands; say why layers could not
        from parity.errors import describe_error

        return not_compared(f"localisation stopped: {describe_error(exc)[1]}")


def not_compared(reason: str) -> LayersResult:
    """A result that says, in words, why no intermediate value was compared."""
    return LayersResult(
        criterion=criterion.CRITERION,
        matching="none",
        matched=0,
        unmatched_onnx=0,
        unmatched_torch=0,
        first_divergence=None,
        values=(),
        notes=(reason,),
        threshold=criterion.THRESHOLD,
        min_jump=criterion.MIN_JUMP,
    )
