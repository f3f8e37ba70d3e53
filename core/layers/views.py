"""Small reductions of a LayersResult that every view shares (figures, page, HTML, Model Explorer).

A LayersResult holds one LayerValue per (compared ONNX value, input set). Views want one number
per value (its worst input set), per module subtree (its worst value), and one sentence for the
first divergence; each is decided here once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parity.labels import OUTSIDE_MODULES
from parity.layers.result import LayerStatus
from parity.show.births import birth_place, born_before
from parity.text import number_text, ratio_text

if TYPE_CHECKING:
    from parity.layers.result import KeptValue, LayersResult, LayerValue

METRICS = {"error_ratio": "error ratio", "max_abs": "max |error|", "max_rel": "max rel error"}
"""The per-value numbers a view can be drawn in (LayerValue attribute -> label)."""

ROOT_LABEL = "(model)"


def metric_of(value: LayerValue, metric: str) -> float | None:
    """`value`'s number for `metric` as a float, None when undefined (NaN counts as +inf:
    a NaN error is never better than a finite one). A value no torch value stands for
    (`not_comparable`: a fusion took its meaning) has none: its numbers compare unrelated
    things, so no view colours or ranks by them."""
    if str(value.status) == LayerStatus.NOT_COMPARABLE:
        return None
    x = getattr(value, metric, None)
    if x is None:
        return None
    x = float(x)
    return math.inf if math.isnan(x) else x


def worst_per_value(values: Iterable[LayerValue], metric: str) -> dict[str, LayerValue]:
    """For each ONNX value, its LayerValue at the input set where `metric` is worst."""
    best: dict[str, LayerValue] = {}
    for v in values:
        current = best.get(v.onnx_value)
        if current is None or _rank(v, metric) > _rank(current, metric):
            best[v.onnx_value] = v
    return best


def _rank(v: LayerValue, metric: str) -> tuple[int, float]:
    x = metric_of(v, metric)
    return (int(is_divergent(v)), -1.0 if x is None else x)


def is_divergent(v: LayerValue) -> bool:
    """The error is born at this value (a jump, one-sided NaN/Inf, a shape mismatch)."""
    try:
        return LayerStatus(str(v.status)).born
    except ValueError:  # a status this version does not know: not a divergence
        return False


def input_sets(values: Iterable[LayerValue]) -> list[int]:
    return sorted({int(v.input_set) for v in values})


@dataclass(frozen=True)
class ModuleNode:
    """One module path of the tree (``""`` is the model itself), with its subtree's numbers."""

    path: str
    parent: str | None
    label: str
    n_values: int  # compared values in the subtree (the icicle's widths)
    n_own: int  # of which computed by this module itself, not by a child (e.g. a residual add)
    own_worst: float | None
    own_divergent: int
    n_divergent: int
    worst: float | None  # worst metric over the subtree and every input set
    worst_value: str  # the ONNX value where that worst sits
    worst_op: str
    on_divergence_path: bool  # the first divergence lies in this subtree


def module_tree(result: LayersResult, metric: str) -> list[ModuleNode]:
    """Module paths (as `named_modules()` spells them) with their subtree's worst value.

    Values without a torch module hang on the model itself. Each node comes after its
    children (plotly does not mind); siblings keep the order the graph runs them in.
    """
    own: dict[str, list[LayerValue]] = {}
    for v in worst_per_value(result.values, metric).values():
        own.setdefault(v.torch_module or "", []).append(v)
    paths: set[str] = {""}
    first_order: dict[str, int] = {}  # children are drawn in the order the graph runs them
    for path, mine in own.items():
        parts = path.split(".") if path else []
        start = min(v.order for v in mine)
        for i in range(0, len(parts) + 1):
            prefix = ".".join(parts[:i])
            paths.add(prefix)
            first_order[prefix] = min(first_order.get(prefix, start), start)
    first = result.first_divergence
    first_path = (first.torch_module or "") if first is not None else None
    children: dict[str, list[str]] = {}
    for p in paths:
        if p:
            children.setdefault(p.rpartition(".")[0], []).append(p)
    nodes: dict[str, ModuleNode] = {}

    def build(path: str) -> ModuleNode:
        kids = [build(c) for c in sorted(children.get(path, []), key=first_order.__getitem__)]
        mine = own.get(path, [])
        worst_v = max(mine, key=lambda v: _rank(v, metric), default=None)
        worst = metric_of(worst_v, metric) if worst_v is not None else None
        where = (worst_v.onnx_value, worst_v.onnx_op) if worst_v is not None else ("", "")
        for k in kids:
            if k.worst is not None and (worst is None or k.worst > worst):
                worst, where = k.worst, (k.worst_value, k.worst_op)
        node = ModuleNode(
            path=path,
            parent=None if not path else path.rpartition(".")[0],
            label=path.rpartition(".")[2] if path else ROOT_LABEL,
            n_values=len(mine) + sum(k.n_values for k in kids),
            n_own=len(mine),
            own_worst=metric_of(worst_v, metric) if worst_v is not None else None,
            own_divergent=sum(is_divergent(v) for v in mine),
            n_divergent=sum(is_divergent(v) for v in mine) + sum(k.n_divergent for k in kids),
            worst=worst,
            worst_value=where[0],
            worst_op=where[1],
            on_divergence_path=first_path is not None
            and (path == "" or first_path == path or first_path.startswith(path + ".")),
        )
        nodes[path] = node
        return node

    build("")
    return list(nodes.values())


