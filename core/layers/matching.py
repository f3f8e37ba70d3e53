"""Pair ONNX values with torch values, at the finest granularity that still matches.

1. FX names (dynamo exports): an ONNX value named like a call_function node of the
   exporter's decomposed program, whose printed FX node (target and argument names, kept in
   the node's ``pkg.torch.onnx.fx_node`` metadata) is the same: the very value the ONNX
   graph computed from that node.
2. Module boundaries (legacy exports, or a dynamo export whose program cannot be rebuilt):
   a module's output (forward hook) pairs with the last value made inside that module's
   scope and read outside it. Nested modules sharing one output value report the innermost.

Anything else is counted as unmatched and said in notes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from parity.layers import fusion, projections, recurrent
from parity.layers.onnx_graph import DYNAMO, DYNAMO_NAMES, LEGACY, UNKNOWN, GraphIndex, fx_text
from parity.layers.torch_side import INPUT, FxCapture, HookCapture, exporter_program
from parity.results import InputSet
from parity.signature import OnnxSignature
from parity.sources import TorchSide

FX_NAMES = "fx names"
MODULE_BOUNDARIES = "module boundaries"
NONE = "none"
NO_METADATA = (
    "the ONNX file carries neither the dynamo exporter's node metadata nor the legacy "
    "exporter's scoped node names (a slimmer such as onnxslim or onnxsim drops them): module "
    "outputs are matched by the weights each node reads (a node reading `fc1.weight` is in "
    "module fc1)"
)


@dataclass(frozen=True)
class Pair:
    onnx_value: str
    key: str  # FX node name, or module path
    torch_module: str | None
    torch_node: str | None
    candidates: tuple[str, ...] = ()  # module mode: boundary values, last first
    leaf: int | None = None  # which tensor of the module's output (an LSTM's h_n: 1)
    feeds: str | None = None  # a module input: the module it feeds (see LayerValue.feeds)
    covers: tuple[str, ...] = ()  # a fused node's output: the modules it stands for


@dataclass(frozen=True)
class Plan:
    matching: str
    pairs: tuple[Pair, ...]  # in ONNX graph order
    capture: Any  # FxCapture | HookCapture | None
    unmatched_onnx: int
    unmatched_torch: int
    notes: tuple[str, ...]


def make_plan(
    model: Any | TorchSide, graph: GraphIndex, input_set: InputSet, signature: OnnxSignature
) -> Plan:
    """How the ONNX values pair with `model`'s (a TorchModel, or a source's TorchSide)."""
    side = model if isinstance(model, TorchSide) else TorchSide(model)
    model = side.model
    if model is None:  # a source without a torch model: nothing to pair (localise asks first)
        return _nothing(graph, side.missing)
    notes: list[str] = [*side.notes]
    kind = getattr(model, "kind", "")
    if kind == "torchscript":
        return _nothing(
            graph,
            "the torch model is TorchScript: its submodules take no forward hooks and its "
            "graph names no ONNX value, so no intermediate value was compared (give the "
            "model as a .pt2 or FILE.py:CALLABLE to localise)",
        )
    if side.scope_prefix:
        graph = graph.rebased(side.scope_prefix)
    slimmed = graph.exporter in (UNKNOWN, DYNAMO_NAMES)
    if graph.exporter in (DYNAMO, DYNAMO_NAMES) and side.traceable:
        program, why = exporter_program(model, input_set, signature)
        notes.extend(why)
        if program is not None:
            plan = _fx_plan(model, program, graph, notes, checked=graph.exporter == DYNAMO)
            if plan.pairs:
                if getattr(model, "program", None) is None and hasattr(
                    model.module, "named_modules"
                ):  # a re-export: checked against eager torch at its outputs (localise)
                    plan.capture.eager = HookCapture(model, signature, call=side.call)
                return plan
            notes.extend(plan.notes)
    if slimmed:
        notes.append(NO_METADATA)
    if kind == "exported_program":
        if graph.exporter == LEGACY:
            notes.append(
                "a .pt2 has no submodules to hook, and a legacy export has no FX names: "
                "give the model as FILE.py:CALLABLE (+ --weights) to compare module outputs"
            )
        return _nothing(graph, *notes)
    return _module_plan(side, graph, signature, notes, input_set)


def eager_plan(
    side: TorchSide, graph: GraphIndex, input_set: InputSet, signature: OnnxSignature, why: str
) -> Plan:
    """The module-boundary plan (eager torch's forward hooks) where the exporter's program
    does not compute what eager torch computes (`why`, said first in its notes)."""
    if side.scope_prefix:
        graph = graph.rebased(side.scope_prefix)
    return _module_plan(side, graph, signature, [*side.notes, why], input_set)


def _nothing(graph: GraphIndex, *notes: str) -> Plan:
    return Plan(NONE, (), None, len(graph.values), 0, tuple(notes))


def _fx_plan(
    model: Any, program: Any, graph: GraphIndex, notes: list[str], *, checked: bool = True
) -> Plan:
    """`checked`: each value's producer records its FX node (the exporter's metadata), and
    a value is compared only where that record is the program's node. Without it (a slimmed
    file) the value's name alone pairs it, and its module is the FX node's."""
    if not checked:
        return _named_fx_plan(model, program, graph, notes)
    capture = _fx_capture(model, program)
    pairs: list[Pair] = []
    renamed: list[str] = []
    origins = _output_origins(program, graph)
    unverified = 0
    items = folded = 0
    for v in graph.values.values():
        key = origins.get(v.name, v.name)
        node = capture.nodes.get(key)
        if node is None:
            continue
        item = _item_of(node)
        if key != v.name and v.fx_node != key and (item is None or item.name != v.fx_node):
            unverified += 1  # the producer's own record names another FX node
            continue
        if (v.fx_repr is not None or key != v.name) and fx_text(node.format_node()) != v.fx_repr:
            source = item
            if source is None or fx_text(source.format_node()) != v.fx_repr:
                renamed.append(f"{v.name!r} ({v.op}, recorded from FX node {v.fx_node!r})")
                continue
            items += 1  # one output of a multi-output node (BatchNorm's getitem), maybe folded
            conv = _folded_module(v, source)
            folded += conv is not None
            pairs.append(Pair(v.name, key, conv or v.scope, key))
            continue
        pairs.append(Pair(v.name, key, v.scope, key))
    layered = recurrent_fx_pairs(graph, capture.nodes)
    pairs.extend(layered)
    if items:
        notes.append(
            f"{items} ONNX values hold one output of a multi-output FX node (a BatchNorm's "
            "getitem, an LSTM's h_n): each is compared with that getitem's value"
            + (
                f"; {folded} of them are Convs into which the exporter's optimiser folded the "
                "BatchNorm after them (same quantity, the BatchNorm's name): named at the Conv"
                if folded
                else ""
            )
        )
    if layered:
        notes.append(recurrent_note(layered))
    if renamed:
        notes.append(
            f"{len(renamed)} ONNX values are named like an FX node of torch's program but "
            "their ONNX producer records another FX node (another program, or a value the "
            "exporter computed from another node), so not compared: "
            f"{', '.join(renamed[:4])}{', ...' if len(renamed) > 4 else ''}"
        )
    outputs = sum(1 for p in pairs if p.key != p.onnx_value and p.onnx_value in graph.outputs)
    if outputs:
        notes.append(
            f"{outputs} graph outputs renamed at export (output_names) were matched to the FX "
            "node the exporter recorded for them, checked against their producer's FX node"
        )
    if unverified:
        notes.append(
            f"{unverified} renamed graph outputs could not be traced to their FX node (the "
            "node that makes them records another one): not compared"
        )
    notes.append(
        f"matched {len(pairs)} ONNX values to FX nodes of the exporter's decomposed "
        "program by name, checked against each node's recorded FX node; the other ONNX "
        "values are internal to one FX node's translation or were folded by the optimiser"
    )
    return _fx_pairs_plan(pairs, capture, graph, notes)


def _named_fx_plan(model: Any, program: Any, graph: GraphIndex, notes: list[str]) -> Plan:
    """A dynamo export without its node metadata: each ONNX value named like an FX node of
    the exporter's program is that node's value (graph outputs renamed by `output_names`:
    the program's user output at the same position); its module is the FX node's own
    (`nn_module_stack`), a folded BatchNorm's output named at the Conv that made it."""
    capture = _fx_capture(model, program)
    origins = _output_origins(program, graph)
    pairs: list[Pair] = []
    for v in graph.values.values():
        key = origins.get(v.name, v.name)
        node = capture.nodes.get(key)
        if node is None or not _is_tensor_node(node):
            continue
        item = _item_of(node)
        module = (_folded_module(v, item) if item is not None else None) or _fx_module(node)
        pairs.append(Pair(v.name, key, module, key))
    pairs.extend(recurrent_fx_pairs(graph, capture.nodes))
    notes.append(
        f"matched {len(pairs)} ONNX values to FX nodes of the exporter's decomposed program by "
        "name alone: the file carries no node metadata to check each against (a slimmer "
        "dropped it); each is named at its FX node's module"
    )
    return _fx_pairs_plan(pairs, capture, graph, notes)


def _fx_capture(model: Any, program: Any) -> FxCapture:
    """The exporter's program, runnable, with the model's parameter and input names."""
    return FxCapture(
        program,
        _runnable(program),
        tuple(getattr(model, "parameter_names", ())),
        tuple(getattr(model, "positional_names", ())),
    )


def _fx_pairs_plan(
    pairs: list[Pair], capture: FxCapture, graph: GraphIndex, notes: list[str]
) -> Plan:
    """Pairs by FX name as a plan: in the graph's order, with the ONNX values and the torch
    tensor nodes none of them pairs counted (both FX plans end here)."""
    pairs.sort(key=lambda p: graph.values[p.onnx_value].order)
    matched = {p.key for p in pairs}
    unmatched_torch = sum(
        1 for n in capture.nodes.values() if n.name not in matched and _is_tensor_node(n)
    )
    return Plan(
        FX_NAMES,
        tuple(pairs),
        capture,
        len(graph.values) - len(pairs),
        unmatched_torch,
        tuple(notes),
    )


def _fx_module(node: Any) -> str | None:
    """The innermost module an FX node was traced in (its `nn_module_stack`)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    return str(list(stack.values())[-1][0]).removeprefix("L['self'].")


def _item_of(node: Any) -> Any:
    """The multi-output FX node that `node` (``operator.getitem(source, k)``) takes one
    output of, else None."""
    import operator

    import torch

    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return node.args[0]
    return None


def _folded_module(v: Any, source: Any) -> str | None:
    """A Conv whose BatchNorm the exporter's optimiser folded into it holds the BatchNorm's
    output under the BatchNorm's name and scope: it is the Conv's module that made it (a
    bug in that Conv is named at that Conv), else None."""
    if v.op != "Conv" or "batch_norm" not in str(source.target):
        return None
    conv = source.args[0] if source.args else None
    stack = getattr(conv, "meta", {}).get("nn_module_stack") or {}
    if not stack or "conv" not in str(getattr(conv, "target", "")):
        return None
    path = str(list(stack.values())[-1][0])
    return path.removeprefix("L['self'].") or None


def recurrent_fx_pairs(graph: GraphIndex, nodes: Mapping[str, Any]) -> list[Pair]:
    """Each ONNX LSTM / GRU / RNN node's outputs paired with its layer of the recurrent FX
    node it was translated from (parity.layers.recurrent)."""
    found: list[Pair] = []
    for name, node in nodes.items():
        if recurrent.fx_kind(str(node.target)) is None:
            continue
        members = [
            v for v in graph.values.values() if v.fx_node == name and v.op in recurrent.ONNX_OPS
        ]
        found += _layer_pairs(members, name, functools.partial(_scope_or, name))
    return found


def _scope_or(name: str, v: Any) -> str:
    """A recurrent value's words: its module scope, else the FX node's name."""
    return v.scope or name


def _always(path: str, _v: Any) -> str:
    """A recurrent value's words: its module's path, whatever the value."""
    return path


def _layer_pairs(members: list[Any], base: str, words: Callable[[Any], str]) -> list[Pair]:
    """Pairs for the outputs of one recurrent call's ONNX nodes: the k-th node (graph
    order) is layer k."""
    orders = sorted({v.order for v in members})
    pairs = []
    for v in members:
        k = orders.index(v.order)
        slot = recurrent.SLOTS[v.slot] if v.slot < len(recurrent.SLOTS) else None
        if slot is None:
            continue
        key = recurrent.layer_key(base, k, slot)
        pairs.append(Pair(v.name, key, v.scope, recurrent.layer_words(words(v), k, slot)))
    return pairs


def recurrent_note(pairs: Sequence[Pair]) -> str:
    return (
        f"{len(pairs)} outputs of ONNX recurrent nodes (LSTM / GRU / RNN, one node per layer: "
        "Y, Y_h, Y_c) are compared with that layer of torch's module, computed layer by layer "
        "from the module's own weights with torch's kernel and put in ONNX's layout [seq, "
        "dirs, batch, hidden] (checked: the layers' stacked h_n is the module's own)"
    )


def _output_origins(program: Any, graph: GraphIndex) -> dict[str, str]:
    """ONNX graph output -> the FX node it was before `output_names` renamed it: what the
    exporter recorded on the output, else the program's user output at the same position
    (the exporter keeps their order). Only candidates: each is checked against the FX node
    its producer records before it is compared."""
    from torch.export.graph_signature import OutputKind, TensorArgument

    specs = [s for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    by_position: dict[str, str] = {}
    if len(specs) == len(graph.outputs) and all(isinstance(s.arg, TensorArgument) for s in specs):
        by_position = {
            out: s.arg.name
            for out, s in zip(graph.outputs, specs, strict=True)
            if out != s.arg.name
        }
    origins = {**by_position, **graph.output_origins}
    return {out: fx for out, fx in origins.items() if out in graph.values}


def _runnable(program: Any) -> Any:
    """program.module() without its guards function (generated Python torch would exec)."""
    try:
        return program.module(check_guards=False)
    except TypeError:  # a torch without the flag
        return program.module()


def _module_plan(
    side: TorchSide,
    graph: GraphIndex,
    signature: OnnxSignature,
    notes: list[str],
    input_set: InputSet,
) -> Plan:
    model = side.model
    if model is None or not hasattr(model.module, "named_modules"):
        return _nothing(graph, *notes, "the torch model has no named_modules() to hook")
    capture = HookCapture(model, signature, call=side.call)
    graph = graph.resolve_legacy(capture.paths)
    boundaries = graph.module_boundaries()
    # a module inside a fused node's span (an Attention's q/k/v Linears) is fused, not folded
    spans = {v.scope for v in graph.values.values() if v.scope and fusion.is_fused_op(v.op)}
    folds = {
        p: q
        for p, q in capture.folds(input_set, boundaries).items()
        if not any(s in spans for s in _scopes_of(q))
    }
    by_value: dict[str, str] = {}
    candidates: dict[str, tuple[str, ...]] = {}
    # a scope with no torch module of its own: a packed or split projection's
    projected = {
        path: made
        for path in boundaries
        if path not in capture.paths
        and (made := projections.projection(path, capture.paths)) is not None
    }
    for path, values in boundaries.items():
        if path not in capture.paths and path not in projected:
            continue
        # last made first; a value a fusion took the meaning of after every other
        ordered = tuple(
            sorted(
                values,
                key=lambda n: (graph.values[n].not_comparable is None, graph.values[n].order),
                reverse=True,
            )
        )
        candidates[path] = ordered
        last = ordered[0]
        # nested modules sharing their output value: keep the innermost (longest path)
        if last not in by_value or len(path) > len(by_value[last]):
            by_value[last] = path
    modules = dict(model.module.named_modules())
    # a folded module's result is what the ONNX value holds: compare it there
    pairs: list[Pair] = []
    for value, path in by_value.items():
        leaf = None
        if recurrent.is_recurrent_module(modules.get(path)):
            leaf = _recurrent_leaf(graph, value)
            if leaf is None:
                notes.append(
                    f"recurrent module {path!r}: its ONNX value {value!r} read outside it is not "
                    "one of the module's outputs moved around (output, h_n, c_n): not compared"
                )
                continue
        if path in projected:
            made = projected[path]
            pairs.append(Pair(value, made.key, made.torch_module, None, candidates[path]))
            continue
        key = folds.get(path, path)
        # a BatchNorm folded into the Conv before it: compared with the BatchNorm's output,
        # named at the Conv's module, whose op made the value (as the dynamo path names it)
        pairs.append(Pair(value, key, path, None, candidates[path], leaf=leaf))
    layered = [
        p
        for path, m in modules.items()
        if recurrent.is_recurrent_module(m)
        for p in _layer_pairs(
            [v for v in graph.values.values() if v.scope == path and v.op in recurrent.ONNX_OPS],
            path,
            functools.partial(_always, path),
        )
    ]
    if layered:
        notes.append(recurrent_note(layered))
    inputs = [
        _input_of(p, projected)
        for p in _input_pairs(graph, modules, [*pairs, *layered], set(by_value.values()))
    ]
    if inputs:
        notes.append(
            f"{len(inputs)} values that the ops between modules (or in a module's own forward) "
            "hand to a matched module are compared with that module's input (forward "
            "pre-hook): an error those ops make is named at them, not at the module after"
        )
    pairs = sorted([*pairs, *layered, *inputs], key=lambda p: graph.values[p.onnx_value].order)
    packed = sorted({made.words for p, made in projected.items() if p in by_value.values()})
    if packed:
        notes.append(
            "projections the file packs or splits where torch does not are compared with "
            f"torch's values put the file's way: {'; '.join(packed)}"
        )
    used = [f"{q} into {p}" for p, q in folds.items() if p in by_value.values()]
    if used:
        notes.append(
            f"{len(used)} modules were folded by the exporter into the op before them "
            f"({', '.join(used[:3])}{', ...' if len(used) > 3 else ''}): their ONNX value is "
            "compared with the folded module's output"
        )
    scoped = set(boundaries) | set(folds.values())
    scoped |= {m for made in projected.values() for m in made.covers}
    pairs = [
        replace(p, covers=fusion.covered(graph, p.onnx_value, capture.paths, scoped))
        if fusion.is_fused_op(graph.values[p.onnx_value].op)
        else p
        for p in pairs
    ]
    unmatched_torch = sum(
        1
        for path, m in model.module.named_modules()
        if path and path not in scoped and not list(m.children())
    )
    notes.append(
        f"matched {len(pairs)} module outputs (forward hooks) to the last ONNX value made "
        "inside each module's scope and read outside it; values inside a module are not "
        "compared one by one"
    )
    if unmatched_torch:
        notes.append(
            f"{unmatched_torch} leaf modules have no scope in the ONNX graph (not called, "
            "or their ops were folded or fused away)"
        )
    return Plan(
        MODULE_BOUNDARIES,
        tuple(pairs),
        capture,
        len(graph.values) - len(pairs),
        unmatched_torch,
        tuple(notes),
    )


def _input_of(pair: Pair, projected: Mapping[str, projections.Projection]) -> Pair:
    """A projection's input pair: the input of the torch module it reads from."""
    made = projected.get(pair.feeds or "")
    if made is None:
        return pair
    return replace(pair, key=made.reads + INPUT, feeds=made.reads)


