"""Read a torch.export archive (``.pt2``) without running anything it carries.

``torch.export.load`` (torch 2.13) runs code from the file in five places: it unpickles in full
when ``weights_only`` refuses the sample inputs, and it unpickles weights and constants marked
``use_pickle`` (and torchbind/opaque objects) without restriction; it parses the graph's
symbolic-shape strings with ``sympy.sympify`` (an ``eval``); FX pastes the archive's value
and argument names into the Python source it generates and ``exec``s; and
``ExportedProgram.module()`` ``exec``s guard code built from the archive.

Here every pickle goes through torch's ``weights_only`` unpickler and a refusal names the
member; symbolic expressions are built into sympy by parity.load.pt2_sympy (never eval'd: torch
gets the built objects, which sympify passes through); names FX writes into
code must be plain names, and node metadata (comments in that code) is dropped; guard code
is never read; compiled members (AOTInductor and friends) are refused; graph targets are
checked against torch's own allow-lists. Torch's own tensor-record reader and deserializer
do the rest, under the export lock (torch's deserializer keeps global state), so the format
stays torch's.

Contract: is_pt2(path) -> bool;
load_pt2(path) -> (torch.fx.GraphModule, ExportedProgram)
    raises ModelLoadError (one line, naming the member) for anything refused or unreadable.
"""

from __future__ import annotations

import contextlib
import io
import json
import operator
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parity.errors import ModelLoadError, first_line
from parity.limits.budget import MemoryBudget, format_size
from parity.load.export_lock import export_lock
from parity.load.pickle_cause import pickle_cause

MODEL_NAME = "model"  # the one program torch.export.save writes and torch.export.load returns
_CODE_DIRS = ("data/aotinductor/", "data/executorch/", "data/mtia/")

# Higher-order operators that only run the archive's own subgraphs and registered ops.
_SAFE_HOPS = frozenset(
    {
        "associative_scan",
        "auto_functionalized",
        "auto_functionalized_v2",
        "cond",
        "flex_attention",
        "hints_wrapper",
        "invoke_subgraph",
        "map_impl",
        "out_dtype",
        "scan",
        "while_loop",
        "while_loop_stack_output",
        "wrap_with_autocast",
        "wrap_with_set_grad_enabled",
    }
)

MAX_JSON_BYTES = 64 << 20
"""A JSON member (the program, a payload config) past this is refused unread: parsing
inflates it about tenfold, and torch's own programs of large models stay far below."""

_IDENTIFIER_KEYS = frozenset({"name", "as_name", "forward_arg_names"})
_TEXT_KEYS = frozenset({"as_string", "as_strings", "in_spec", "out_spec", "torch_version"})
_DOTTED_RE = re.compile(r"[A-Za-z0-9_.\-]*")


def is_pt2(path: str | Path) -> bool:
    """True when the file is a torch.export archive, by content (never by suffix)."""
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.count("/") == 1 and name.endswith("/archive_format"):
                    return archive.read(name).strip() == b"pt2"
    except (OSError, zipfile.BadZipFile, KeyError, RuntimeError):
        return False
    return False


def load_pt2(path: str | Path, *, budget: MemoryBudget | None = None) -> tuple[Any, Any]:
    """(runnable module, its checked ExportedProgram): parity.layers interprets the program.
    What its members inflate to (weights, constants, sample inputs) is checked against
    `budget` (default: parity.limits.budget's) before any is read."""
    path = Path(path)
    try:
        with export_lock():  # torch's deserializer keeps global state: one at a time
            program = _deserialize(path, budget or MemoryBudget())
            _check_graph(path, program)
            _check_keyword_names(path, program)
            # check_guards=False: the guards module is generated Python that torch exec()s.
            return program.module(check_guards=False), program
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load model {path}: not a readable torch.export archive "
            f"({type(exc).__name__}: {first_line(exc)})"
        ) from exc


