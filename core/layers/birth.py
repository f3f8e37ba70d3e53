"""Confirm where an error is born: re-run each flagged value's node alone on exact inputs.

The criterion (parity.layers.criterion) measures each value against its own size, so an op
that changes the scale (GELU of mostly negative inputs, ReLU, a mask) can make a carried
error look like a jump. For each value it flags, in graph order, the node that makes it (and
the unmatched nodes just upstream of it, parity.layers.confirm) runs alone in ONNX Runtime,
fed with the reference's (torch's) values of its inputs, and its output is compared with the
reference's. The first whose error reappears is the first divergence (`born`); a flagged
value whose node alone agrees is `carried`; one that cannot be run alone is `unconfirmed`
(never silently confirmed).

The arrays the checked nodes need are torch's values from the comparison pass, held by
`HeldRefs` while that pass produces them (each only as long as a later value's cut may read
it); an input set whose arrays were not all held (over the memory budget, or a cut that reads
other values than foreseen) gets one more torch pass capturing only those arrays, within the
memory budget. Either way the cuts are fed the same arrays, so the outcome is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from parity.errors import OnnxRunError
from parity.layers import confirm, criterion
from parity.layers.matching import Pair
from parity.layers.result import Confirmation, LayerStatus, LayerValue, Outcome
from parity.layers.stats import value_stats
from parity.results import InputSet

MAX_CHECKED = 16  # flagged values re-run alone at most (the first born ends the search)


Exclude = Callable[[int, tuple[int, ...]], "np.ndarray | None"]


def masked(onnx: np.ndarray, ref: np.ndarray, exclude: Exclude | None, s: int) -> np.ndarray:
    """`onnx` with the reference's values where input set `s` excludes elements (an hf:
    run's padding, where exports legitimately differ): those elements are not judged."""
    if exclude is None or onnx.shape != ref.shape:
        return onnx
    where = exclude(s, tuple(ref.shape))
    if where is None or not where.any():
        return onnx
    return np.where(where, ref, onnx)


@dataclass(frozen=True)
class ReproCase:
    """What a repro needs: the cut, the reference's values of its inputs and output, and
    what ONNX Runtime made of them."""

    value: LayerValue
    cut: confirm.Cut
    inputs: Mapping[str, np.ndarray]
    expected: np.ndarray
    got: np.ndarray
    provider: str
    opt_level: str


@dataclass(frozen=True)
class Births:
    values: tuple[LayerValue, ...]  # carried ones re-labelled "carried"
    first: LayerValue | None
    confirmations: tuple[Confirmation, ...]
    case: ReproCase | None
    notes: tuple[str, ...]


