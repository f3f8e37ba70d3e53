"""--noise-floor for hf: models: every captured forward call once more, in float64.

The model is copied and cast with ``.double()``; each call is made again with the inputs it
was captured with (ids, mask, positions; float inputs such as pixels cast to float64) and
its past KV cache cast to float64, so torch's float32 call and the float64 one differ only
by rounding. The result is the call with float64 logits, present cache and outputs, read by
parity.hf.feeds.reference_outputs under the ONNX names like the float32 call. A model that
cannot be run so is run again with every op promoted to float64 (said, PROMOTED), else gives
None and a note, never a failed run.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from parity.errors import first_line
from parity.hf.capture import CACHE_KEYWORDS, CapturedCall, forward_outputs, to_numpy
from parity.hf.loading import quiet_transformers
from parity.settings import Mention

NOT_MEASURED = "noise floor not measured"


def float64_calls(
    model: Any, calls: Sequence[CapturedCall], *, max_memory: int | None = None
) -> tuple[tuple[CapturedCall, ...] | None, str]:
    """Each call made again by a float64 copy of `model`, or (None, why not). The copy's
    size is checked against --max-memory first (BudgetError)."""
    import torch

    from parity.limits.budget import MemoryBudget
    from parity.run.noise_floor_runs import float64_bytes

    floats = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if floats - {torch.float32, torch.float64}:
        return None, f"{NOT_MEASURED}: the model is not float32"
    MemoryBudget.of(max_memory).check(
        float64_bytes(model),
        ("the float64 copy of the model for ", Mention("noise_floor")),
        proceed=("leave out ", Mention("noise_floor"), " for this model"),
    )
    try:
        double = copy.deepcopy(model).double().eval()
    except Exception as exc:
        return None, f"{NOT_MEASURED}: cannot cast to float64 ({first_line(exc)})"
    try:
        return tuple(call_again(double, call, float64=True) for call in calls), ""
    except Exception as exc:
        why = f"the model failed in float64 ({first_line(exc)})"
    try:  # every op promoted to float64, as parity.run.noise_floor_runs does
        made = tuple(call_again(double, call, float64=True, promote=True) for call in calls)
    except Exception:
        return None, f"{NOT_MEASURED}: {why}"
    from parity.run.noise_floor_runs import PROMOTED

    return made, PROMOTED.format(why=why)


def call_at(model: Any, call: CapturedCall, precision: str) -> tuple[CapturedCall | None, str, str]:
    """`call` made again at a 16-bit `precision`, emulated (weights, inputs and every op's
    float output rounded to it, computed in float32: how ONNX Runtime's CPU provider runs
    most 16-bit nodes, and at float32's cost, parity.run.noise_floor_runs.Rounding; the
    captured float inputs and past cache rounded first): (the call, how it was made, "") or
    (None, "", why not)."""
    import torch

    from parity.run.noise_floor_runs import EMULATED, Rounding

    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[precision]

    def rounded(a: np.ndarray) -> np.ndarray:
        if a.dtype != np.float32:
            return a
        return torch.from_numpy(np.array(a)).to(dtype).to(torch.float32).numpy()

    low = replace(
        call,
        inputs={k: rounded(np.asarray(v)) for k, v in call.inputs.items()},
        past=tuple((rounded(np.asarray(k)), rounded(np.asarray(v))) for k, v in call.past),
    )
    try:
        with Rounding(dtype, model):
            made = call_again(model, low, float64=False)
    except Exception as exc:
        why = f"the model failed ({first_line(exc)})"
        return None, "", f"{precision} noise floor not measured: {why}"
    return made, EMULATED.format(dtype=precision), ""


def call_again(
    model: Any, call: CapturedCall, *, float64: bool, promote: bool = False
) -> CapturedCall:
    """`call` made again by `model` with the inputs captured then (float inputs and the past
    cache cast to float64 for a float64 model; `promote`: every op promoted to float64, for a
    model that makes float32 tensors itself): its logits, present cache and outputs."""
    from contextlib import nullcontext

    import torch

    def _tensor(array: np.ndarray) -> Any:
        return _as_tensor(array, float64)

    from parity.hf.export import cache_tensors, make_cache
    from parity.run.noise_floor_runs import Promoting

    kwargs: dict[str, Any] = {name: _tensor(a) for name, a in call.inputs.items()}
    promoting = Promoting() if promote else nullcontext()
    with torch.inference_mode(), quiet_transformers(), promoting:
        if call.encoder:
            return replace(call, outputs=forward_outputs(model(**kwargs)))
        params = inspect.signature(model.forward).parameters
        cache_kw = next(k for k in CACHE_KEYWORDS if k in params)
        past = [_tensor(a) for kv in call.past for a in kv] if call.past_length else []
        kwargs[cache_kw] = make_cache(past, model.config)
        kept = call.logits.shape[1] if call.logits is not None and call.logits.ndim == 3 else 0
        if kept and "logits_to_keep" in params:
            kwargs["logits_to_keep"] = kept
        output = model(**kwargs, use_cache=True)
        flat = [to_numpy(t) for t in cache_tensors(output.past_key_values)]
        logits = to_numpy(output.logits)
    if kept:
        logits = logits[:, -kept:]
    present = tuple((flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2))
    return replace(call, logits=logits, present=present)


def _as_tensor(array: np.ndarray, float64: bool) -> Any:
    import torch

    a = np.asarray(array)
    if float64 and a.dtype == np.float32:
        a = a.astype(np.float64)
    return torch.from_numpy(np.array(a, copy=True, order="C"))
