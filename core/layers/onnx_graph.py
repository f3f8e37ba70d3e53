"""What the ONNX graph says about its values: order, producer, module scope, FX node.

Read once from the file (without weights). Dynamo exports name values after FX nodes and
carry ``pkg.torch.onnx.fx_node`` / ``pkg.torch.onnx.name_scopes`` metadata on every node;
legacy (TorchScript-based) exports spell the module path in node names
(``/encoder/layer.2/attention/output/LayerNorm/LayerNormalization``). Both become one
`GraphValue` per node output, in topological order.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from parity.layers import fusion, projections
from parity.layers.integer_values import integer_meanings, is_inserted_rounding
from parity.load.onnx_read import read_onnx

DYNAMO, LEGACY, UNKNOWN = "dynamo", "legacy", "unknown"
# a dynamo export whose node metadata a slimmer dropped (onnxslim, onnxsim): its nodes keep
# the exporter's names (`node_linear`), its values the FX nodes' names (`linear`)
DYNAMO_NAMES = "dynamo names"
_DYNAMO_NODE = "node_"

_FX_NAME = re.compile(r"^%([\w.]+)\s*:")
_NUM_USERS = re.compile(r"\[num_users=\d+\]\s*")
_FX_TARGET = re.compile(r"call_function\[target=([^\]]+)\]")


@dataclass(frozen=True)
class GraphValue:
    """One node output. `scope` is the named_modules() path of the module that made it
    ("" for the root, None when the file does not say); `fx_node` the FX node it came from."""

    name: str
    order: int
    node: str
    op: str
    scope: str | None
    fx_node: str | None
    fx_target: str | None
    fx_repr: str | None  # the FX node as the exporter printed it (num_users dropped)
    elem_type: int  # onnx.TensorProto element type, 0 when unknown
    slot: int = 0  # which output of its node (an LSTM's Y, Y_h, Y_c: 0, 1, 2)
    # why no torch value stands for it (a fusion took its meaning: parity.layers.fusion)
    not_comparable: str | None = None


@dataclass(frozen=True)
class GraphIndex:
    exporter: str  # DYNAMO | LEGACY | UNKNOWN
    values: Mapping[str, GraphValue]  # node outputs in topological order
    inputs_of: Mapping[str, tuple[str, ...]]  # value -> the values its producer reads
    consumers: Mapping[str, tuple[int, ...]]  # value -> orders of the nodes that read it
    outputs: tuple[str, ...]
    n_nodes: int
    # graph output -> the FX node name the dynamo exporter recorded for it before
    # `output_names` renamed it (``pkg.torch.onnx.original_node_name``), where it differs
    output_origins: Mapping[str, str] = field(default_factory=dict)

    def matched_inputs(self, matched: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """For each matched value, the nearest matched values upstream of it (through
        unmatched values; graph inputs, initializers and constants end a path)."""
        wanted = set(matched)
        memo: dict[str, frozenset[str]] = {}

        def upstream(name: str) -> frozenset[str]:
            # iterative DFS: graphs can be thousands of nodes deep
            stack = [name]
            while stack:
                top = stack[-1]
                if top in memo:
                    stack.pop()
                    continue
                pending = [
                    i
                    for i in self.inputs_of.get(top, ())
                    if i not in wanted and i not in memo and i in self.values
                ]
                if pending:
                    stack.extend(pending)
                    continue
                found: set[str] = set()
                for i in self.inputs_of.get(top, ()):
                    if i in wanted:
                        found.add(i)
                    elif i in memo:
                        found |= memo[i]
                memo[top] = frozenset(found)
                stack.pop()
            return memo[name]

        return {
            name: tuple(sorted(upstream(name), key=lambda n: self.values[n].order))
            for name in self.values
            if name in wanted
        }

    def resolve_legacy(self, paths: Collection[str]) -> GraphIndex:
        """Legacy scopes ("layer2/down/down.0") spelled as named_modules() paths
        ("layer2.down.0"): each part is a path relative to its parent's or grandparent's,
        or (a wrapper calling a grandchild, `self.m.encoder(x)`: scope "encoder") the one
        module below its parent whose path ends with it."""
        if self.exporter != LEGACY:
            return self
        known = set(paths)
        cache: dict[str, str] = {}

        def walk(scope: str) -> str:
            full = ""
            for part in scope.split("/") if scope else []:
                parent = full.rpartition(".")[0]
                for guess in (
                    f"{full}.{part}" if full else part,
                    f"{parent}.{part}" if parent else part,
                    part,
                ):
                    if guess in known:
                        full = guess
                        break
                else:
                    full = _called_through(known, full, part)
            return full

        def resolve(scope: str) -> str:
            """The scope as the file spells it, else as transformers does (GenAI's `attn`:
            parity.layers.projections): whichever names a module, or whose parent does."""
            if scope not in cache:
                tries = [walk(s) for s in dict.fromkeys((scope, projections.respelled(scope)))]
                cache[scope] = next(
                    (t for t in tries if t in known),
                    next((t for t in tries if t.rpartition(".")[0] in known), tries[0]),
                )
            return cache[scope]

        values = {
            n: replace(v, scope=None if v.scope is None else resolve(v.scope))
            for n, v in self.values.items()
        }
        return replace(self, values=values)

    def rebased(self, prefix: str) -> GraphIndex:
        """Dynamo scopes of an export wrapper ("model.model.layers.1") spelled from the
        wrapped module ("model.layers.1"): `prefix` ("model.") dropped where it leads. A
        legacy graph, or one whose scopes do not carry the prefix, is returned as is."""
        head = prefix.rstrip(".")
        if self.exporter == LEGACY or not head:  # dynamo's scopes, or weight names'
            return self
        scopes = [v.scope for v in self.values.values() if v.scope]
        if not scopes or not any(s == head or s.startswith(prefix) for s in scopes):
            return self

        def strip(scope: str | None) -> str | None:
            if scope is None or scope == head:
                return "" if scope == head else scope
            return scope.removeprefix(prefix)

        values = {n: replace(v, scope=strip(v.scope)) for n, v in self.values.items()}
        return replace(self, values=values)

    def module_boundaries(self) -> dict[str, tuple[str, ...]]:
        """module path -> values made inside it and read outside it (or graph outputs), in
        graph order: where that module's output must be."""
        inside: dict[str, list[GraphValue]] = {}
        for v in self.values.values():
            if v.scope is None:
                continue
            for path in _prefixes(v.scope):
                inside.setdefault(path, []).append(v)
        graph_outputs = set(self.outputs)
        order_scope = {v.order: v.scope for v in self.values.values()}
        result: dict[str, tuple[str, ...]] = {}
        for path, members in inside.items():
            if not path:
                continue
            crossing = []
            for v in members:
                readers = self.consumers.get(v.name, ())
                if v.name in graph_outputs or any(
                    not _within(order_scope.get(o), path) for o in readers
                ):
                    crossing.append(v.name)
            if crossing:
                result[path] = tuple(crossing)
        return result