class HeldRefs:
    """Torch's values a confirmation may read, held as the comparison pass produces them, so
    that the confirmation needs no torch pass of its own where they all fit in `budget`.

    Before the pass, each value that can be compared gets its cut's inputs as
    `confirm.select` would choose them were every such value matched (`reads`). During the
    pass (`offer`, in the order torch produces the values) a value is held while a value
    whose cut reads it is still to come; the first `MAX_CHECKED` flagged values of each input
    set, and what their cuts read, are held to the end. `covering` hands them over only when
    they are every array the confirmation wants and within the budget its own capture keeps
    (then that capture would have kept them all, and the same arrays are fed)."""

    def __init__(
        self,
        proto: onnx.ModelProto,
        comparable: Collection[str],
        feeds: Collection[str],
        budget: int,
    ) -> None:
        comparable = frozenset(comparable)
        known = comparable | frozenset(feeds)
        producers = confirm.producers_of(proto)
        initializers = {t.name for t in proto.graph.initializer}
        self.reads: dict[str, tuple[str, ...]] = {}
        self._readers: dict[str, list[str]] = {}
        for name in comparable:
            sel = confirm.select(
                proto,
                name,
                _AllBut(known, name),
                producers=producers,
                initializers=initializers,
            )
            if isinstance(sel, confirm.Refused):
                continue
            self.reads[name] = tuple(i for i in sel.inputs if i in comparable)
            for i in self.reads[name]:
                self._readers.setdefault(i, []).append(name)
        self.budget = budget
        self.used = 0
        self.dropped = 0  # arrays not held for the budget
        self._held: dict[int, dict[str, np.ndarray]] = {}
        self._pinned: dict[int, set[str]] = {}
        self._flagged: dict[int, int] = {}
        self._done: dict[int, set[str]] = {}

    def offer(self, name: str, s: int, ref: np.ndarray, flagged: bool) -> None:
        """Torch's value of `name` on input set `s`, just compared (`flagged` by the
        criterion)."""
        done = self._done.setdefault(s, set())
        pinned = self._pinned.setdefault(s, set())
        held = self._held.setdefault(s, {})
        done.add(name)
        if flagged and self._flagged.get(s, 0) < MAX_CHECKED:
            self._flagged[s] = self._flagged.get(s, 0) + 1
            pinned.add(name)
            pinned.update(self.reads.get(name, ()))
        if name not in held and (name in pinned or self._still_read(name, done)):
            if self.used + ref.nbytes > self.budget:
                self.dropped += 1
            else:
                held[name] = np.array(ref, copy=True)
                self.used += ref.nbytes
        for i in self.reads.get(name, ()):
            if i in held and i not in pinned and not self._still_read(i, done):
                self.used -= held.pop(i).nbytes

    def _still_read(self, name: str, done: set[str]) -> bool:
        return any(r not in done for r in self._readers.get(name, ()))

    def release(self, s: int) -> None:
        """Input set `s`'s arrays are no longer needed."""
        for array in self._held.pop(s, {}).values():
            self.used -= array.nbytes

    def covering(
        self, s: int, wanted: Collection[str], budget: int
    ) -> dict[str, np.ndarray] | None:
        """The held arrays of `wanted` on input set `s`, or None unless all are held and
        they fit in `budget` bytes."""
        held = self._held.get(s, {})
        if any(n not in held for n in wanted):
            return None
        if sum(held[n].nbytes for n in wanted) > budget:
            return None
        return {n: held[n] for n in wanted}


class _AllBut(AbstractSet):
    """`names` without `name`, not copied (a membership test for `confirm.select`)."""

    def __init__(self, names: frozenset[str], name: str) -> None:
        self._names = names
        self._name = name

    def __contains__(self, item: object) -> bool:
        return item != self._name and item in self._names

    def __iter__(self) -> Iterator[str]:
        return (n for n in self._names if n != self._name)

    def __len__(self) -> int:
        return len(self._names) - (self._name in self._names)


