"""Load an ONNX file (external data beside it included), check it, read its signature.

The graph is read without its weights (``load_external_data=False``) and checked from the
*path*, so a model whose weights live in external-data files, or exceed protobuf's 2 GB, is
read without pulling gigabytes into memory. Every way a file can be unusable (missing,
truncated, not ONNX, rejected by ``onnx.checker``, refused by ONNX Runtime) becomes one
``OnnxLoadError`` line: ``cannot load ONNX file X: <cause>``.

A file that ONNX Runtime runs is never refused by the stricter checker for what ONNX
Runtime itself accepts: nodes out of order (its own float16 converter emits its input casts
after their readers) and ops it registers in the default domain that ONNX does not
(`SimplifiedLayerNormalization`, written by ONNX Runtime GenAI's model builder). Such a file
is accepted when the rest of it passes the checker (its nodes sorted, those ops set apart);
the complaint becomes one of the model's `notes`. Contrib ops in their own domain
(`com.microsoft`) the checker leaves alone already.

Contract:
@dataclass(frozen=True) class OnnxModel: path: Path; signature: OnnxSignature; sha256: str;
    notes: tuple[str, ...] = ()
load_onnx(path) -> OnnxModel            raises OnnxLoadError (one line: what and where)
make_session(model: OnnxModel, *, provider="CPUExecutionProvider", opt_level="all")
    -> OrtSession                      opt_level in ORT_OPT_LEVELS; raises OnnxLoadError
ORT_OPT_LEVELS = ("disable", "basic", "extended", "all")
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import onnx
from onnx import TensorProto

from parity.errors import OnnxLoadError, ParityError, RunTimeout, UsageError, first_line
from parity.files.hashing import update_with_file, update_with_range
from parity.files.kinds import not_a_regular_file
from parity.files.safe_read import open_regular
from parity.load.dtypes import from_onnx_elem_type
from parity.load.provider_precision import has_sixteen_bit
from parity.load.sessions import ORT_OPT_LEVELS, OrtSession, open_session
from parity.load.training_mode import training_nodes
from parity.signature import Dim, OnnxSignature, TensorSpec

if TYPE_CHECKING:
    pass

MAX_PROTO = 2 << 30  # protobuf cannot parse more; weights past it live in external data


@dataclass(frozen=True)
class OnnxModel:
    path: Path
    signature: OnnxSignature
    sha256: str
    notes: tuple[str, ...] = ()  # what was accepted though a checker complained
    # the main graph's op types, read once with the file: an analysis asks this, never the path
    op_types: frozenset[str] = frozenset()
    # nodes exported in training mode, by op (parity.load.training_mode), read once here
    training: tuple[tuple[str, int], ...] = ()
    producer: str = ""  # producer_name: "pytorch" for an export, a converter's name else
    # what a conversion adds: op domains beyond ONNX's (ORT's fused ops), 16-bit values
    domains: frozenset[str] = frozenset()
    sixteen_bit: bool = False


def load_onnx(path: str | os.PathLike[str]) -> OnnxModel:
    """Read, check and describe an ONNX file; external-data files are looked up beside it."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise _load_error(p, "no such file")
    try:  # a regular file only (a FIFO or /dev/zero is named), read at most protobuf's 2 GiB
        with open_regular(p, what="ONNX file", limit=MAX_PROTO, error=OnnxLoadError) as fh:
            proto = onnx.load(fh, load_external_data=False)
    except OnnxLoadError:
        raise
    except Exception as exc:  # protobuf DecodeError, OSError, onnx errors: all mean "unreadable"
        raise _load_error(p, f"not a readable ONNX protobuf ({first_line(exc)})") from exc
    if not proto.HasField("graph") or proto.ir_version == 0:
        raise _load_error(p, "not an ONNX model (no graph or IR version)")
    _check_external_files(proto, p)
    notes: tuple[str, ...] = ()
    try:
        onnx.checker.check_model(str(p))
    except Exception as exc:  # ValidationError, and OSError for missing external data
        complaint = first_line(exc)
        accepted = _accepted_as_ort_runs_it(proto, complaint)
        if isinstance(accepted, _OtherComplaint):  # the real cause behind an op set apart
            raise _load_error(p, f"onnx.checker: {accepted.text}") from exc
        if accepted is None:
            raise _load_error(p, f"onnx.checker: {complaint}") from exc
        notes = (f"onnx.checker: {complaint} (accepted: {accepted})",)
    signature = read_signature(proto, where=p)
    ops = frozenset(n.op_type for n in proto.graph.node)
    training = training_nodes(proto)
    return OnnxModel(
        path=p,
        signature=signature,
        sha256=_sha256(p, proto),
        notes=notes,
        op_types=ops,
        training=training,
        producer=proto.producer_name,
        domains=frozenset(n.domain for n in proto.graph.node if n.domain not in ("", "ai.onnx")),
        sixteen_bit=has_sixteen_bit(proto.graph),
    )