def read_graph(path: str | Path) -> GraphIndex:
    """Index an ONNX file's main graph (weights are not read)."""
    return index_graph(read_onnx(path, external_data=False))


def merged_condition(path: str | Path) -> str | None:
    """The boolean graph input (`use_cache_branch`) of a merged decoder (Optimum's: one If
    on it, whose branches are the decoder without and with past), else None."""
    proto = read_onnx(path, external_data=False)
    return None if _merged_if(proto) is None else proto.graph.node[0].input[0]


def flattened_branch(path: str | Path, value: bool) -> onnx.ModelProto:
    """A merged decoder's branch for its condition's `value` as a plain graph, with the
    file's initializers (external weights stay references to their files; inline ones are
    read once, for this branch only). The values inside an If cannot be graph outputs;
    flattened, the branch is a graph like any export's."""
    proto = read_onnx(path, external_data=False)
    if not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        proto = read_onnx(path)  # inline weights: the flattened graph carries them
    node = _merged_if(proto)
    assert node is not None, "not a merged decoder (see merged_condition)"
    branch = next(
        a.g for a in node.attribute if a.name == ("then_branch" if value else "else_branch")
    )
    graph = proto.graph
    outputs = list(node.output)
    graph.ClearField("node")
    graph.node.extend(branch.node)
    graph.node.extend(
        onnx.helper.make_node("Identity", [b.name], [out], name=f"parity_branch_{out}")
        for b, out in zip(branch.output, outputs, strict=True)
        if b.name != out
    )
    graph.initializer.extend(branch.initializer)
    graph.value_info.extend(branch.value_info)
    return proto


