"""Run torch and ONNX Runtime on an input set; flatten and name torch's outputs.

Torch outputs come in any nesting (tensor, tuple/list/namedtuple, dict, dataclass,
transformers ``ModelOutput``); they are walked in order into leaves, each named by its path
("logits", "hidden.0", "0"). Non-tensor leaves (ints, None, strings) are skipped. Leaves then
get ONNX output names:

1. a leaf whose path equals an ONNX output name takes it — only paths with a named part
   (a dict key, field or attribute), since all-index paths like "1" would collide with the
   numeric names old exporters give;
2. the remaining leaves take the remaining ONNX outputs by order and shape (an Olive file
   names BERT's pooler output `tanh`): said in one line (the torch side's OutputSet.pairing);
3. leftover leaves keep their path as ``"torch:PATH"`` and so show up as missing in ONNX.

Contract:
run_torch(model: TorchModel, input_set: InputSet, signature: OnnxSignature) -> OutputSet
    eval + torch.inference_mode(); inputs by name where the model knows its input names
    (parity.run.input_binding), else by position; nested outputs flattened in order and named by
    ONNX
    output names where names match, else by position. Extra torch outputs keep a path
    name (e.g. "torch:2") so they show up as missing in ONNX. Raises ModelRunError.
run_onnx(session, input_set: InputSet, *, signature=None) -> OutputSet   raises OnnxRunError
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from parity.errors import ModelRunError, OnnxRunError, RunTimeout, first_line
from parity.limits.deadline import Deadline
from parity.load.dtypes import from_ort_type
from parity.load.quiet import quiet_torch
from parity.results import InputSet, OutputSet
from parity.run.input_binding import (
    InputBinding,
    at_the_call,
    bind_inputs,
    signature_mismatch,
)
from parity.run.inputs import check_feeds
from parity.signature import OnnxSignature, TensorSpec

if TYPE_CHECKING:
    from parity.load.sessions import OrtSession, OrtValueInfo
    from parity.load.torch_model import TorchModel

EXTRA_PREFIX = "torch:"


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One tensor found in a nested output; ``named`` when its path has a non-index part."""

    path: str
    value: torch.Tensor | np.ndarray
    named: bool