_NODE_ORDER = "must be topologically sorted"
_NO_OP = re.compile(r"No Op registered for (\S+) with domain_version")
ORT_DOMAIN = "ai.onnxruntime.default"  # where the checked copy sets ORT's default-domain ops


@dataclass(frozen=True)
class _OtherComplaint:
    """The checker, once the ops ONNX Runtime registers are set apart, refuses the file for
    something else (unsafe external data, a bad attribute): that is what is said."""

    text: str


def _accepted_as_ort_runs_it(
    proto: onnx.ModelProto, complaint: str
) -> str | _OtherComplaint | None:
    """Why the file stands though the checker refused it, or None. Only two complaints are
    ONNX Runtime's to overrule: the node order (it sorts nodes itself) and an op it
    registers in the default domain that ONNX does not. The checker then runs again on a
    light copy (nodes sorted, those ops in a domain of their own, weights as typed inputs:
    no bytes read): everything else must pass it."""
    if _NODE_ORDER not in complaint and not _NO_OP.search(complaint):
        return None
    if topological_nodes(proto.graph) is None:
        return None
    copy = light_model(proto)
    set_apart = ort_only_ops(copy)
    if _NO_OP.search(complaint) and not set_apart:
        return None  # an op nobody registers: the checker is right
    try:
        check_as_ort_runs(copy)
    except Exception as exc:  # the checker's next complaint is the file's real fault
        other = first_line(exc)
        if other and other != complaint:
            return _OtherComplaint(other)
        return None
    why = []
    if set_apart:
        ops = ", ".join(sorted(set_apart))
        why.append(f"{ops}: registered by ONNX Runtime in the default domain")
    if _NODE_ORDER in complaint or not _in_order(proto.graph):
        why.append("its nodes pass the checker once sorted, and ONNX Runtime sorts them itself")
    return "; ".join(why)


def ort_only_ops(proto: onnx.ModelProto) -> set[str]:
    """Default-domain op types of `proto` that ONNX has no schema for at the file's opset
    but ONNX Runtime registers (parity.load.sessions.ort_default_domain_ops)."""
    from parity.load.sessions import ort_default_domain_ops

    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    unknown = set()
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type in unknown:
            continue
        try:
            onnx.defs.get_schema(node.op_type, max(int(opset), 1), "")
        except onnx.defs.SchemaError:
            unknown.add(node.op_type)
    return unknown & ort_default_domain_ops()


def check_as_ort_runs(model: onnx.ModelProto, *, full_check: bool = False) -> None:
    """onnx.checker on `model` (in memory, nodes in order) with the ops ONNX Runtime
    registers in the default domain set apart in a domain of their own (a copy: `model` is
    not changed); raises what the checker raises."""
    set_apart = ort_only_ops(model)
    if set_apart:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        for node in copy.graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in set_apart:
                node.domain = ORT_DOMAIN
        copy.opset_import.append(onnx.helper.make_opsetid(ORT_DOMAIN, 1))
        model = copy
    onnx.checker.check_model(model, full_check=full_check)


