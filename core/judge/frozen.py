"""Frozen at export: the nodes that hold a size (or a branch) tracing froze, named once
confirmed.

When a file with dynamic axes passes at some sizes and fails or raises at others (or fails at
every size), the constants that can hold a size (parity.judge.frozen_graph) are explained as
the input's dims: 3072 = height x width, 8 = height // 8, 1 = batch. The export's size is the
one that explains them best *and* at which the file passes against torch; a node is named
only when the graph with its constant recomputed for a failing size agrees with torch there
(a constant that merely equals a dim, a model's own 8 channels, is dropped by that check). A
branch tracing kept (a Pad run at every size) is named when the graph without it agrees with
torch where torch skipped it. Every check is a real run of ONNX Runtime and torch, through the
`Check` the caller gives; the number of checks is bounded (MAX_CHECKS), and the scoring, the
checks and the re-trace all stop at one time limit (`seconds`).

Agreement is judged against the file's own rounding, not only the user's tolerance (a correct
float32 file can miss atol 1e-5 at its own size): the file "works" at a size where its error
is within float32 rounding of the outputs' scale (ROUNDING_REL), and a recomputed graph agrees
at the failing size when its error is within ROUNDING_MARGIN times the file's own error at its
export size; the file itself must miss that same bound there, or nothing is frozen.

The sentence each `FrozenNode.text` holds is made here, for every front to show as it is.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace

import numpy as np
import onnx

from parity.judge.frozen_budget import (
    ROUNDING_REL,
    Allowance,
    Budget,
    Check,
    FrozenSearch,
    Retrace,
)
from parity.judge.frozen_graph import (
    Suspect,
    branch_suspects,
    model_numbers,
    remade,
    suspects,
    with_constant,
    without_node,
)
from parity.results import FrozenNode

MAX_SIZES = 6  # export sizes tried
MAX_PLANS = 16  # sets of constants recomputed together, tried at a failing size
MAX_GROUPS = 8  # explanations dropped together (every "1 = batch"), subsets over at most 8
CORROBORATED = 8.0  # score a patch grid read both as its tokens and as its sides
MIN_GRID = 3  # a patch grid's side is at least this (a 2 × 3 grid is no ViT's)
ONE_WEIGHT = 0.1  # a 1 read as the batch: the weakest evidence (a shape's own leading 1)
STRIDES = (2, 4, 8, 16, 32)  # a size read after a strided layer: height // 8
MAX_SIZE = 1 << 24  # a larger constant is no size (an INT64_MAX Slice end)
MAX_COMBINATIONS = 6000  # export sizes scored (pure arithmetic), at most
MAX_STRIDED = 512  # a constant above it is not taken for a size // stride
MAX_SPLIT = 8  # a product of two dims is split into sizes at most 8 times apart
ROUNDING_MARGIN = 8.0  # a recomputed graph's error may be this many times the file's own
ROUNDING_FLOOR = 1e-6  # ... and never needs to be below this (8 ulps of the outputs' scale)
OFF_PATCH = 1.5  # how unlikely a size no patch stride divides is, for a file with patches
_BATCH_WORDS = ("batch", "n", "b", "bs", "bsz", "num_samples")


@dataclass(frozen=True)
class Explanation:
    """How one constant element is made of dims: the product of `dims`, divided by `stride`;
    or, with `grid`, a patch grid's tokens: each dim divided by `grid`, multiplied, plus
    `extra` (a ViT's class token: 37 = 48 // 8 × 48 // 8 + 1)."""

    dims: tuple[str, ...]
    stride: int = 1
    grid: int = 0
    extra: int = 0

    def value(self, sizes: Mapping[str, int]) -> int:
        if self.grid:
            return math.prod(sizes[d] // self.grid for d in self.dims) + self.extra
        return math.prod(sizes[d] for d in self.dims) // self.stride

    def weight(self, model_number: bool) -> float:
        if self.grid:  # a patch grid's tokens (+ a class token): a ViT's own count
            base = 4.0
        elif len(self.dims) > 1:
            base = 3.0
        elif self.stride == 1:
            base = 2.0
        else:  # a downsampling by 8 is the field's usual one, then 16 (a ViT's patch)
            base = {8: 1.5, 16: 1.45}.get(self.stride, 1.4)
        return base * (0.25 if model_number else 1.0)

    def words(self) -> str:
        if self.grid:
            text = " × ".join(f"{d} // {self.grid}" for d in self.dims)
            return text + (f" + {self.extra}" if self.extra else "")
        text = " × ".join(self.dims)
        return f"{text} // {self.stride}" if self.stride > 1 else text


_BATCH: ContextVar[frozenset[str]] = ContextVar("parity_frozen_batch", default=frozenset())
# the strides of the file's patch Convs (parity.judge.frozen_graph.patch_strides): a size may be
# a patch grid's side (height // 8) or its tokens (height // 8 × width // 8 + 1)
_PATCHES: ContextVar[tuple[int, ...]] = ContextVar("parity_frozen_patches", default=())


def is_batch(name: str) -> bool:
    """A batch dim: named like one, or (the caller says, find_frozen's `batch`) the first axis
    of an input, as a legacy export's unnamed ``x_dynamic_axes_1`` is."""
    return name in _BATCH.get() or "batch" in name.lower() or name.lower() in _BATCH_WORDS


def find_frozen(
    model: onnx.ModelProto,
    dims: Sequence[str],
    failing: Sequence[Mapping[str, int]],
    passing: Sequence[Mapping[str, int]],
    check: Check,
    retrace: Retrace | None = None,
    seconds: float = math.inf,
    batch: Collection[str] = (),
    patches: Sequence[int] = (),
    allowance: Allowance | None = None,
) -> FrozenSearch:
    """The confirmed frozen nodes of `model` (none when none is confirmed) and the search's
    cost. `dims`: the dynamic dims' names (``height``, or ``x:2`` for an unnamed one);
    `failing` / `passing`: the sizes of the run's input sets that failed or passed;
    `seconds`: nothing (scoring, check, re-trace) starts after that long; `patches`: the
    file's patch strides (a ViT's grid is read from the input's size divided by them);
    `allowance`: the estimated cost the checks may take (None: only MAX_CHECKS and
    `seconds` bound them)."""
    if not failing or not dims:
        return FrozenSearch(())
    token = _BATCH.set(frozenset(batch))
    patched = _PATCHES.set(tuple(patches))
    t0 = time.monotonic()
    budget = Budget(until=t0 + seconds, allowance=allowance)
    try:
        nodes = _find(model, dims, failing, passing, check, retrace, budget)
    finally:
        _PATCHES.reset(patched)
        _BATCH.reset(token)
    return FrozenSearch(
        nodes,
        checks=budget.ran,
        skipped=tuple(budget.skipped),
        stopped=budget.stopped,
        over=budget.over,
        unaffordable=budget.unaffordable,
        seconds=time.monotonic() - t0,
        limit=seconds,
    )


def _find(
    model: onnx.ModelProto,
    dims: Sequence[str],
    failing: Sequence[Mapping[str, int]],
    passing: Sequence[Mapping[str, int]],
    check: Check,
    retrace: Retrace | None,
    budget: Budget,
) -> tuple[FrozenNode, ...]:
    found = _sizes(model, dims, failing[0], passing, check, budget)
    branches = _branches(model, dims, failing[0], passing, check, budget)
    nodes = list(found) + list(branches)
    if retrace is not None and any(n.source is None for n in nodes) and not budget.out_of_time():
        at = next((n.dims for n in nodes if n.dims), None)
        traced = retrace({**failing[0], **(at or {})}) if at else {}
        nodes = [
            n if n.source or n.node not in traced else _with_source(n, traced[n.node])
            for n in nodes
        ]
    return tuple(nodes)


def _with_source(node: FrozenNode, source: str) -> FrozenNode:
    return replace(node, source=source, text=_add_source(node.text, source))


def _add_source(text: str, source: str) -> str:
    return text[:-1] + f" ({source})." if text.endswith(".") else text


# --- sizes -----------------------------------------------------------------------------------


def _strides() -> tuple[int, ...]:
    return STRIDES + tuple(p for p in _PATCHES.get() if p not in STRIDES)


def _all_explanations(dims: Sequence[str]) -> tuple[Explanation, ...]:
    """Every explanation over `dims`, in the order ties are broken (the first wins)."""
    found = [Explanation((d,)) for d in dims]
    found += [Explanation((d,), s) for d in dims if not is_batch(d) for s in _strides()]
    sizes = [d for d in dims if not is_batch(d)]  # height x width, never batch x height
    found += [Explanation(pair) for pair in itertools.combinations(sizes, 2)]
    found += [
        Explanation(pair, grid=p, extra=extra)
        for pair in itertools.combinations(sizes, 2)
        for p in _PATCHES.get()
        for extra in (1, 0)
    ]
    return tuple(found)


def _ties_by_value(sizes: Mapping[str, int]) -> dict[int, list[Explanation]]:
    """Value -> its heaviest explanations at `sizes`, in order (height // 8 and width // 8 at
    a square export): what every element of that value is scored by. A handful of values per
    size, whatever the number of constants: scoring costs the explanations, not the
    elements."""
    ties: dict[int, list[Explanation]] = {}
    for e in _all_explanations(list(sizes)):
        v = e.value(sizes)
        if v < 1 or v > MAX_SIZE or (v == 1 and not (len(e.dims) == 1 and e.stride == 1)):
            continue
        if e.grid and any(sizes[d] // e.grid < MIN_GRID for d in e.dims):
            continue  # 6 tokens are no 2 × 3 grid: a grid that small is no ViT's
        if v == 1 and not is_batch(e.dims[0]):
            continue  # a 1 is a batch's, never a height's
        if v not in ties or e.weight(False) > ties[v][0].weight(False):
            ties[v] = [e]
        elif e.weight(False) == ties[v][0].weight(False):
            ties[v].append(e)
    return ties


def _best_by_value(sizes: Mapping[str, int]) -> dict[int, Explanation]:
    """Value -> its heaviest explanation at `sizes` (the first among equals)."""
    return {v: es[0] for v, es in _ties_by_value(sizes).items()}


def _size_candidates(
    elements: Sequence[tuple[float, bool]],
    dims: Sequence[str],
    budget: Budget | None = None,
) -> list[dict[str, int]]:
    """Export sizes that explain the constants, best first: each one's score sums the weight of
    the best explanation of every element (a product of two dims weighs most; an element equal
    to a weight's size, a model number, little); the squarest split of a product comes first,
    the larger dim first where two are as square. Scoring stops at the budget's time limit."""
    counted = Counter(elements)  # a transformer repeats its shapes in every layer
    by_value: dict[int, list[float]] = {}  # whole value -> [keys, weight factor x count]
    per_dim: dict[str, Counter[int]] = {d: Counter() for d in dims}
    for k, ((value, model_number), n) in enumerate(counted.items()):
        if budget is not None and k % 256 == 0 and budget.out_of_time():
            return []
        if value != int(value) or not 1 <= value <= MAX_SIZE:
            continue
        v = int(value)
        entry = by_value.setdefault(v, [0.0, 0.0])
        entry[0] += 1
        entry[1] += n * (0.25 if model_number else 1.0)
        for d in dims:
            if v == 1 and is_batch(d):
                per_dim[d][1] += 1
            if v >= 2:
                per_dim[d][v] += 1
            if 2 <= v <= MAX_STRIDED:  # a grid read after a stride: height // 8
                per_dim[d].update(v * s for s in _strides())
        for a in range(4, int(math.isqrt(v)) + 1):
            if v % a == 0 and v // a <= MAX_SPLIT * a:  # height x width, roughly square
                for d in dims:
                    per_dim[d].update((a, v // a))
        for p, extra in itertools.product(_PATCHES.get(), (1, 0)):  # a patch grid's tokens
            for a in range(MIN_GRID, int(math.isqrt(max(v - extra, 0))) + 1):
                rest, left = divmod(v - extra, a)
                if not left and rest <= MAX_SPLIT * a:
                    for d in dims:
                        per_dim[d].update((a * p, rest * p))
    scored = []
    keep = max(2, int(MAX_COMBINATIONS ** (1 / max(len(dims), 1))) - 1)
    options = [_options(per_dim[d], d, keep) for d in dims]
    for k, combo in enumerate(itertools.product(*options)):
        if budget is not None and k % 64 == 0 and budget.out_of_time():
            break
        sizes = {d: v for d, v in zip(dims, combo, strict=True) if v is not None}
        if not sizes:
            continue
        score, squareness = 0.0, 0.0
        used: set[str] = set()
        found: set[Explanation] = set()
        for v, tied in _ties_by_value(sizes).items():
            if v not in by_value:
                continue
            e, entry = tied[0], by_value[v]
            score += e.weight(False) * entry[1]
            used.update(d for t in tied for d in t.dims)  # 6 = height // 8 or width // 8
            found.update(tied)
            if len(e.dims) == 2:
                a, b = (sizes[d] for d in e.dims)
                squareness += abs(math.log2(a / b)) * entry[0]
        if used != set(sizes):
            continue  # a size that explains nothing is not recovered
        score += CORROBORATED * _corroborated(found)
        score -= sum(_unlikely(d, v) for d, v in sizes.items())
        if not math.isfinite(score):
            continue  # a size the model cannot run at
        order = tuple(-sizes.get(d, 0) for d in dims)
        scored.append((-score, squareness, order, sizes))
    scored.sort(key=lambda t: (t[0], t[1], t[2]))
    return [s[3] for s in scored[: MAX_SIZES * 4]]


def _corroborated(found: Collection[Explanation]) -> int:
    """Patch grids read twice: as their tokens (37 = height // 8 × width // 8 + 1) and as
    their sides (6 = height // 8, 6 = width // 8), in the same stride. Two readings of one
    size agreeing are what a ViT's frozen grid leaves; a head count or a model's own 4 is
    read once."""
    sides = {(e.dims[0], e.stride) for e in found if len(e.dims) == 1 and e.stride > 1}
    return sum(1 for e in found if e.grid and all((d, e.grid) in sides for d in e.dims))


def _options(counts: Counter[int], dim: str, keep: int) -> list[int | None]:
    """The sizes a dim may have had, most constants explained first, at most `keep`, and
    None (the dim explains nothing); a batch of 1 always among them where a 1 is seen (one
    distinct value counts less than a size every stride of every value proposes)."""
    ranked = sorted(counts, key=functools.partial(_rank_size, counts, dim))[:keep]
    if is_batch(dim) and counts[1] and 1 not in ranked:
        ranked.append(1)
    return [*ranked, None]


def _rank_size(counts: Counter[int], dim: str, size: int) -> tuple[int, float]:
    """Sort key of a size a dim may have had: most constants explained first, then likely."""
    return (-counts[size], _unlikely(dim, size))


def _unlikely(dim: str, size: int) -> float:
    """How unlikely a size is for an export: a batch of 1 a little (the constant could be
    something else), a height or a sequence under 16 or over 4096 more, by octave; in a file
    with patch Convs, a size none of their strides divides most."""
    if is_batch(dim):
        return 0.5 if size == 1 else 0.0
    patches = _PATCHES.get()
    if patches and size < min(patches):
        return math.inf  # not one patch: the model cannot run there
    if patches and all(size % p for p in patches):
        return OFF_PATCH  # a patch Conv would drop the last pixels: not an export's size
    if size < 16:
        return 0.5 * math.log2(16 / size)
    return 0.5 * math.log2(size / 4096) if size > 4096 else 0.0


def _sizes(
    model: onnx.ModelProto,
    dims: Sequence[str],
    failing: Mapping[str, int],
    passing: Sequence[Mapping[str, int]],
    check: Check,
    budget: Budget,
) -> list[FrozenNode]:
    found = suspects(model)
    if not found or budget.out_of_time():
        return []
    numbers = model_numbers(model)
    elements = [(v, int(v) in numbers) for s in found for v in s.values]
    export = None
    tried = 0
    candidates = _passing_sizes(elements, dims, passing)
    candidates += [c for c in _size_candidates(elements, dims, budget) if c not in candidates]
    for sizes in candidates:
        if tried >= MAX_SIZES or not budget.take():
            break
        outcome = budget.run(check, {**failing, **sizes}, None)
        if outcome is None:
            continue  # torch cannot run there, or its memory is over the budget
        tried += 1
        if outcome.passed or outcome.error <= ROUNDING_REL:  # the file works at its size
            export = sizes
            # agreement elsewhere is judged against the file's own error here
            budget.bound = min(ROUNDING_REL, max(ROUNDING_MARGIN * outcome.error, ROUNDING_FLOOR))
            break
    if export is None:
        return []
    if not budget.take() or budget.agrees(budget.run(check, failing, None)):
        return []  # the failing size is off by rounding only: nothing frozen to explain
    export = _without_free_batch(export, failing, check, budget)
    full = {**failing, **export}
    for plan in _plans(found, export, numbers):
        if not plan or not budget.take():
            continue
        changes = {(s.position, s.slot): _recomputed(s, es, failing, model) for s, es in plan}
        if budget.agrees(budget.run(check, failing, with_constant(model, changes))):
            plan = _needed(model, _changed(plan, failing), failing, check, budget)
            return [_size_node(s, es, export, full) for s, es in plan]
    return []


def _passing_sizes(
    elements: Sequence[tuple[float, bool]],
    dims: Sequence[str],
    passing: Sequence[Mapping[str, int]],
) -> list[dict[str, int]]:
    """The sizes of the run's sets where the file works, each cut to the dims that explain a
    constant there, tried before any size the constants alone suggest: a square 32 x 32
    export's [32, 32] reads as height x width = 8 x 4 by the constants, and the set that
    passed at 32 x 32 says which reading the export took."""
    values = {int(v) for v, _ in elements if v == int(v) and 1 <= v <= MAX_SIZE}
    out: list[dict[str, int]] = []
    for p in passing:
        sizes = {d: p[d] for d in dims if d in p}
        used = {
            d
            for v, tied in _ties_by_value(sizes).items()
            if v in values
            for t in tied
            for d in t.dims
        }
        kept = {d: v for d, v in sizes.items() if d in used}
        if kept and kept not in out:
            out.append(kept)
    return out


def _without_free_batch(
    export: dict[str, int], failing: Mapping[str, int], check: Check, budget: Budget
) -> dict[str, int]:
    """The export's size without a batch dim the file takes at any value: where it works at
    the failing set's batch too (one check), no constant is the batch (a head count of 4
    that scored the export's batch 4 is left alone)."""
    for d in [d for d in export if is_batch(d) and failing.get(d, export[d]) != export[d]]:
        moved = {**failing, **export, d: failing[d]}
        if len(export) > 1 and budget.take() and budget.agrees(budget.run(check, moved, None)):
            export = {k: v for k, v in export.items() if k != d}
    return export


def _changed(
    plan: list[tuple[Suspect, tuple[Explanation | None, ...]]], failing: Mapping[str, int]
) -> list[tuple[Suspect, tuple[Explanation | None, ...]]]:
    """The plan without explanations it did not act on: an element whose recomputed value at
    the failing size is its own (a baked [1, 4]'s 4 taken for height // 8 where the height
    is the export's) is no evidence, and a node none of whose elements changed is not named.
    The graph checked is the same."""
    kept = []
    for s, es in plan:
        acted = tuple(
            e if e is not None and e.value(failing) != v else None
            for v, e in zip(s.values, es, strict=True)
        )
        if any(e is not None for e in acted):
            kept.append((s, acted))
    return kept or plan


def _needed(
    model: onnx.ModelProto,
    plan: list[tuple[Suspect, tuple[Explanation | None, ...]]],
    failing: Mapping[str, int],
    check: Check,
    budget: Budget,
) -> list[tuple[Suspect, tuple[Explanation | None, ...]]]:
    """The confirmed plan without the nodes it agrees without (a Slice end that clamps alike
    at any size): each node named is one whose recomputed constant the agreement needs."""
    kept = list(plan)
    for item in list(plan):
        if len(kept) == 1 or not budget.take():
            break
        rest = [x for x in kept if x is not item]
        changes = {(s.position, s.slot): _recomputed(s, es, failing, model) for s, es in rest}
        if budget.agrees(budget.run(check, failing, with_constant(model, changes))):
            kept = rest
    return kept


def _recomputed(
    s: Suspect,
    es: tuple[Explanation | None, ...],
    sizes: Mapping[str, int],
    model: onnx.ModelProto,
) -> np.ndarray:
    """The constant as it would be at `sizes`: each explained element recomputed (a baked
    tensor: one of the recomputed shape, filled as the file's is)."""
    values = [e.value(sizes) if e else v for v, e in zip(s.values, es, strict=True)]
    if s.per:  # scales: the sizes over the input's
        return np.array(values, dtype=np.float64) / np.array(s.per, dtype=np.float64)
    if not s.baked:
        return np.array(values)
    return remade(model, s, tuple(int(v) for v in values))


def _plans(
    found: Sequence[Suspect], export: Mapping[str, int], numbers: frozenset[int]
) -> list[list[tuple[Suspect, tuple[Explanation | None, ...]]]]:
    """Which constants to recompute, most likely first: every explained element; then without
    whole explanations (every "1 = batch" dropped together: a shape's leading 1 is more
    often the model's own than the batch), fewest dropped first; then without single
    elements, the weakest first. Within one constant, a value that ties (6 = height // 8 and
    6 = width // 8 at a square export) takes the tied explanations in turn."""
    ties = _ties_by_value(export)
    explained: list[tuple[Suspect, int, Explanation, float]] = []
    for s in found:
        seen: Counter[int] = Counter()
        for k, v in enumerate(s.values):
            options = ties.get(int(v)) if v == int(v) and 1 <= v <= MAX_SIZE else None
            if not options or _fixed_axis(s, k):
                continue
            e = options[seen[int(v)] % len(options)]
            seen[int(v)] += 1
            if v != 1 or e.dims[0] in export:
                weight = ONE_WEIGHT if v == 1 else e.weight(int(v) in numbers)
                explained.append((s, k, e, weight))
    if not explained:
        return []

    def plan(keep: Sequence[tuple[Suspect, int, Explanation, float]]):
        by_node: dict[tuple[int, int], tuple[Suspect, list[Explanation | None]]] = {}
        for s, k, e, _ in keep:
            entry = by_node.setdefault((s.position, s.slot), (s, [None] * len(s.values)))
            entry[1][k] = e
        return [(s, tuple(es)) for s, es in by_node.values()]

    weights: dict[tuple, float] = {}
    for t in explained:
        weights[_group(t[2])] = weights.get(_group(t[2]), 0.0) + t[3]
    groups = list(weights)[:MAX_GROUPS]
    # subsets of whole explanations, fewest dropped first, the lightest dropped first
    dropping = [c for n in range(len(groups)) for c in itertools.combinations(groups, n)]
    dropping.sort(key=lambda gone: (len(gone), sum(weights[g] for g in gone)))
    by_group = ([t for t in explained if _group(t[2]) not in gone] for gone in dropping[:MAX_PLANS])

    # subsets, fewest dropped first, the heaviest kept first among as many dropped; made
    # lazily: thousands of explained elements must not make millions of subsets
    def subsets():
        for n in range(len(explained)):
            for dropped in itertools.combinations(range(len(explained)), n):
                gone = set(dropped)
                yield [t for i, t in enumerate(explained) if i not in gone]

    chosen = list(itertools.islice(subsets(), MAX_PLANS * 4))
    chosen.sort(key=lambda kept: (len(explained) - len(kept), -sum(t[3] for t in kept)))
    plans: dict[tuple[tuple[int, int], ...], list] = {}
    for kept in [*itertools.islice(by_group, MAX_PLANS - 4), *chosen]:
        key = tuple((id(t[0]), t[1]) for t in kept)
        if kept and key not in plans:
            plans[key] = plan(kept)
    return list(plans.values())[:MAX_PLANS]


def _fixed_axis(s: Suspect, k: int) -> bool:
    """Element `k` of a Resize's sizes is an axis no input size sets: its channels (1 of N, C,
    H, W), and its N too where it resizes a learned tensor (a position grid's own 1)."""
    if s.op not in ("Resize", "Upsample") or len(s.values) < 3:
        return False
    return k == 1 or (k == 0 and s.learned is not None)


def _group(e: Explanation) -> tuple[tuple[str, ...], int, int]:
    """The explanations recomputed together: a size read once and written in several places
    (every "1 = batch", every "6 = height // 8")."""
    return e.dims, e.stride, e.grid


def _size_node(
    s: Suspect,
    es: tuple[Explanation | None, ...],
    export: Mapping[str, int],
    full: Mapping[str, int],
) -> FrozenNode:
    used = dict.fromkeys(d for e in es if e is not None for d in e.dims)
    dims = {d: int(full[d]) for d in used}
    return FrozenNode(
        node=s.node,
        op=s.op,
        kind="size",
        constant=tuple(v / p for v, p in zip(s.values, s.per, strict=True)) if s.per else s.values,
        dims=dims,
        source=s.source,
        confirmed=True,
        text=size_text(s, es, dims),
    )


def _number(v: float) -> str:
    return f"{int(v)}" if v == int(v) else f"{v:g}"


def size_text(s: Suspect, es: tuple[Explanation | None, ...], dims: Mapping[str, int]) -> str:
    """The sentence: "This export only works at its own size: node '/Div' divides by 3072,
    which is height × width at the export's 64 × 48 (models.py:18)."."""
    values = " × ".join(_number(v) for v in s.values)
    does = {
        "Div": f"divides by {values}",
        "Mul": f"multiplies by {values}",
        "Reshape": f"reshapes to {values}",
        "Resize": f"resizes to {values}",
        "Expand": f"expands to {values}",
        "Tile": f"tiles by {values}",
        "Pad": f"pads by {values}",
        "ConstantOfShape": f"makes a tensor of shape {values}",
        "Range": f"counts to {values}",
    }.get(s.op, f"({s.op}) holds the constant {values}")
    if s.baked:
        does = f"({s.op}) reads a tensor made at the export's size, of shape {values}"
        if s.baked == "range":
            does = f"({s.op}) reads a range made at the export's size, of length {values}"
    explained = [(v, e) for v, e in zip(s.values, es, strict=True) if e is not None]
    if s.learned is not None and s.op in ("Resize", "Upsample"):
        does = _resized(s, es, values)
    if len(s.values) == 1 and explained:
        which = f"which is {explained[0][1].words()}"
    else:
        which = "where " + " and ".join(f"{_number(v)} = {e.words()}" for v, e in explained)
    if len(dims) > 1 and all(not is_batch(d) for d in dims):
        at = " × ".join(str(v) for v in dims.values())
    else:
        at = ", ".join(f"{d} {v}" for d, v in dims.items())
    where = f" ({s.source})" if s.source else ""
    return (
        f"This export only works at its own size: node {s.node!r} {does}, {which} at the "
        f"export's {at}{where}."
    )


def _resized(s: Suspect, es: tuple[Explanation | None, ...], values: str) -> str:
    """ "resizes the learned tensor 'pos' (1 × 32 × 4 × 4) to a position grid frozen at 6 × 6
    (1 × 32 × 6 × 6)": a Resize of a learned tensor whose last two sizes are the input's
    height and width over a stride is a position grid (or another learned map) the export
    froze at its own input's grid."""
    assert s.learned is not None
    name, shape = s.learned
    tensor = f"the learned tensor {name!r} ({' × '.join(str(d) for d in shape)})"
    last = es[-2:]
    strided = [e for e in last if e is not None and len(e.dims) == 1 and e.stride > 1]
    if len(s.values) >= 2 and len(strided) == 2 and strided[0].dims != strided[1].dims:
        grid = " × ".join(_number(v) for v in s.values[-2:])
        whole = f" ({values})" if len(s.values) > 2 else ""
        if s.per:  # the file holds scales: say them beside the sizes they make
            scales = " × ".join(_number(v / p) for v, p in zip(s.values, s.per, strict=True))
            whole = f" ({values}, by the scales {scales})"
        return f"resizes {tensor} to a position grid frozen at {grid}{whole}"
    return f"resizes {tensor} to {values}"


# --- branches ---------------------------------------------------------------------------------


def _branches(
    model: onnx.ModelProto,
    dims: Sequence[str],
    failing: Mapping[str, int],
    passing: Sequence[Mapping[str, int]],
    check: Check,
    budget: Budget,
) -> list[FrozenNode]:
    """A Pad (computed amount) that torch skips at the failing size: the graph without it
    agrees with torch there, and the file passes at a size where torch pads too."""
    found = branch_suspects(model)
    if not found or budget.out_of_time():
        return []
    if budget.left < 2 or not budget.take() or budget.agrees(budget.run(check, failing, None)):
        return []  # the failing size is off by rounding only: no branch to explain
    named = []
    for s in found:
        if not budget.take():
            continue
        if not budget.agrees(budget.run(check, failing, without_node(model, s.position))):
            continue
        taken = _where_taken(dims, failing, passing, check, budget)
        if taken is None:
            continue
        named.append(
            FrozenNode(
                node=s.node,
                op=s.op,
                kind="branch",
                constant=(),
                dims=taken,
                source=s.source,
                confirmed=True,
                text=branch_text(s, failing, taken),
            )
        )
    return named


def _where_taken(
    dims: Sequence[str],
    failing: Mapping[str, int],
    passing: Sequence[Mapping[str, int]],
    check: Check,
    budget: Budget,
) -> dict[str, int] | None:
    """The dims at which the file passes (the branch taken, as at export): a passing set's, or
    the failing size with one dim moved by 8 or 16 (the dim that decides it)."""
    for sizes in passing:
        changed = {d: int(sizes[d]) for d in dims if sizes.get(d) != failing.get(d)}
        if changed:
            return changed
    for step in (8, 16):
        for d in dims:
            if is_batch(d) or not budget.take():
                continue
            moved = {**failing, d: failing[d] + step}
            if budget.agrees(budget.run(check, moved, None)):
                return {d: moved[d]}
    return None


def branch_text(s: Suspect, failing: Mapping[str, int], taken: Mapping[str, int]) -> str:
    at = ", ".join(f"{d} {failing[d]}" for d in taken)
    works = ", ".join(f"{d} {v}" for d, v in taken.items())
    where = f" ({s.source})" if s.source else ""
    return (
        f"This export kept the branch its own size took: node {s.node!r} ({s.op}) runs at "
        f"every size, but the torch model skips it at {at}, where the file is wrong; it "
        f"agrees with torch at {works}{where}."
    )
