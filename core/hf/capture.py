"""Record every forward call that greedy `generate()` makes: prefill and each decode step.

Facts this relies on (transformers 4.57 and 5.x): a forward pre-hook registered with
`with_kwargs=True` sees every call, with empty positional args; the KV cache object is
mutated in place, so the past is copied *before* the call and the present *after* it; at
prefill the cache's layers are not initialised yet (past length 0); the cache keyword is
`past_key_values` (up to 5.16) or `cache` (5.25); `cache_position` is only passed by 4.x;
5.25 leaves `attention_mask` out when it is all ones; `logits_to_keep=1` makes torch return
only the last position's logits.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import ModelRunError, first_line
from core.hf.loading import LoadedHfModel, quiet_transformers

CACHE_KEYWORDS = ("past_key_values", "cache")
TENSOR_INPUTS = ("input_ids", "attention_mask", "position_ids", "cache_position", "token_type_ids")
ENCODER_OUTPUTS = ("last_hidden_state", "pooler_output")

KeyValue = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class CapturedCall:
    """One forward call: what went in, and what torch gave back.

    Decoder calls (generate()) have logits and a KV cache; an encoder's single call has
    neither, only `outputs` (last_hidden_state, pooler_output).
    """

    index: int
    inputs: Mapping[str, np.ndarray]  # any of TENSOR_INPUTS that the call passed
    past: tuple[KeyValue, ...]  # per layer (key, value); zero-length at prefill
    logits: np.ndarray | None  # (batch, positions kept, vocab): often only the last one
    present: tuple[KeyValue, ...]  # the cache after the call: past + this call's tokens
    seconds: float
    outputs: Mapping[str, np.ndarray] = field(default_factory=dict)  # other named outputs
    encoder: bool = False

    @property
    def past_length(self) -> int:
        return int(self.past[0][0].shape[2]) if self.past else 0

    @property
    def phase(self) -> str:
        if self.encoder:
            return "forward"
        return "prefill" if self.past_length == 0 else "decode"

    @property
    def step(self) -> int:
        return self.index + 1

    @property
    def label(self) -> str:
        return f"step {self.step} · {self.phase}"

    @property
    def input_ids(self) -> np.ndarray:
        return self.inputs["input_ids"]


@dataclass(frozen=True)
class Capture:
    calls: tuple[CapturedCall, ...]
    prompts: tuple[str, ...]
    generated: tuple[str, ...]  # the continuation of each prompt
    seconds: float


def capture_generate(
    loaded: LoadedHfModel, *, prompts: Sequence[str], max_new_tokens: int
) -> Capture:
    """Run greedy generate() on a left-padded batch of prompts and record every call."""
    import torch

    model, tokenizer = loaded.model, loaded.tokenizer
    encoded = tokenizer(list(prompts), return_tensors="pt", padding=True)
    input_ids = encoded["input_ids"]
    attention_mask = encoded.get("attention_mask")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)

    calls: list[CapturedCall] = []
    pending: dict[str, Any] = {}

    def before(_module: Any, _args: tuple, kwargs: dict[str, Any]) -> None:
        pending.clear()
        pending["inputs"] = {
            name: _to_numpy(kwargs[name])
            for name in TENSOR_INPUTS
            if isinstance(kwargs.get(name), torch.Tensor)
        }
        if "input_ids" not in pending["inputs"]:
            raise ModelRunError("hf: generate() called forward without input_ids")
        pending["past"] = _cache_arrays(_cache_of(kwargs))
        pending["t0"] = time.perf_counter()

    def after(_module: Any, _args: tuple, kwargs: dict[str, Any], output: Any) -> None:
        seconds = time.perf_counter() - pending["t0"]
        present = _cache_arrays(_output_cache(output, kwargs))
        past = pending["past"] or tuple(
            (_empty_like_time(k), _empty_like_time(v)) for k, v in present
        )
        calls.append(
            CapturedCall(
                index=len(calls),
                inputs=pending["inputs"],
                past=past,
                logits=_to_numpy(output.logits),
                present=present,
                seconds=seconds,
            )
        )

    hooks = [
        model.register_forward_pre_hook(before, with_kwargs=True),
        model.register_forward_hook(after, with_kwargs=True),
    ]
    t0 = time.perf_counter()
    try:
        with torch.inference_mode(), quiet_transformers():
            sequences = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,  # every requested step happens, even after eos
                do_sample=False,
                num_beams=1,
                use_cache=True,
                pad_token_id=tokenizer.pad_token_id,
            )
    except ModelRunError:
        raise
    except Exception as exc:
        raise ModelRunError(f"hf: generate() failed: {first_line(exc)}") from exc
    finally:
        for hook in hooks:
            hook.remove()
    seconds = time.perf_counter() - t0
    if not calls:
        raise ModelRunError("hf: generate() made no forward call")
    new_tokens = sequences[:, input_ids.shape[1] :]
    generated = tuple(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return Capture(calls=tuple(calls), prompts=tuple(prompts), generated=generated, seconds=seconds)


def capture_forward(loaded: LoadedHfModel, *, prompts: Sequence[str]) -> Capture:
    """An encoder's one forward call on the padded batch of prompts (feature extraction)."""
    import inspect

    import torch

    model, tokenizer = loaded.model, loaded.tokenizer
    encoded = tokenizer(list(prompts), return_tensors="pt", padding=True)
    accepted = inspect.signature(model.forward).parameters
    kwargs = {
        name: encoded[name]
        for name in ("input_ids", "attention_mask", "token_type_ids")
        if name in encoded and name in accepted
    }
    t0 = time.perf_counter()
    try:
        with torch.inference_mode(), quiet_transformers():
            output = model(**kwargs)
    except Exception as exc:
        raise ModelRunError(f"hf: the model's forward failed: {first_line(exc)}") from exc
    seconds = time.perf_counter() - t0
    outputs = {
        name: _to_numpy(getattr(output, name))
        for name in ENCODER_OUTPUTS
        if isinstance(getattr(output, name, None), torch.Tensor)
    }
    if not outputs:
        raise ModelRunError(f"hf: the model returned none of {list(ENCODER_OUTPUTS)}")
    call = CapturedCall(
        index=0,
        inputs={name: _to_numpy(value) for name, value in kwargs.items()},
        past=(),
        logits=None,
        present=(),
        seconds=seconds,
        outputs=outputs,
        encoder=True,
    )
    return Capture(calls=(call,), prompts=tuple(prompts), generated=(), seconds=seconds)