def _in_order(graph: onnx.GraphProto) -> bool:
    ordered = topological_nodes(graph)
    return ordered is not None and all(a is b for a, b in zip(ordered, graph.node, strict=True))


def light_model(proto: onnx.ModelProto) -> onnx.ModelProto:
    """What the checker and shape inference need of a file without its weights: the nodes
    in an order they can follow (ONNX Runtime's float16 converter appends its input casts
    after their readers), initializers as typed graph inputs (their bytes, inline or
    external, are never copied)."""
    graph = proto.graph
    ordered = topological_nodes(graph)
    initializers = {t.name for t in graph.initializer}
    light = onnx.helper.make_graph(
        list(ordered if ordered is not None else graph.node),
        graph.name,
        [
            *(i for i in graph.input if i.name not in initializers),
            *(
                onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                for t in graph.initializer
            ),
        ],
        list(graph.output),
        value_info=list(graph.value_info),
    )
    model = onnx.helper.make_model(light, opset_imports=list(proto.opset_import))
    model.ir_version = max(proto.ir_version, 4)
    model.functions.extend(proto.functions)
    return model


def topological_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto] | None:
    """The graph's nodes in an order where each reads only what is made before it (the
    file's order wherever it already is one); None when no such order exists."""
    import heapq

    made = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    made |= {t.values.name for t in graph.sparse_initializer} | {""}
    nodes = list(graph.node)
    missing = [{i for i in n.input if i not in made} for n in nodes]
    waiting: dict[str, list[int]] = {}
    for k, names in enumerate(missing):
        for name in names:
            waiting.setdefault(name, []).append(k)
    ready = [k for k, names in enumerate(missing) if not names]
    heapq.heapify(ready)  # the smallest file position first: the file's order is kept
    ordered: list[onnx.NodeProto] = []
    while ready:
        k = heapq.heappop(ready)
        ordered.append(nodes[k])
        for out in nodes[k].output:
            for reader in waiting.pop(out, ()):
                missing[reader].discard(out)
                if not missing[reader]:
                    heapq.heappush(ready, reader)
    return ordered if len(ordered) == len(nodes) else None


def _check_external_files(proto: onnx.ModelProto, path: Path) -> None:
    """Name the first external-data file that is not beside the model (onnx.checker would
    say "should be stored in <full path>, but it is not regular file"). Locations that are
    absolute or climb out (``..``) are left to the checker, which refuses them."""
    seen: set[str] = set()
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        if not onnx.external_data_helper.uses_external_data(tensor):
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if not location or location in seen:
            continue
        seen.add(location)
        where = PurePosixPath(location.replace("\\", "/"))
        if where.is_absolute() or ".." in where.parts:
            continue
        kind = not_a_regular_file(path.parent / location)
        if kind == "missing":
            raise _load_error(
                path,
                f"its external-data file {location!r} (tensor {tensor.name!r}) is missing; "
                "it must be beside the .onnx file",
            )
        if kind:
            raise _load_error(
                path,
                f"its external-data file {location!r} (tensor {tensor.name!r}) is {kind}, "
                "not a regular file",
            )


def read_signature(proto: onnx.ModelProto, *, where: Path | str = "model") -> OnnxSignature:
    """Inputs (initializers excluded), outputs, default-domain opset, producer, IR version."""
    graph = proto.graph
    initializers = {t.name for t in graph.initializer} | {
        t.values.name for t in graph.sparse_initializer
    }
    inputs = tuple(
        _tensor_spec(v, where=where, role="input")
        for v in graph.input
        if v.name not in initializers
    )
    outputs = tuple(_tensor_spec(v, where=where, role="output") for v in graph.output)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    producer = f"{proto.producer_name} {proto.producer_version}".strip()
    from parity.load.calibration import input_ranges
    from parity.load.index_limits import index_limits

    return OnnxSignature(
        inputs=inputs,
        outputs=outputs,
        opset=int(opset),
        producer=producer,
        ir_version=int(proto.ir_version),
        calibrated=input_ranges(proto),
        index_limits=index_limits(proto),
    )