def confirm_births(
    values: Sequence[LayerValue],
    known: Mapping[int, Mapping[str, Pair]],
    *,
    proto: onnx.ModelProto,
    onnx_path: str | Path,
    input_sets: Sequence[InputSet],
    capture: Any,
    arrays_of: Callable[[Any], list[np.ndarray]],
    provider: str,
    opt_level: str,
    memory_mb: int,
    held: HeldRefs | None = None,
    each_set: bool = False,
    exclude: Exclude | None = None,
    weights_dir: str | Path | None = None,
) -> Births:
    """Check the flagged `values` in order until one is born (with `each_set`, until one is
    born on every input set: the steps of one generation each get their own first). `known[s]`
    maps each ONNX value compared on input set `s` (same shape on both sides) to its torch
    pair; `held`, torch's values kept from the comparison pass (used where they cover an
    input set)."""
    flagged = [v for v in values if LayerStatus(v.status).born]
    if not flagged:
        return Births(tuple(values), None, (), None, ())
    checked = _to_check(flagged, each_set)
    producers = confirm.producers_of(proto)
    by_set = {s.index: s for s in input_sets}
    selections: dict[tuple[str, int], confirm.Selection | confirm.Refused] = {}
    for v in checked:
        feeds = by_set[v.input_set].feeds
        selections[(v.onnx_value, v.input_set)] = confirm.select(
            proto,
            v.onnx_value,
            (set(known.get(v.input_set, {})) - {v.onnx_value}) | set(feeds),
            producers=producers,
        )
    budget = max(1, memory_mb) << 20
    captured: dict[int, dict[str, np.ndarray]] = {}
    confirmations: list[Confirmation] = []
    first: LayerValue | None = None
    case: ReproCase | None = None
    decided: set[int] = set()  # input sets whose first born is found
    rounded: dict[str, str] = {}  # values made with quantized values: why
    last_of_set = {v.input_set: v for v in checked}
    for v in checked:
        s = v.input_set
        if s in decided:
            continue
        rounds = rounds_on_purpose(proto, selections[(v.onnx_value, s)])
        if rounds is not None:  # int8 rounding is what the value means: never a birth
            rounded[v.onnx_value] = rounds  # the same node on every input set
            continue
        wrong = matching_error(v, values)
        if wrong is not None:  # the pairing is tested before the node is
            confirmations.append(_confirmation(v, Outcome.MATCHING_ERROR, None, 0, wrong))
            if last_of_set[s] is v:
                captured.pop(s, None)
                if held is not None:
                    held.release(s)
            continue
        if s not in captured:
            wanted = _wanted(checked, s, selections, known)
            kept = None if held is None else held.covering(s, wanted, budget)
            if kept is None:
                # what was held for this set is not read: let it go before torch runs again,
                # and keep what is captured, with what other sets hold, within the budget
                room = budget
                if held is not None:
                    held.release(s)
                    room = max(budget - held.used, budget // 4)
                kept = _capture(capture, by_set[s], wanted, arrays_of, room)
            captured[s] = kept
        c, born_case = _check(
            v,
            selections[(v.onnx_value, s)],
            captured[s],
            by_set[s],
            proto,
            Path(weights_dir) if weights_dir is not None else Path(onnx_path).parent,
            (provider, opt_level),
            exclude,
        )
        confirmations.append(c)
        if c.outcome == Outcome.BORN:
            decided.add(s)
            if first is None:
                first, case = v, born_case
            if not each_set:
                break
        if s in decided or last_of_set[s] is v:
            captured.pop(s, None)  # this input set's arrays are read no more
            if held is not None:
                held.release(s)
    carried = {
        (c.order, c.input_set, c.onnx_value) for c in confirmations if c.outcome == Outcome.CARRIED
    }
    wrongly_paired = {
        (c.order, c.input_set, c.onnx_value): c.reason
        for c in confirmations
        if c.outcome == Outcome.MATCHING_ERROR
    }

    def relabel(v: LayerValue) -> LayerValue:
        key = (v.order, v.input_set, v.onnx_value)
        if key in carried:
            return replace(v, status=LayerStatus.CARRIED.value)
        if key in wrongly_paired:
            return replace(v, status=LayerStatus.NOT_COMPARABLE.value, reason=wrongly_paired[key])
        if v.onnx_value in rounded and LayerStatus(v.status).born:
            return replace(v, status=LayerStatus.NOT_COMPARABLE.value, reason=rounded[v.onnx_value])
        return v

    relabelled = tuple(relabel(v) for v in values)
    notes = [_summary(confirmations, len(flagged), first)]
    if first is None:  # the criterion's first that was not shown carried, said unconfirmed
        first = next((v for v in relabelled if LayerStatus(v.status).born), None)
    return Births(relabelled, first, tuple(confirmations), case, tuple(notes))


QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "QGemm")  # and every QLinear op


def rounds_on_purpose(
    proto: onnx.ModelProto, selection: confirm.Selection | confirm.Refused
) -> str | None:
    """Why a flagged value is int8 rounding, not a birth: its node, run alone, computes with
    values a statically quantized file rounds on purpose (a QuantizeLinear/DequantizeLinear,
    a QLinear op), so torch's float value is not what it means; the quantization-aware
    reference (parity.analyses.static_quant) judges those weights and values. None else."""
    if isinstance(selection, confirm.Refused):
        return None
    ops = {proto.graph.node[i].op_type for i in selection.nodes}
    quantized = sorted(o for o in ops if o in QUANTIZED_OPS or o.startswith("QLinear"))
    if not quantized:
        return None
    return (
        f"int8 rounding: made with quantized values ({', '.join(quantized)}), which round "
        "torch's float values on purpose; not a birth (the quantization-aware reference "
        "judges the file's weights and graph)"
    )