def _merged_if(proto: onnx.ModelProto) -> onnx.NodeProto | None:
    graph = proto.graph
    if len(graph.node) != 1 or graph.node[0].op_type != "If":
        return None
    node = graph.node[0]
    condition = next((i for i in graph.input if i.name == node.input[0]), None)
    if condition is None or condition.type.tensor_type.elem_type != onnx.TensorProto.BOOL:
        return None
    names = {a.name for a in node.attribute}
    return node if {"then_branch", "else_branch"} <= names else None


def index_graph(proto: onnx.ModelProto) -> GraphIndex:
    """Index a model's main graph (its weights are not read)."""
    graph = proto.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in graph.value_info}
    types.update({vi.name: vi.type.tensor_type.elem_type for vi in graph.output})
    dynamo = any(
        p.key == "pkg.torch.onnx.fx_node" for n in graph.node[:50] for p in n.metadata_props
    )
    # legacy: scoped node names, or (a tool renamed the nodes) scoped value names
    legacy = not dynamo and any(_legacy_name(n) for n in graph.node)
    exporter = DYNAMO if dynamo else LEGACY if legacy else UNKNOWN
    if exporter == UNKNOWN and any(n.name.startswith(_DYNAMO_NODE) for n in graph.node):
        exporter = DYNAMO_NAMES
    slimmed = exporter in (UNKNOWN, DYNAMO_NAMES)
    weights, constants = _weight_names(graph) if slimmed else ({}, frozenset())
    values: dict[str, GraphValue] = {}
    inputs_of: dict[str, tuple[str, ...]] = {}
    consumers: dict[str, list[int]] = {}
    lost = {**integer_meanings(graph.node), **fusion.lost_meanings(graph.node)}
    initializers = {t.name for t in graph.initializer}
    for order, node in enumerate(graph.node):
        meta = {p.key: p.value for p in node.metadata_props}
        scope, fx_name, fx_target = _node_scope(node, meta, exporter)
        if slimmed:  # no exporter metadata: the module whose weights the node reads
            scope = weight_scope(node, weights, constants)
        scope = None if is_inserted_rounding(node) else scope
        if exporter == LEGACY and scope == "":
            scope = fusion.fused_scope(node, initializers) or scope
        fx_repr = fx_text(meta["pkg.torch.onnx.fx_node"]) if fx_name else None
        ins = tuple(i for i in node.input if i)
        for i in ins:
            consumers.setdefault(i, []).append(order)
        for slot, out in enumerate(node.output):
            if not out:
                continue
            values[out] = GraphValue(
                name=out,
                order=order,
                node=node.name or f"{node.op_type}_{order}",
                op=node.op_type if not node.domain else f"{node.domain}.{node.op_type}",
                scope=scope,
                fx_node=fx_name,
                fx_target=fx_target,
                fx_repr=fx_repr,
                elem_type=types.get(out, 0),
                slot=slot,
                not_comparable=lost.get(out),
            )
            inputs_of[out] = ins
    return GraphIndex(
        exporter=exporter,
        values=values,
        inputs_of=inputs_of,
        consumers={k: tuple(v) for k, v in consumers.items()},
        outputs=tuple(o.name for o in graph.output),
        n_nodes=len(graph.node),
        output_origins=_output_origins(graph.output),
    )