def available_providers() -> list[str]:
    """The execution providers this ONNX Runtime build can use, in its preference order."""
    import onnxruntime as ort

    return list(ort.get_available_providers())


def make_session(
    model: OnnxModel, *, provider: str = "CPUExecutionProvider", opt_level: str = "all"
) -> OrtSession:
    """An ONNX Runtime session on one provider at one graph-optimisation level."""
    available = available_providers()
    if provider not in available:
        raise UsageError(
            f"unknown ONNX Runtime provider {provider!r}; available here: {', '.join(available)}"
        )
    if opt_level not in ORT_OPT_LEVELS:
        raise UsageError(
            f"unknown ORT optimisation level {opt_level!r}; choose one of "
            f"{', '.join(ORT_OPT_LEVELS)}"
        )
    try:
        return open_session(model.path, provider=provider, opt_level=opt_level)
    except RunTimeout:  # the run's time limit, not the file's fault
        raise
    except Exception as exc:
        raise _load_error(model.path, f"ONNX Runtime ({provider}): {first_line(exc)}") from exc


def _tensor_spec(value: onnx.ValueInfoProto, *, where: Path | str, role: str) -> TensorSpec:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise _load_error(
            where,
            f"{role} {value.name!r} is a {kind or 'untyped value'}; Parity compares tensors only",
        )
    tensor = value.type.tensor_type
    shape: tuple[Dim, ...] = ()
    if tensor.HasField("shape"):
        shape = tuple(_dim(d) for d in tensor.shape.dim)
    return TensorSpec(name=value.name, dtype=_dtype_name(tensor.elem_type), shape=shape)


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    which = dim.WhichOneof("value")
    if which == "dim_value":
        return int(dim.dim_value)
    if which == "dim_param" and dim.dim_param:
        return str(dim.dim_param)
    return None


def _dtype_name(elem_type: int) -> str:
    if (name := from_onnx_elem_type(elem_type)) is not None:
        return name
    try:  # float8 / int4 families: onnx knows their ml_dtypes names
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type).name)
    except Exception:
        return TensorProto.DataType.Name(elem_type).lower()


def _sha256(path: Path, proto: onnx.ModelProto) -> str:
    """Hash of the model file followed by the external data its tensors use, in first-use
    order: each tensor's (location, offset, length) and those bytes, never the rest of the
    file (a `location` into a 1 TiB sparse file of which 1 KiB is used hashes 1 KiB)."""
    digest = hashlib.sha256()
    update_with_file(digest, path)
    seen: set[tuple[str, int, int]] = set()
    for tensor in onnx.external_data_helper._get_all_tensors(proto):
        if not onnx.external_data_helper.uses_external_data(tensor):
            continue
        fields = {e.key: e.value for e in tensor.external_data}
        location = fields.get("location", "")
        offset, length = _int(fields.get("offset")) or 0, _int(fields.get("length"))
        exact = length is not None
        if length is None:  # the tensor's own size, at most to the file's end (int4 packs)
            length = _byte_size(tensor)
        if not location or (location, offset, length) in seen:
            continue
        seen.add((location, offset, length))
        digest.update(f"{location}\0{offset}\0{length}\0".encode())
        try:
            update_with_range(digest, path.parent / location, offset, length, exact=exact)
        except ParityError as exc:
            raise _load_error(
                path, f"external data of tensor {tensor.name!r}: {exc.message}"
            ) from None
    return digest.hexdigest()


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _byte_size(tensor: onnx.TensorProto) -> int:
    count = 1
    for dim in tensor.dims:
        count *= max(0, int(dim))
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:  # noqa: BLE001 - a type numpy cannot hold: count bytes as one each
        itemsize = 1
    return count * itemsize


def _load_error(path: Path | str, cause: str) -> OnnxLoadError:
    return OnnxLoadError(f"cannot load ONNX file {path}: {cause}")