def matching_error(v: LayerValue, values: Sequence[LayerValue]) -> str | None:
    """Why flagged `v` is a matching error, or None: every value judged after it on its
    input set agrees with torch again (those reading it included, and at least one does).
    An error the export makes is passed on; one that vanishes at once was never in the
    file: the ONNX value does not hold what its torch module computes."""
    later = [
        w
        for w in values
        if w.input_set == v.input_set and w.order > v.order and w.status not in _NOT_JUDGED
    ]
    readers = [w for w in later if v.order in w.inputs]
    if not readers or any(w.status != LayerStatus.PASS.value for w in later):
        return None
    return (
        f"matching error: every one of the {len(later)} values after it agrees with torch "
        f"again ({len(readers)} of them read it), so this ONNX value does not hold what "
        f"{v.torch_module or 'its torch value'!r} computes: the pairing is wrong, not the export"
    )


_NOT_JUDGED = frozenset(
    s.value
    for s in (LayerStatus.NOT_COMPARABLE, LayerStatus.NOT_COMPARED, LayerStatus.SHAPE_MISMATCH)
)


def _to_check(flagged: Sequence[LayerValue], each_set: bool) -> list[LayerValue]:
    """The first MAX_CHECKED flagged values; with `each_set`, MAX_CHECKED in all, taken
    input set by input set in turn so that every set's first flagged values are among them."""
    if not each_set:
        return list(flagged[:MAX_CHECKED])
    by_set: dict[int, list[LayerValue]] = {}
    for v in flagged:
        by_set.setdefault(v.input_set, []).append(v)
    chosen: list[LayerValue] = []
    rank = 0
    while len(chosen) < MAX_CHECKED and any(rank < len(vs) for vs in by_set.values()):
        chosen += [vs[rank] for vs in by_set.values() if rank < len(vs)]
        rank += 1
    chosen = chosen[:MAX_CHECKED]
    order = {id(v): k for k, v in enumerate(flagged)}
    return sorted(chosen, key=lambda v: order[id(v)])


def _wanted(
    checked: Sequence[LayerValue],
    s: int,
    selections: Mapping[tuple[str, int], confirm.Selection | confirm.Refused],
    known: Mapping[int, Mapping[str, Pair]],
) -> dict[str, Pair]:
    """ONNX value -> torch pair whose array input set `s` must capture."""
    pairs = known.get(s, {})
    wanted: dict[str, Pair] = {}
    for v in checked:
        if v.input_set != s:
            continue
        sel = selections[(v.onnx_value, s)]
        if isinstance(sel, confirm.Refused):
            continue
        for name in (v.onnx_value, *sel.inputs):
            if name in pairs:
                wanted[name] = pairs[name]
    return wanted


def _capture(
    capture: Any,
    input_set: InputSet,
    wanted: Mapping[str, Pair],
    arrays_of: Callable[[Any], list[np.ndarray]],
    budget: int,
) -> dict[str, np.ndarray]:
    """One torch pass keeping copies of the wanted values (within `budget` bytes)."""
    by_key: dict[str, list[str]] = {}
    leaf: dict[str, int] = {}
    for name, pair in wanted.items():
        by_key.setdefault(pair.key, []).append(name)
        leaf[name] = pair.leaf or 0
    kept: dict[str, np.ndarray] = {}
    used = 0

    def on_value(key: str, value: Any) -> None:
        nonlocal used
        arrays = arrays_of(value)
        if not arrays:
            return
        for name in by_key.get(key, ()):
            if leaf[name] >= len(arrays):
                continue
            array = arrays[leaf[name]]  # one tensor of a tuple (an LSTM's h_n), as compared
            if name in kept or used + array.nbytes > budget:
                continue  # a module called twice: its first call, as compared
            kept[name] = np.array(array, copy=True)
            used += array.nbytes

    if by_key:
        capture.run(input_set, by_key.keys(), on_value)
    return kept


