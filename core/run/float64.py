"""The reference model once more in float64, for the noise floor (``--noise-floor``).

A float32 module (an nn.Module, or a .pt2's program module) is copied and cast with
``.double()``; its float32 inputs are cast to float64. Anything that cannot be run so gives
None and a note, never a failed run.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from parity.errors import first_line
from parity.load.quiet import quiet_torch
from parity.results import InputSet
from parity.run.budget import MemoryBudget
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
        "the float64 copy of the model for --noise-floor",
        proceed="leave out --noise-floor for this model",
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


def _double_graph(gm: torch.fx.GraphModule) -> None:
    """A traced graph (a .pt2's module) fixes float32 where the trace saw it: casts
    (``aten.to(x, torch.float32)``, an attention mask's ``dtype=``), metadata asserts and
    lifted float constants. Say float64 there too, or a float32 mask meets float64 scores."""
    for name, value in list(vars(gm).items()):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            setattr(gm, name, value.double())
    for module in gm.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
                setattr(module, name, value.double())
    swap = {torch.float32: torch.float64}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        node.args = tuple(swap.get(a, a) if isinstance(a, torch.dtype) else a for a in node.args)
        node.kwargs = {
            k: swap.get(v, v) if isinstance(v, torch.dtype) else v for k, v in node.kwargs.items()
        }
    gm.recompile()


def run_float64(
    model: Any, input_set: InputSet, signature: OnnxSignature
) -> tuple[dict[str, np.ndarray] | None, str]:
    """The float64 model's outputs keyed by ONNX output name, or (None, why)."""
    from parity.run.runner import flatten_outputs, match_outputs, model_binding

    tensors = {}
    for name in signature.input_names:
        if name in input_set.feeds:
            a = np.asarray(input_set.feeds[name])
            if a.dtype == np.float32:
                a = a.astype(np.float64)
            tensors[name] = torch.from_numpy(np.array(a, copy=True, order="C"))
    binding = model_binding(model, tensors)
    try:
        with quiet_torch(), torch.inference_mode():
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