def _recurrent_leaf(graph: GraphIndex, value: str) -> int | None:
    """Which tensor of an nn.LSTM / GRU / RNN's output (output, h_n, c_n flattened: 0, 1,
    2) the ONNX value is: the recurrent nodes' output slot (Y, Y_h, Y_c) it only moves."""
    ops = {n: (v.op, v.slot) for n, v in graph.values.items()}
    return recurrent.values_slot(graph.inputs_of, ops, value)


_INPUT_CANDIDATES = 4


def _input_pairs(
    graph: GraphIndex, modules: Mapping[str, Any], paired: Sequence[Pair], matched: set[str]
) -> list[Pair]:
    """Each matched module's input where ops outside it made it: the values its nodes read
    from outside its scope (not constants), latest first, as candidates; the one of torch's
    input's shape is compared (parity.layers.localise), unless it is already compared."""
    taken = {p.onnx_value for p in paired}
    reads: dict[str, dict[str, None]] = {path: {} for path in matched if path}
    for v in graph.values.values():
        if v.scope is None:
            continue
        for path in _scopes_of(v.scope):
            if path not in reads:
                continue
            for k, i in enumerate(graph.inputs_of.get(v.name, ())):
                w = graph.values.get(i)
                if w is None or w.op == "Constant" or _inside(w.scope, path):
                    continue
                if w.not_comparable is not None or fusion.summed_input(v.op, k):
                    continue  # no torch value stands for it, or only summed with others
                reads[path][i] = None
    found = []
    for path, sums in _fused_inputs(graph, reads).items():  # a SkipLayerNorm's residual sum
        scope = graph.values[sums].scope
        found.append(Pair(sums, path + INPUT, scope, None, (sums,), feeds=path))
        reads.pop(path)
    for path, names in reads.items():
        ordered = sorted(names, key=lambda n: graph.values[n].order, reverse=True)
        if not ordered or all(n in taken for n in ordered):
            continue
        if len(ordered) > _INPUT_CANDIDATES:
            continue  # too many to tell which is its input
        first = next(n for n in ordered if n not in taken)
        scope = graph.values[first].scope
        holder = modules.get(scope) if scope is not None else None
        code = None if holder is None else f"{type(holder).__name__}.forward"
        found.append(Pair(first, path + INPUT, scope, code, tuple(ordered), feeds=path))
    return found


def _fused_inputs(graph: GraphIndex, paths: Collection[str]) -> dict[str, str]:
    """Module path -> the output of a fused node in its scope that is that module's input
    (SkipLayerNormalization's optional residual sum: parity.layers.fusion.MEANINGS)."""
    found: dict[str, str] = {}
    for v in graph.values.values():
        if (
            v.scope is not None
            and v.scope in paths
            and v.scope not in found
            and fusion.meaning(v.op.rpartition(".")[2], v.slot) == fusion.MODULE_INPUT
        ):
            found[v.scope] = v.name
    return found


def _scopes_of(scope: str) -> list[str]:
    parts = scope.split(".") if scope else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _inside(scope: str | None, path: str) -> bool:
    return scope is not None and (scope == path or scope.startswith(path + "."))


def _is_tensor_node(node: Any) -> bool:
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)