def _widened(tensors: dict[str, torch.Tensor], module: object) -> dict[str, torch.Tensor]:
    """A float32 model's 16-bit inputs (an export converted with float16 inputs, e.g.
    keep_io_types=False) cast up to float32: the same values, exactly, in the model's own
    precision, so torch computes what the file was converted from."""
    params = getattr(module, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    if first is None or first.dtype != torch.float32:
        return tensors
    low = (torch.float16, torch.bfloat16)
    return {k: t.float() if t.dtype in low else t for k, t in tensors.items()}


def _index_hint(exc: BaseException, input_set: InputSet) -> str:
    """An index out of range with integer inputs: which ones, what they held, and the flag
    that sets their range (the generated default [0, 100) overflows a small vocabulary)."""
    if not isinstance(exc, IndexError) and "out of range" not in str(exc):
        return ""
    held = []
    for name, value in input_set.feeds.items():
        a = np.asarray(value)
        if a.dtype.kind in "iu" and a.size:
            held.append(f"{name} holds [{int(a.min())}, {int(a.max())}]")
    if not held:
        return ""
    first = next(iter(h.split(" ", 1)[0] for h in held))
    return (
        f" (integer input {', '.join(held)}: an index past a table of the model? give its "
        f"range with --int-range {first}=LOW:HIGH)"
    )


def run_torch(model: TorchModel, input_set: InputSet, signature: OnnxSignature) -> OutputSet:
    """Run the torch model once on ``input_set``; outputs keyed by ONNX output name."""
    check_feeds(input_set.feeds, signature, where=f"input set {input_set.index}")
    device = _device_of(model.module)
    tensors = {
        name: _to_tensor(input_set.feeds[name], device)
        for name in signature.input_names
        if name in input_set.feeds
    }
    binding = model_binding(model, _widened(tensors, model.module))
    try:
        with quiet_torch(), torch.inference_mode():
            start = time.perf_counter()
            result = model.module(*binding.args, **binding.kwargs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds = time.perf_counter() - start
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        cause = f"{type(exc).__name__}: {first_line(exc)}"
        mismatch = (
            signature_mismatch(model, list(tensors), binding, cause)
            if at_the_call(exc, model.module)
            else None
        )
        if mismatch is not None:
            raise mismatch from exc
        raise ModelRunError(
            f"torch model raised {type(exc).__name__} on input set {input_set.index}: "
            f"{first_line(exc)}"
            f"{_index_hint(exc, input_set)}"
        ) from exc
    named, renamed = pair_outputs(flatten_outputs(result), signature.outputs)
    out = _output_set(named.items(), seconds, "torch")
    return dataclasses.replace(out, pairing=renamed)


def model_binding(model: TorchModel, feeds: Mapping[str, Any]) -> InputBinding:
    """How `feeds` (ONNX order) are passed to this model (parity.run.input_binding decides)."""
    return bind_inputs(
        feeds,
        keyword=model.parameter_names,
        positional=getattr(model, "positional_names", ()),
    )


def run_onnx(
    session: OrtSession,
    input_set: InputSet,
    *,
    signature: OnnxSignature | None = None,
    deadline: Deadline | None = None,
) -> OutputSet:
    """Run ONNX Runtime once; feeds are checked against the signature before ORT sees them.

    With a `deadline`, ORT is terminated when it passes (RunTimeout), even inside a Loop."""
    check_feeds(
        input_set.feeds,
        signature or session_signature(session),
        where=f"input set {input_set.index}",
    )
    names = [o.name for o in session.get_outputs()]
    feeds = {name: np.ascontiguousarray(a) for name, a in input_set.feeds.items()}
    bfloat16 = any(a.dtype.name == "bfloat16" for a in feeds.values()) or any(
        o.type == "tensor(bfloat16)" for o in session.get_outputs()
    )
    try:
        start = time.perf_counter()
        with (deadline or Deadline(None)).ort_run_options() as options:
            if bfloat16:
                values = _run_bfloat16(session, names, feeds, options)
            else:
                values = session.run(names, feeds, options)
        seconds = time.perf_counter() - start
    except RunTimeout:
        raise
    except Exception as exc:
        raise OnnxRunError(  # one line; ORT's whole text folded in the detail
            f"ONNX Runtime failed on input set {input_set.index}: {first_line(exc)}",
            detail=str(exc).strip(),
        ) from exc
    return _output_set(zip(names, values, strict=True), seconds, "onnx")


def _output_set(named: Iterable[tuple[str, Any]], seconds: float, side: str) -> OutputSet:
    """One side's outputs as numpy, with a note for each converted on the way (bfloat16)."""
    arrays: dict[str, np.ndarray] = {}
    notes: list[str] = []
    for name, value in named:
        arrays[name], note = _to_numpy(value)
        if note:
            notes.append(f"{side} output {name!r}: {note}")
    return OutputSet(arrays=arrays, seconds=seconds, notes=tuple(notes))


def _run_bfloat16(
    session: OrtSession,
    names: list[str],
    feeds: Mapping[str, np.ndarray],
    options: Any = None,
) -> list[Any]:
    """ORT's numpy bridge has no bfloat16: feed raw bits as OrtValues, read back by DLPack."""
    import onnxruntime as ort
    from onnx import TensorProto

    values = {
        name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            a.view(np.uint16), onnx_element_type=TensorProto.BFLOAT16
        )
        if a.dtype.name == "bfloat16"
        else ort.OrtValue.ortvalue_from_numpy(a)
        for name, a in feeds.items()
    }
    outputs = session.run_with_ort_values(names, values, options)
    return [
        torch.from_dlpack(o) if o.data_type() == "tensor(bfloat16)" else o.numpy() for o in outputs
    ]


def session_signature(session: OrtSession) -> OnnxSignature:
    """The feed-checking part of a signature, read from a live session."""

    def spec(arg: OrtValueInfo) -> TensorSpec:
        shape = tuple(
            d if isinstance(d, int | str) or d is None else None for d in (arg.shape or ())
        )
        return TensorSpec(name=arg.name, dtype=from_ort_type(arg.type), shape=shape)

    meta = session.get_modelmeta()
    return OnnxSignature(
        inputs=tuple(spec(a) for a in session.get_inputs()),
        outputs=tuple(spec(o) for o in session.get_outputs()),
        opset=0,
        producer=meta.producer_name,
        ir_version=0,
    )


def flatten_outputs(result: Any) -> list[Leaf]:
    """Every tensor in a nested output, in order, named by its path."""
    return list(_walk(result, (), named=False))


def match_outputs(leaves: Sequence[Leaf], onnx_names: Sequence[str]) -> dict[str, Any]:
    """ONNX output name (or ``torch:PATH`` for extras) -> torch value, in ONNX order."""
    return pair_outputs(leaves, onnx_names)[0]


def pair_outputs(
    leaves: Sequence[Leaf], outputs: Sequence[TensorSpec | str]
) -> tuple[dict[str, Any], str]:
    """`match_outputs` with the ONNX outputs' declared shapes: the leaves no name claims
    pair with the free ONNX outputs by order and shape (parity.run.runner.pair_by_order).
    Returns the pairing and one line naming the outputs paired across different names
    ("" when none were)."""
    names = [o.name if isinstance(o, TensorSpec) else o for o in outputs]
    matched: dict[str, Any] = {}
    rest: list[Leaf] = []
    for leaf in leaves:
        if leaf.named and leaf.path in names and leaf.path not in matched:
            matched[leaf.path] = leaf.value
        else:
            rest.append(leaf)
    free = [o for o, n in zip(outputs, names, strict=True) if n not in matched]
    taken = pair_by_order([tuple(leaf.value.shape) for leaf in rest], free)
    renamed: list[tuple[str, str]] = []
    for name, k in taken.items():
        matched[name] = rest[k].value
        if rest[k].named and rest[k].path != name:
            renamed.append((name, rest[k].path))
    extras = {
        EXTRA_PREFIX + leaf.path: leaf.value
        for k, leaf in enumerate(rest)
        if k not in taken.values()
    }
    ordered = {name: matched[name] for name in names if name in matched}
    ordered.update(extras)
    return ordered, renamed_note(renamed)


def pair_by_order(
    shapes: Sequence[tuple[int, ...]], free: Sequence[TensorSpec | str]
) -> dict[str, int]:
    """ONNX outputs no name claimed (`free`, in ONNX order) -> the index of the torch value
    (`shapes`, in torch's order) each stands for: first each takes the earliest unused value
    whose shape fits its declared one (rank and fixed dims), then any left take the values
    left, in order (a shape mismatch is then reported, not a missing output)."""
    taken: dict[str, int] = {}
    used: set[int] = set()
    for spec in free:
        if not isinstance(spec, TensorSpec) or not spec.shape:
            continue
        k = next((k for k, s in enumerate(shapes) if k not in used and _fits(s, spec)), None)
        if k is not None:
            taken[spec.name] = k
            used.add(k)
    left = iter(k for k in range(len(shapes)) if k not in used)
    for spec in free:
        name = spec.name if isinstance(spec, TensorSpec) else spec
        if name not in taken and (k := next(left, None)) is not None:
            taken[name] = k
    return taken


def _fits(shape: tuple[int, ...], spec: TensorSpec) -> bool:
    return len(shape) == spec.rank and all(
        not isinstance(d, int) or d == n for d, n in zip(spec.shape, shape, strict=True)
    )


def renamed_note(renamed: Sequence[tuple[str, str]]) -> str:
    """One line for the ONNX outputs paired with a torch output of another name."""
    if not renamed:
        return ""
    pairs = ", ".join(f"ONNX {onnx!r} is torch's {path!r}" for onnx, path in renamed)
    return f"outputs named otherwise than torch's, paired by order and shape: {pairs}"


def _walk(obj: Any, path: tuple[str, ...], *, named: bool) -> Iterator[Leaf]:
    if isinstance(obj, torch.Tensor | np.ndarray):
        yield Leaf(path=".".join(path) or "0", value=obj, named=named)
    elif isinstance(obj, Mapping):  # dict, OrderedDict, transformers ModelOutput
        for key, value in obj.items():
            if value is not None:
                yield from _walk(value, (*path, str(key)), named=True)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if value is not None:
                yield from _walk(value, (*path, f.name), named=True)
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        for key, value in zip(obj._fields, obj, strict=True):
            yield from _walk(value, (*path, str(key)), named=True)
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from _walk(value, (*path, str(i)), named=named)
    # ints, floats, None, strings: not outputs ONNX can have; skipped


def _to_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    # A copy: a model that writes into its input in place must not change the ONNX feed.
    array = np.array(array, copy=True, order="C")
    if array.dtype.name == "bfloat16":  # numpy's bfloat16 comes from ml_dtypes
        tensor = torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(array)
    return tensor.to(device)


def _to_numpy(value: Any) -> tuple[np.ndarray, str]:
    if isinstance(value, np.ndarray):
        if value.dtype.name == "bfloat16":
            return value.astype(np.float32), "bfloat16 compared as float32"
        return value, ""
    tensor = value.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.float().cpu().numpy(), "bfloat16 compared as float32"
    return tensor.cpu().contiguous().numpy(), ""


def _device_of(module: Any) -> torch.device:
    for getter in ("parameters", "buffers"):
        try:
            for t in getattr(module, getter)():
                return t.device
        except Exception:
            continue
    return torch.device("cpu")