def _weight_names(graph: onnx.GraphProto) -> tuple[dict[str, str], frozenset[str]]:
    """Value -> the initializer it is (through the Identity nodes exporters put between
    deduplicated initializers and their readers), for the initializers one node reads: an
    initializer several nodes read was shared or deduplicated (every zero bias of a fresh
    model is one tensor), so its name says nothing of which module reads it."""
    names = {t.name: t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Identity" and node.input and node.input[0] in names:
            names[node.output[0]] = names[node.input[0]]
    readers: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Identity":
            continue
        for name in dict.fromkeys(i for i in node.input if i in names):
            readers[names[name]] = readers.get(names[name], 0) + 1
    named = {value: weight for value, weight in names.items() if readers.get(weight) == 1}
    return named, frozenset(names)


def weight_scope(
    node: onnx.NodeProto, weights: Mapping[str, str], constants: Collection[str]
) -> str | None:
    """The module a node belongs to by the weights it reads (`fc1.weight` -> "fc1"), where
    nothing else says: slimmers drop node metadata, never initializer names. None when it
    reads no weight with a state-dict name (`onnx::MatMul_12`, `val_3`: anonymous), or
    only weights (a Transpose of one: no activation of the module's)."""
    if all(name in constants for name in node.input if name):
        return None
    for name in node.input:
        weight = weights.get(name)
        if weight is None or "::" in weight:
            continue
        path, dot, leaf = weight.rpartition(".")
        if dot and path and leaf.isidentifier():
            return path
    return None


def _output_origins(outputs: Iterable[onnx.ValueInfoProto]) -> dict[str, str]:
    origins = {}
    for out in outputs:
        meta = {p.key: p.value for p in out.metadata_props}
        origin = meta.get("pkg.torch.onnx.original_node_name")
        if origin and origin != out.name:
            origins[out.name] = origin
    return origins


def fx_text(formatted: str) -> str:
    """An FX node's printed form without its user count, so two graphs' nodes compare."""
    return _NUM_USERS.sub("", formatted).replace("torch.ops.", "").strip()


def _node_scope(
    node: onnx.NodeProto, meta: Mapping[str, str], exporter: str
) -> tuple[str | None, str | None, str | None]:
    """(module path, FX node name, FX target) of one node, from what its exporter wrote."""
    if exporter == DYNAMO:
        fx = meta.get("pkg.torch.onnx.fx_node", "")
        name = _FX_NAME.match(fx)
        target = _FX_TARGET.search(fx)
        scope = None
        try:
            scopes = ast.literal_eval(meta.get("pkg.torch.onnx.name_scopes", ""))
            if isinstance(scopes, list) and scopes:
                scope = str(scopes[-2]) if len(scopes) >= 2 else ""
        except (ValueError, SyntaxError):
            pass
        return (
            scope,
            name.group(1) if name else None,
            target.group(1).removeprefix("torch.ops.") if target else None,
        )
    if exporter == LEGACY:
        scoped = _legacy_name(node)
        if not scoped:
            return "", None, None
        return "/".join(scoped.split("/")[1:-1]), None, None  # see resolve_legacy
    return None, None, None


def _legacy_name(node: onnx.NodeProto) -> str:
    """The legacy exporter's scoped name of a node (`/fc1/Gemm`), else its first output's
    (`/fc1/Gemm_output_0`: the scopes survive a tool that renames nodes), else ""."""
    if node.name.startswith("/"):
        return node.name
    first = node.output[0] if node.output else ""
    return first if first.startswith("/") else ""


def _called_through(known: Collection[str], full: str, part: str) -> str:
    """The path of scope `part` under `full` when the module was called through an
    attribute chain (`self.m.encoder`): the only known path below `full` ending ".part"."""
    below = f"{full}." if full else ""
    ends = [p for p in known if p.startswith(below) and p.endswith(f".{part}")]
    if len(ends) == 1:
        return ends[0]
    return f"{full}.{part}" if full else part


def _prefixes(scope: str) -> list[str]:
    parts = scope.split(".") if scope else []
    return [""] + [".".join(parts[: i + 1]) for i in range(len(parts))]


def _within(scope: str | None, path: str) -> bool:
    return scope is not None and (scope == path or scope.startswith(path + "."))