def _cache_of(kwargs: Mapping[str, Any]) -> Any:
    for name in CACHE_KEYWORDS:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def _output_cache(output: Any, kwargs: Mapping[str, Any]) -> Any:
    cache = getattr(output, "past_key_values", None)
    return cache if cache is not None else _cache_of(kwargs)


def _cache_arrays(cache: Any) -> tuple[KeyValue, ...]:
    """Copy a cache (DynamicCache of any version, or legacy tuples) to numpy (key, value)s.

    Layers that are not initialised yet (prefill) give an empty tuple: the caller makes
    zero-length tensors from the present's shapes.
    """
    if cache is None:
        return ()
    pairs: list[tuple[Any, Any]] = []
    if hasattr(cache, "layers"):  # transformers >= 4.56: DynamicLayer objects
        for layer in cache.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if keys is None or values is None or not getattr(layer, "is_initialized", True):
                return ()
            pairs.append((keys, values))
    elif hasattr(cache, "key_cache"):  # older DynamicCache
        if not cache.key_cache:
            return ()
        pairs = list(zip(cache.key_cache, cache.value_cache, strict=True))
    elif isinstance(cache, (tuple, list)):
        pairs = [(layer[0], layer[1]) for layer in cache]
    else:
        raise ModelRunError(f"hf: unsupported cache type {type(cache).__name__}")
    if any(k.dim() != 4 or k.numel() == 0 for k, _ in pairs):
        return ()
    return tuple((_to_numpy(k), _to_numpy(v)) for k, v in pairs)


def _empty_like_time(array: np.ndarray) -> np.ndarray:
    """A zero-length past with the present's (batch, heads, _, head_dim)."""
    shape = list(array.shape)
    shape[2] = 0
    return np.zeros(shape, dtype=array.dtype)


def _to_numpy(tensor: Any) -> np.ndarray:
    import torch

    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy().copy()