def _deserialize(path: Path, budget: MemoryBudget) -> Any:
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass
    from torch.export.pt2_archive import _package as pkg
    from torch.export.pt2_archive import constants as names

    with pkg.PT2ArchiveReader(str(path)) as reader:
        version = reader.read_string(names.ARCHIVE_VERSION_PATH)
        if version != names.ARCHIVE_VERSION_VALUE:
            raise ModelLoadError(
                f"cannot load model {path}: archive version {version}, this torch reads "
                f"{names.ARCHIVE_VERSION_VALUE}"
            )
        files = reader.get_file_names()
        for member in files:
            if member.startswith(_CODE_DIRS):
                raise _refused(path, member, "it holds compiled code")
        program_file = names.MODELS_FILENAME_FORMAT.format(MODEL_NAME)
        if program_file not in files:
            raise ModelLoadError(f"cannot load model {path}: the archive has no {program_file}")
        for folder in (names.WEIGHTS_DIR, names.CONSTANTS_DIR):
            legacy = f"{folder}{MODEL_NAME}.pt"
            if legacy in files:
                raise _refused(
                    path,
                    legacy,
                    "an old archive layout stored as one pickle; re-save it with torch.export.save",
                )

        weights_cfg = names.WEIGHTS_CONFIG_FILENAME_FORMAT.format(MODEL_NAME)
        constants_cfg = names.CONSTANTS_CONFIG_FILENAME_FORMAT.format(MODEL_NAME)
        sample_file = names.SAMPLE_INPUTS_FILENAME_FORMAT.format(MODEL_NAME)
        _check_payload_sizes(
            path,
            reader,
            files,
            budget,
            json_members=(program_file, weights_cfg, constants_cfg),
            payloads=((weights_cfg, names.WEIGHTS_DIR), (constants_cfg, names.CONSTANTS_DIR)),
            others=(sample_file,),
        )

        document = json.loads(reader.read_string(program_file))
        document["guards_code"] = []  # exec()'d by ExportedProgram.module(): never from a file
        _drop_metadata(document)
        expressions = _check_strings(path, program_file, document)
        _import_output_types(document)
        serialized = _dict_to_dataclass(schema.ExportedProgram, document)
        _use_built_expressions(serialized, expressions)

        sample_bytes = reader.read_bytes(sample_file) if sample_file in files else b""
        sample_inputs = _unpickle(path, sample_file, sample_bytes) if sample_bytes else None
        if sample_inputs is not None and not isinstance(sample_inputs, tuple):
            raise _refused(
                path, sample_file, f"it holds a {type(sample_inputs).__name__}, not (args, kwargs)"
            )

        guarded = _PickleFreeReader(path, reader)
        pickled_weights = guarded.take_pickled(weights_cfg, names.WEIGHTS_DIR)
        pickled_constants = guarded.take_pickled(constants_cfg, names.CONSTANTS_DIR)
        state_dict = {**pkg._load_state_dict(guarded, MODEL_NAME), **pickled_weights}
        constants = {**pkg._load_constants(guarded, MODEL_NAME), **pickled_constants}

    return ExportedProgramDeserializer().deserialize(
        serialized, state_dict, constants, sample_inputs
    )


# --- sizes ----------------------------------------------------------------------------


def _check_payload_sizes(
    path: Path,
    reader: Any,
    files: list[str],
    budget: MemoryBudget,
    *,
    json_members: tuple[str, ...],
    payloads: tuple[tuple[str, str], ...],
    others: tuple[str, ...],
) -> None:
    """Every member torch reads whole is sized from the zip's directory before it is read.

    A weight or constant stored raw must hold exactly the bytes its declared tensors span
    (torch would otherwise build an empty member as ``torch.zeros`` of the declared size,
    and a few KB of deflated zeros inflate to GBs); those bytes, the pickled payloads and
    the sample inputs together must fit `budget`.
    """
    size = reader.archive_file.get_record_size
    for member in json_members:
        if member in files and size(member) > MAX_JSON_BYTES:
            raise _refused(
                path,
                member,
                f"it holds {format_size(size(member))} of JSON, over {format_size(MAX_JSON_BYTES)}",
            )
    pickled = [m for m in others if m in files]
    total = sum(size(m) for m in pickled)
    largest = ("", 0, "")
    for config_file, folder in payloads:
        if config_file not in files:
            continue
        try:
            entries = json.loads(reader.read_string(config_file)).get("config", {})
            assert isinstance(entries, dict)
        except (ValueError, AttributeError, AssertionError) as exc:
            raise _refused(path, config_file, "it is not a payload config") from exc
        spans: dict[str, tuple[int, str]] = {}
        for fqn, meta in entries.items():
            member = folder + str(meta.get("path_name") if isinstance(meta, dict) else "")
            if member not in files:
                continue  # torch says which record is missing; nothing is allocated first
            if meta.get("use_pickle"):
                spans.setdefault(member, (size(member), f"{fqn} (pickled)"))
                pickled.append(member)
                continue
            span, described = _declared_span(path, config_file, fqn, meta.get("tensor_meta"))
            if span > spans.get(member, (-1, ""))[0]:
                spans[member] = (span, described)
        for member, (span, described) in spans.items():
            stored = size(member)
            if not described.endswith("(pickled)") and stored != span:
                raise _refused(
                    path,
                    member,
                    f"it holds {stored} bytes but {described} declares {span}",
                )
            total += max(stored, span)
            if span > largest[1]:
                largest = (member, span, described)
    what = (
        f"model {path} (weights, constants and sample inputs; largest {largest[2]})"
        if largest[0]
        else f"model {path} (weights, constants and sample inputs)"
    )
    budget.check(total, what, proceed="validate a smaller model")
    # A pickled payload is a torch.save zip whose own members may be deflated: count what
    # they inflate to (their sizes in its directory), read once the stored bytes fit.
    inflated = sum(max(0, _inflated_size(reader, m) - size(m)) for m in dict.fromkeys(pickled))
    if inflated:
        budget.check(total + inflated, what, proceed="validate a smaller model")


