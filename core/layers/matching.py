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

from dataclasses import dataclass
from typing import Any

from parity.layers.onnx_graph import DYNAMO, LEGACY, GraphIndex, fx_text
from parity.layers.torch_side import FxCapture, HookCapture, exporter_program
from parity.results import InputSet
from parity.signature import OnnxSignature
from parity.sources import TorchSide

FX_NAMES = "fx names"
MODULE_BOUNDARIES = "module boundaries"
NONE = "none"


@dataclass(frozen=True)
class Pair:
    onnx_value: str
    key: str  # FX node name, or module path
    torch_module: str | None
    torch_node: str | None
    candidates: tuple[str, ...] = ()  # module mode: boundary values, last first


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
    if graph.exporter == DYNAMO and side.traceable:
        program, why = exporter_program(model, input_set, signature)
        notes.extend(why)
        if program is not None:
            plan = _fx_plan(model, program, graph, notes)
            if plan.pairs:
                return plan
            notes.extend(plan.notes)
    elif graph.exporter not in (LEGACY, DYNAMO):
        notes.append(
            "the ONNX file carries neither the dynamo exporter's node metadata nor the "
            "legacy exporter's scoped node names (renamed by an optimiser?)"
        )
    if kind == "exported_program":
        if graph.exporter == LEGACY:
            notes.append(
                "a .pt2 has no submodules to hook, and a legacy export has no FX names: "
                "give the model as FILE.py:CALLABLE (+ --weights) to compare module outputs"
            )
        return _nothing(graph, *notes)
    return _module_plan(side, graph, signature, notes, input_set)


def _nothing(graph: GraphIndex, *notes: str) -> Plan:
    return Plan(NONE, (), None, len(graph.values), 0, tuple(notes))


def _fx_plan(model: Any, program: Any, graph: GraphIndex, notes: list[str]) -> Plan:
    capture = FxCapture(
        program,
        _runnable(program),
        tuple(getattr(model, "parameter_names", ())),
        tuple(getattr(model, "positional_names", ())),
    )
    pairs: list[Pair] = []
    renamed = 0
    origins = _output_origins(program, graph)
    unverified = 0
    for v in graph.values.values():
        key = origins.get(v.name, v.name)
        node = capture.nodes.get(key)
        if node is None:
            continue
        if key != v.name and v.fx_node != key:
            unverified += 1  # the producer's own record names another FX node
            continue
        if (v.fx_repr is not None or key != v.name) and fx_text(node.format_node()) != v.fx_repr:
            renamed += 1
            continue
        pairs.append(Pair(v.name, key, v.scope, key))
    matched = {p.key for p in pairs}
    unmatched_torch = sum(
        1 for n in capture.nodes.values() if n.name not in matched and _is_tensor_node(n)
    )
    if renamed:
        notes.append(
            f"{renamed} ONNX values are named like an FX node that computes something else "
            "(the ONNX file was made by another torch version or from another program?): "
            "not compared"
        )
    outputs = sum(1 for p in pairs if p.key != p.onnx_value)
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
    return Plan(
        FX_NAMES,
        tuple(pairs),
        capture,
        len(graph.values) - len(pairs),
        unmatched_torch,
        tuple(notes),
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
    if not hasattr(model.module, "named_modules"):
        return _nothing(graph, *notes, "the torch model has no named_modules() to hook")
    capture = HookCapture(model, signature, call=side.call)
    graph = graph.resolve_legacy(capture.paths)
    boundaries = graph.module_boundaries()
    folds = capture.folds(input_set, boundaries)
    by_value: dict[str, str] = {}
    candidates: dict[str, tuple[str, ...]] = {}
    for path, values in boundaries.items():
        if path not in capture.paths:
            continue
        ordered = tuple(sorted(values, key=lambda n: graph.values[n].order, reverse=True))
        candidates[path] = ordered
        last = ordered[0]
        # nested modules sharing their output value: keep the innermost (longest path)
        if last not in by_value or len(path) > len(by_value[last]):
            by_value[last] = path
    # a folded module's result is what the ONNX value holds: compare it there
    pairs = sorted(
        (
            Pair(value, folds.get(path, path), folds.get(path, path), None, candidates[path])
            for value, path in by_value.items()
        ),
        key=lambda p: graph.values[p.onnx_value].order,
    )
    used = [f"{q} into {p}" for p, q in folds.items() if p in by_value.values()]
    if used:
        notes.append(
            f"{len(used)} modules were folded by the exporter into the op before them "
            f"({', '.join(used[:3])}{', ...' if len(used) > 3 else ''}): their ONNX value is "
            "compared with the folded module's output"
        )
    scoped = set(boundaries) | set(folds.values())
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


def _is_tensor_node(node: Any) -> bool:
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)