def fmt(x: float | None, digits: int = 3) -> str:
    """Layers numbers: parity.text's policy at `digits` significant digits."""
    return number_text(x, digits)


def divergence_sentence(result: LayersResult) -> str:
    """The first divergence in words (plain text: names are the user's, never markup)."""
    first = result.first_divergence
    if first is None:
        if not result.matched:
            return (
                "No intermediate value could be matched between torch and ONNX: nothing compared."
            )
        return (
            f"No divergence: none of the {result.matched} matched intermediate values jumps "
            "above what flows into it."
        )
    where = first.torch_module or OUTSIDE_MODULES
    place = place_words(result, first)
    parts = [
        f"The export starts to diverge in {place}, not in {first.feeds} after them (value "
        f"{first.onnx_value}, input set {first.input_set})"
        if place is not None
        else f"The export starts to diverge in {where}, {birth_place(first, 'its')} "
        f"(value {first.onnx_value}, input set {first.input_set})"
        if born_before(first)
        else f"The export starts to diverge in {where}: {first.onnx_op} node {first.onnx_node} "
        f"(value {first.onnx_value}, input set {first.input_set})"
    ]
    numbers = [f"max |error| {fmt(first.max_abs)}"]
    if first.error_ratio is not None:
        numbers.append(f"error ratio {fmt(first.error_ratio)}")
    numbers.append(jump_words(first))
    return parts[0] + "; " + ", ".join(numbers) + "."


def place_words(result: LayersResult, v: LayerValue) -> str | None:
    """Where a value that ops between modules made is, in words ("the ops of Net.forward
    between 'conv' and 'fc': Div '/Div'"), for a value compared as a module's input
    (`feeds`); None for any other value (its module says where it is)."""
    if v.feeds is None:
        return None
    code = v.torch_node or (
        f"{v.torch_module!r}'s forward" if v.torch_module else "the top-level forward"
    )
    before = sorted(
        {
            w.torch_module
            for w in result.values
            if w.input_set == v.input_set and w.order in v.inputs and w.torch_module
        }
    )
    after = f"before {v.feeds!r}"
    if before:
        after = f"between {', '.join(repr(b) for b in before)} and {v.feeds!r}"
    ops = f": {', '.join(v.ops)}" if v.ops else f" ({v.onnx_op} {v.onnx_node!r})"
    return f"the ops of {code} {after}{ops}"


def jump_words(v: LayerValue) -> str:
    """How big the jump is, against what it is measured (the error flowing in, or the noise
    floor when no matched value feeds it)."""
    if v.jump is None:
        return "no jump measured"
    if not v.inputs:
        return f"{ratio_text(v.jump)} the noise floor (no matched value feeds it)"
    return f"{ratio_text(v.jump)} the largest error flowing into it"


def limits(result: LayersResult) -> list[str]:
    """What was not compared, in words: unmatched values on either side and the engine's notes."""
    lines = []
    if result.unmatched_onnx:
        lines.append(f"{result.unmatched_onnx} ONNX value(s) have no torch counterpart.")
    if result.unmatched_torch:
        lines.append(f"{result.unmatched_torch} torch value(s) have no ONNX counterpart.")
    lines.extend(str(n) for n in result.notes)
    return lines


def ordered(values: Sequence[LayerValue]) -> list[LayerValue]:
    return sorted(values, key=lambda v: (v.order, v.input_set))


def kept(result: LayersResult, order: int, input_set: int) -> KeptValue | None:
    """Both sides' arrays of one value when the engine kept them, else None."""
    return result.kept_value(int(order), int(input_set))


def pass_line(result: LayersResult, metric: str, atol: float) -> float | None:
    """The line a view draws as "pass": the criterion's threshold, or atol for max |error|."""
    if metric == "max_abs":
        return atol
    return result.threshold if metric == "error_ratio" else None


def find_value(result: LayersResult, order: int, input_set: int) -> LayerValue | None:
    for v in result.values:
        if v.order == int(order) and v.input_set == int(input_set):
            return v
    return None