def _inflated_size(reader: Any, member: str) -> int:
    data = reader.read_bytes(member)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            return sum(info.file_size for info in inner.infolist())
    except zipfile.BadZipFile:
        return len(data)


def _declared_span(path: Path, config_file: str, fqn: str, meta: Any) -> tuple[int, str]:
    """(bytes of storage the tensor declared by `meta` reads, 'NAME dtype [sizes]')."""
    from torch._export.serde import schema
    from torch._export.serde.serialize import deserialize_scalar_type
    from torch._utils import _element_size

    def ints(values: Any) -> list[int]:
        if not isinstance(values, list):
            values = [values]
        out = []
        for value in values:
            number = value.get("as_int") if isinstance(value, dict) else None
            if type(number) is not int or number < 0:
                raise _refused(path, config_file, f"{fqn} has a size that is not a count")
            out.append(number)
        return out

    try:
        dtype = deserialize_scalar_type(schema.ScalarType(meta["dtype"]))
        sizes = ints(meta["sizes"])
        strides = ints(meta["strides"])
        (offset,) = ints(meta["storage_offset"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _refused(path, config_file, f"{fqn} has no readable tensor_meta") from exc
    if len(strides) != len(sizes):
        raise _refused(path, config_file, f"{fqn} has {len(sizes)} sizes, {len(strides)} strides")
    described = f"{fqn} {str(dtype).removeprefix('torch.')} {sizes}"
    if 0 in sizes:
        return 0, described
    last = offset + sum((n - 1) * stride for n, stride in zip(sizes, strides, strict=True))
    return (last + 1) * _element_size(dtype), described


class _PickleFreeReader:
    """torch's archive reader with every pickled payload taken out of the payload configs.

    Pickled entries are loaded here through the weights_only unpickler; torch's own
    `_load_state_dict`/`_load_constants` then see only raw tensor records. `read_bytes` is
    how torch reads a pickled payload, so it refuses: if a later torch finds another pickle,
    loading fails closed instead of unpickling it.
    """

    def __init__(self, path: Path, reader: Any) -> None:
        self._path = path
        self._reader = reader
        self._configs: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def read_string(self, name: str) -> str:
        if name in self._configs:
            return self._configs[name]
        return self._reader.read_string(name)

    def read_bytes(self, name: str) -> bytes:
        raise _refused(self._path, name, "torch would unpickle it without restriction")

    def take_pickled(self, config_file: str, folder: str) -> dict[str, Any]:
        import torch

        if config_file not in self._reader.get_file_names():
            return {}
        config = json.loads(self._reader.read_string(config_file))
        entries = config.get("config", {})
        loaded: dict[str, Any] = {}
        for fqn, meta in list(entries.items()):
            if not meta.get("use_pickle"):
                continue
            member = folder + str(meta.get("path_name"))
            value = _unpickle(self._path, member, self._reader.read_bytes(member))
            if not isinstance(value, torch.Tensor):
                kind = type(value).__name__
                raise _refused(self._path, member, f"it holds a {kind}, not a tensor")
            loaded[fqn] = value
            del entries[fqn]
        self._configs[config_file] = json.dumps(config)
        return loaded


def _unpickle(path: Path, member: str, data: bytes) -> Any:
    """torch's weights_only unpickler: tensors and plain containers, nothing callable."""
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError) as exc:
        cause = pickle_cause(exc, data)
        raise _refused(path, member, f"it needs pickle beyond tensors ({cause})") from exc


def _refused(path: Path, member: str, why: str) -> ModelLoadError:
    return ModelLoadError(
        f"cannot load model {path}: refused member {member}: {why}; nothing was run"
    )


# --- symbolic expressions ----------------------------------------------------------------


def _drop_metadata(document: Any) -> None:
    """Node and graph metadata (stack traces, annotations) only feed comments in the Python
    code FX generates and exec()s; a newline there would be code. Nothing here needs it."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("metadata"), dict):
                item["metadata"] = {}
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _keyed_leaves(document: Any) -> Iterator[tuple[str, Any]]:
    """Every value of a JSON document that is not a dict or list, with the key it sits under
    (a list's items take the list's key); iterative, so nesting depth cannot overflow."""
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        key, item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.items())
        elif isinstance(item, list):
            stack.extend((key, value) for value in item)
        else:
            yield key, item


def _check_strings(path: Path, member: str, document: Any) -> dict[str, Any]:
    """The program's strings become Python source when FX generates the module's code.

    Names of values and arguments must be identifiers; parameter paths and operator names
    dotted names; every "expr_str" (sympify()'d by torch, an eval) is built by
    parity.load.pt2_sympy instead. Strings FX only repr()s (string arguments) and the pytree specs
    (JSON, read by torch) may be text. Returns the built expressions by text.
    """
    expr_texts: list[str] = []
    for key, item in _keyed_leaves(document):
        if isinstance(item, str) and key not in _TEXT_KEYS:
            if key == "expr_str":
                expr_texts.append(item)
                continue
            if key in _IDENTIFIER_KEYS:
                ok = item == "" or (item.isidentifier() and not item.startswith("__"))
            else:
                ok = _DOTTED_RE.fullmatch(item) is not None
            if not ok:
                raise _refused(path, member, f"{key} {item[:60]!r} is not a plain name")
    from parity.load.pt2_sympy import ExpressionError, parse_expressions  # sympy: 0.4 s

    try:
        return parse_expressions(expr_texts)
    except ExpressionError as exc:
        raise _refused(
            path, member, f"expr_str {exc.text[:60]!r} is not plain arithmetic ({exc})"
        ) from exc


_LIBRARY_TYPE = re.compile(r"transformers(\.[A-Za-z_]\w*)+")


def _import_output_types(document: Any) -> None:
    """Output classes of transformers (BaseModelOutput, ...) register with pytree when their
    module is imported; a .pt2 of an HF model names them in its specs. Import those modules
    (installed library code, never the file's) so that torch can rebuild the outputs."""
    import importlib
    import importlib.util

    from torch.utils import _pytree as pytree

    wanted: set[str] = set()
    for key, item in _keyed_leaves(document):
        if key in ("in_spec", "out_spec") and isinstance(item, str):
            wanted.update(re.findall(r'"type": "(transformers\.[\w.]+)"', item))
    missing = {t for t in wanted if t not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE}
    if not missing or importlib.util.find_spec("transformers") is None:
        return
    for type_name in sorted(missing):
        module = type_name.rpartition(".")[0]
        if _LIBRARY_TYPE.fullmatch(module):
            # if it fails, torch says which type it cannot rebuild
            with contextlib.suppress(ImportError):
                importlib.import_module(module)


def _use_built_expressions(serialized: Any, expressions: dict[str, Any]) -> None:
    """Every SymExpr's text replaced by its built object: torch's sympify returns a sympy
    object unchanged, so no expression text from the file reaches eval."""
    import dataclasses

    from torch._export.serde.schema import SymExpr

    stack = [serialized]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, SymExpr):
            if not isinstance(item.expr_str, str) or item.expr_str not in expressions:
                raise ModelLoadError("cannot load model: an expression escaped the checks")
            item.expr_str = expressions[item.expr_str]
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name, None) for f in dataclasses.fields(item))  # unions
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _check_keyword_names(path: Path, program: Any) -> None:
    """Keyword-argument names from the input spec become forward()'s parameter names."""
    spec = program.call_spec.in_spec
    if spec is None or spec.num_children != 2:
        return
    for name in spec.child(1).context or ():
        if not (isinstance(name, str) and name.isidentifier() and not name.startswith("__")):
            raise ModelLoadError(
                f"cannot load model {path}: refused keyword input {str(name)[:60]!r}: "
                "not a plain name; nothing was run"
            )


# --- graph targets -----------------------------------------------------------------------


def _check_graph(path: Path, program: Any) -> None:
    """Only torch ops, safe higher-order ops and the verifier's builtins may be called."""
    import torch
    from torch._export.verifier import Verifier

    builtins = set(Verifier().allowed_builtin_ops()) | {operator.getitem}
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op in ("placeholder", "output", "get_attr"):
                continue
            target = node.target
            ok = node.op == "call_function" and (
                isinstance(target, torch._ops.OpOverload)
                or (
                    isinstance(target, torch._ops.HigherOrderOperator)
                    and target.name() in _SAFE_HOPS
                )
                or target in builtins
            )
            if not ok:
                raise ModelLoadError(
                    f"cannot load model {path}: refused graph node {node.name!r}: "
                    f"{node.op} {getattr(target, '__name__', target)!s:.80} is not a torch "
                    "operator; nothing was run"
                )