def _check(
    v: LayerValue,
    selection: confirm.Selection | confirm.Refused,
    refs: Mapping[str, np.ndarray],
    input_set: InputSet,
    proto: onnx.ModelProto,
    weights_dir: Path,
    runtime: tuple[str, str],
    exclude: Exclude | None = None,
) -> tuple[Confirmation, ReproCase | None]:
    """Run one flagged value's cut on torch's inputs; the case for a repro when born."""
    provider, opt_level = runtime

    def unconfirmed(reason: str, nodes: int = 0) -> tuple[Confirmation, None]:
        return _confirmation(v, Outcome.UNCONFIRMED, None, nodes, reason), None

    if isinstance(selection, confirm.Refused):
        return unconfirmed(selection.reason)
    n = len(selection.nodes)
    arrays = {**{k: np.asarray(a) for k, a in input_set.feeds.items()}, **refs}
    missing = [i for i in (v.onnx_value, *selection.inputs) if i not in arrays]
    if missing:
        return unconfirmed(
            f"torch's value of {missing[0]!r} was not captured (over the memory budget)", n
        )
    expected = arrays[v.onnx_value]
    inputs = {name: arrays[name] for name in selection.inputs}
    c = confirm.build(proto, selection, inputs, expected, base_dir=weights_dir)
    try:
        got = confirm.run_cut(c, inputs, provider=provider, opt_level=opt_level)
    except OnnxRunError as exc:
        return unconfirmed(exc.message, n)
    stats = value_stats(expected, masked(got, expected, exclude, input_set.index))
    outcome = (
        Outcome.BORN if criterion.reappears(stats, v.max_abs, str(got.dtype)) else Outcome.CARRIED
    )
    confirmation = _confirmation(v, outcome, stats, n, None)
    if outcome is not Outcome.BORN:
        return confirmation, None
    if got.shape != expected.shape:
        c = confirm.with_output_shape(c, got)
    feeds = confirm.feeds_for(c, inputs)
    return confirmation, ReproCase(v, c, feeds, expected, got, provider, opt_level)


def _confirmation(
    v: LayerValue, outcome: Outcome, stats: Any, nodes: int, reason: str | None
) -> Confirmation:
    return Confirmation(
        order=v.order,
        input_set=v.input_set,
        onnx_value=v.onnx_value,
        onnx_node=v.onnx_node,
        onnx_op=v.onnx_op,
        torch_module=v.torch_module,
        outcome=outcome.value,
        max_abs=None if stats is None else (stats.max_abs if stats.shape_ok else None),
        error_ratio=None if stats is None else stats.error_ratio,
        nodes=nodes,
        reason=reason,
    )


def _summary(
    confirmations: Sequence[Confirmation], n_flagged: int, first: LayerValue | None
) -> str:
    counts = {o: sum(1 for c in confirmations if c.outcome == o) for o in Outcome}
    text = (
        f"confirmation: {len(confirmations)} of the {n_flagged} flagged values re-run alone in "
        "ONNX Runtime on torch's values of their inputs: "
        f"{counts[Outcome.BORN]} born, {counts[Outcome.CARRIED]} carried, "
        f"{counts[Outcome.UNCONFIRMED]} unconfirmed"
    )
    if counts[Outcome.MATCHING_ERROR]:
        text += (
            f", {counts[Outcome.MATCHING_ERROR]} matching error(s) (every value after it "
            "agrees again: wrongly paired, not compared)"
        )
    if (
        first is None
        and not counts[Outcome.UNCONFIRMED]
        and not counts[Outcome.MATCHING_ERROR]
        and n_flagged == len(confirmations)
    ):
        text += "; every flagged value agrees alone: the error is carried from no matched op"
    elif counts[Outcome.BORN] == 0:
        text += "; none was confirmed: the first divergence named is the criterion's alone"
    return text
