"""The reference model once more in float64, and at a 16-bit candidate's precision, for the
noise floor (``--noise-floor``).

A float32 module (an nn.Module, or a .pt2's program module) is copied and cast with
``.double()``; its float32 inputs are cast to float64. For a float16 / bfloat16 candidate it
is also copied and cast to that type (its float inputs too), so torch's own error at that
precision is measured the same way; on the CPU, and where torch has no kernel for an op at
that type, or one slower than SLOW_KERNELS x float32, the run is emulated instead
(`EMULATED`): weights, inputs and every op's float output rounded to that type, computed in
float32. Anything that cannot be run so gives None
and a note, never a failed run.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from parity.errors import first_line
from parity.limits.budget import MemoryBudget
from parity.load.quiet import quiet_torch
from parity.results import InputSet
from parity.settings import Mention
from parity.signature import OnnxSignature


@dataclass(frozen=True)
class Float64Model:
    model: Any  # parity.load.torch_model.TorchModel with a float64 module, or None
    note: str  # why not, when model is None


def float64_bytes(module: torch.nn.Module) -> int:
    """What casting a copy of `module` to float64 allocates: the copy (every tensor it holds)
    and the float64 tensors that replace its floating ones, counted before either is made."""
    seen: set[int] = set()
    total = 0
    tensors = [*module.parameters(), *module.buffers()]
    for sub in module.modules():  # a traced graph's lifted constants are plain attributes
        tensors += [v for v in vars(sub).values() if isinstance(v, torch.Tensor)]
    for t in tensors:
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
        if t.is_floating_point():
            total += t.numel() * 8
    return total


def parameter_count(model: Any) -> int | None:
    """The torch model's parameter and buffer elements (None: not an nn.Module), what the
    default noise floor is decided by (parity.analyses.noise)."""
    module = getattr(model, "module", None)
    if not isinstance(module, torch.nn.Module):
        return None
    tensors = [*module.parameters(), *module.buffers()]
    return sum(int(t.numel()) for t in tensors)


def float64_model(model: Any, budget: MemoryBudget | None = None) -> Float64Model:
    """The model cast to float64 (or None and why). Its size is checked against `budget`
    (--max-memory) before the copy is made: BudgetError, one line."""
    module = getattr(model, "module", None)
    if getattr(model, "kind", "") == "torchscript":
        return Float64Model(None, "noise floor not measured: a TorchScript model fixes its dtypes")
    if not isinstance(module, torch.nn.Module):
        return Float64Model(None, "noise floor not measured: the model is not an nn.Module")
    floats = {p.dtype for p in module.parameters()} | {b.dtype for b in module.buffers()}
    if floats - {torch.float32, torch.float64} and floats & {torch.float16, torch.bfloat16}:
        return Float64Model(None, "noise floor not measured: the model is not float32")
    (budget or MemoryBudget()).check(
        float64_bytes(module),
        ("the float64 copy of the model for ", Mention("noise_floor")),
        proceed=("leave out ", Mention("noise_floor"), " for this model"),
    )
    try:
        with warnings.catch_warnings():  # deepcopy of a .pt2's module: pytree deprecations
            warnings.simplefilter("ignore")
            double = copy.deepcopy(module).double().eval()
    except Exception as exc:
        return Float64Model(
            None, f"noise floor not measured: cannot cast to float64 ({first_line(exc)})"
        )
    from dataclasses import replace

    if isinstance(double, torch.fx.GraphModule):
        _double_graph(double)
    return Float64Model(replace(model, module=double), "")


def _double_graph(gm: torch.fx.GraphModule, dtype: torch.dtype = torch.float64) -> None:
    """A traced graph (a .pt2's module) fixes float32 where the trace saw it: casts
    (``aten.to(x, torch.float32)``, an attention mask's ``dtype=``), metadata asserts and
    lifted float constants. Say float64 (`dtype`) there too, or a float32 mask meets float64
    scores."""
    for name, value in list(vars(gm).items()):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            setattr(gm, name, value.to(dtype))
    for module in gm.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
                setattr(module, name, value.to(dtype))
    swap = {torch.float32: dtype}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        node.args = tuple(swap.get(a, a) if isinstance(a, torch.dtype) else a for a in node.args)
        node.kwargs = {
            k: swap.get(v, v) if isinstance(v, torch.dtype) else v for k, v in node.kwargs.items()
        }
    gm.recompile()


PROMOTED = (
    "torch in float64 with every op's float32 operands and results promoted to float64 (the "
    "model makes float32 tensors of its own: {why})"
)
"""How the float64 run was made where `.double()` alone cannot run the model."""


class Promoting(torch.overrides.TorchFunctionMode):
    """Every float32 tensor an op takes or returns, cast to float64: a model that makes
    float32 tensors in forward (``torch.ones(3, 3)``, a mask's ``dtype=torch.float32``)
    and so raises "mixed dtype" or "expected Double" under ``.double()`` runs in float64."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        up = torch.utils._pytree.tree_map
        out = func(*up(_to64, args), **up(_to64, kwargs or {}))
        return up(_to64, out)


def _to64(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(torch.float64)
    return value


def run_float64(
    model: Any, input_set: InputSet, signature: OnnxSignature
) -> tuple[dict[str, np.ndarray] | None, str]:
    """The float64 model's outputs keyed by ONNX output name, or (None, why). Where
    `.double()` alone cannot run it, every op promoted to float64 (`Promoting`): then the
    arrays come with a note saying so (PROMOTED), the noise block's "how"."""
    arrays, why = _run_float64(model, input_set, signature, promote=False)
    if arrays is not None:
        return arrays, ""
    promoted, _ = _run_float64(model, input_set, signature, promote=True)
    if promoted is None:
        return None, why
    return promoted, PROMOTED.format(why=why.removeprefix("noise floor not measured: "))


def _run_float64(
    model: Any, input_set: InputSet, signature: OnnxSignature, *, promote: bool
) -> tuple[dict[str, np.ndarray] | None, str]:
    from contextlib import nullcontext

    from parity.run.runner import flatten_outputs, match_outputs, model_binding

    tensors = {}
    for name in signature.input_names:
        if name in input_set.feeds:
            a = np.asarray(input_set.feeds[name])
            if a.dtype.name in ("float32", "float16", "bfloat16"):  # 16-bit: float16 I/O
                a = a.astype(np.float64)
            tensors[name] = torch.from_numpy(np.array(a, copy=True, order="C"))
    binding = model_binding(model, tensors)
    try:
        with quiet_torch(), torch.inference_mode(), Promoting() if promote else nullcontext():
            result = model.module(*binding.args, **binding.kwargs)
        named = match_outputs(flatten_outputs(result), signature.output_names)
    except (Exception, SystemExit) as exc:  # a model's sys.exit() must not end Parity silently
        cause = f"it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else None
        return None, (
            f"noise floor not measured: the model failed in float64 ({cause or first_line(exc)})"
        )
    arrays = {}
    for name, value in named.items():
        if isinstance(value, torch.Tensor):
            arrays[name] = value.detach().cpu().numpy()
    if not any(a.dtype == np.float64 for a in arrays.values()):
        return None, "noise floor not measured: the model still computes in float32 after .double()"
    return arrays, ""


EMULATED = "weights, inputs and each op's float output rounded to {dtype}, computed in float32"
"""How torch's own error is measured where torch cannot run the model at that precision."""

_TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class LowModel:
    """The reference at a 16-bit precision (mutable, private to one run): the cast copy, or
    after its first failure, the float32 model run emulated (`emulated` says how)."""

    precision: str
    base: Any  # the float32 TorchModel
    cast: Any = None  # TorchModel whose module is cast to `precision`, None once it failed
    emulated: str = ""  # "" while torch runs at that precision; else EMULATED's words
    probed: bool = False  # the cast model's speed was measured on the first input set


def low_model(model: Any, precision: str) -> LowModel | str:
    """The reference cast to `precision` ("float16" / "bfloat16"), or why not."""
    module = getattr(model, "module", None)
    if getattr(model, "kind", "") == "torchscript":
        return f"{precision} noise floor not measured: a TorchScript model fixes its dtypes"
    if not isinstance(module, torch.nn.Module):
        return f"{precision} noise floor not measured: the model is not an nn.Module"
    dtype = _TORCH_DTYPES[precision]
    from dataclasses import replace

    if _on_cpu(module):  # emulated: fast, and how ONNX Runtime's CPU provider computes it
        return LowModel(precision, model, None, EMULATED.format(dtype=precision))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cast = copy.deepcopy(module).to(dtype).eval()
        if isinstance(cast, torch.fx.GraphModule):
            _double_graph(cast, dtype)
    except Exception:
        return LowModel(precision, model, None, EMULATED.format(dtype=precision))
    return LowModel(precision, model, replace(model, module=cast))


SLOW_KERNELS = 4.0  # the cast model slower than this x float32 (and SLOW_SECONDS): emulate
SLOW_SECONDS = 1.0


def _on_cpu(module: torch.nn.Module) -> bool:
    """The model computes on the CPU. There torch's 16-bit kernels are slow paths (a float16
    conv net 42x its float32 time on a 2-core EPYC) or missing, and ONNX Runtime's CPU
    provider runs most 16-bit nodes in float32 behind casts: rounding each op's output to
    the precision while computing in float32 (EMULATED) measures the floor the candidate
    really has, at about float32's cost."""
    tensor = next(iter([*module.parameters(), *module.buffers()]), None)
    return tensor is None or tensor.device.type == "cpu"


def run_low(
    low: LowModel,
    input_set: InputSet,
    signature: OnnxSignature,
    float32_seconds: float | None = None,
) -> tuple[dict[str, np.ndarray] | None, str]:
    """The reference's outputs at `low.precision` keyed by ONNX output name (as float32),
    or (None, why). The first failure of the cast model switches to emulation for good, and
    so does a first run slower than SLOW_KERNELS x `float32_seconds` (torch's float16 CPU
    kernels can be 30x float32's): every set is then emulated, the first one again, so
    one run measures one way."""
    import time

    dtype = _TORCH_DTYPES[low.precision]
    if low.cast is not None:
        t0 = time.perf_counter()
        arrays, error = _run_cast(low.cast, input_set, signature, dtype)
        took = time.perf_counter() - t0
        slow = (
            not low.probed
            and float32_seconds is not None
            and took > max(SLOW_SECONDS, SLOW_KERNELS * float32_seconds)
        )
        low.probed = True
        if arrays is not None and not slow:
            return arrays, ""
        low.cast, low.emulated = None, EMULATED.format(dtype=low.precision)
        if slow:
            low.emulated += (
                f" (torch's own {low.precision} kernels took {took:.1f} s against "
                f"{float32_seconds:.1f} s in float32 here)"
            )
    arrays, error = _run_emulated(low.base, input_set, signature, dtype)
    if arrays is None:
        return None, f"{low.precision} noise floor not measured: the model failed ({error})"
    return arrays, ""


def _feeds(input_set: InputSet, signature: OnnxSignature, dtype: torch.dtype) -> dict:
    tensors = {}
    for name in signature.input_names:
        if name in input_set.feeds:
            a = np.asarray(input_set.feeds[name])
            t = torch.from_numpy(np.array(a, copy=True, order="C"))
            if t.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
                t = t.to(dtype)
            tensors[name] = t
    return tensors


def _outputs(result: Any, signature: OnnxSignature) -> dict[str, np.ndarray]:
    from parity.run.runner import flatten_outputs, match_outputs

    named = match_outputs(flatten_outputs(result), signature.output_names)
    arrays = {}
    for name, value in named.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            if value.dtype in (torch.float16, torch.bfloat16):
                value = value.float()
            arrays[name] = value.numpy()
    return arrays


def _run_cast(
    model: Any, input_set: InputSet, signature: OnnxSignature, dtype: torch.dtype
) -> tuple[dict[str, np.ndarray] | None, str]:
    from parity.run.runner import model_binding

    binding = model_binding(model, _feeds(input_set, signature, dtype))
    try:
        with quiet_torch(), torch.inference_mode():
            return _outputs(model.module(*binding.args, **binding.kwargs), signature), ""
    except Exception as exc:  # no kernel at that type here (e.g. "not implemented for 'Half'")
        return None, first_line(exc)


class Rounding(torch.overrides.TorchFunctionMode):
    """Every float32 tensor an op returns rounded to `dtype` (and back to float32), and
    `module`'s float32 weights (parameters and buffers) as each op reads them: the model
    itself is not copied or changed (no second model in memory). Activations are rounded
    where they are made, never replaced as an op's operand, so in-place ops still change
    the tensor the model holds."""

    def __init__(self, dtype: torch.dtype, module: Any = None) -> None:
        super().__init__()
        self.dtype = dtype
        tensors = [*module.parameters(), *module.buffers()] if module is not None else []
        self.weights = {id(t) for t in tensors if t.dtype == torch.float32}

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        up = torch.utils._pytree.tree_map
        out = func(*up(self._weight, args), **up(self._weight, kwargs or {}))
        return up(self._round, out)

    def _weight(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and id(value) in self.weights:
            return value.detach().to(self.dtype).to(torch.float32)
        return value

    def _round(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            return value.to(self.dtype).to(torch.float32)
        return value


def _run_emulated(
    model: Any, input_set: InputSet, signature: OnnxSignature, dtype: torch.dtype
) -> tuple[dict[str, np.ndarray] | None, str]:
    from parity.run.runner import model_binding

    try:
        feeds = {
            k: v.to(torch.float32) if v.dtype == dtype else v
            for k, v in _feeds(input_set, signature, dtype).items()
        }
        binding = model_binding(model, feeds)
        with quiet_torch(), torch.inference_mode(), Rounding(dtype, model.module):
            return _outputs(model.module(*binding.args, **binding.kwargs), signature), ""
    except Exception as exc:
        return None, first_line(exc)
