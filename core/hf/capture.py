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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity.errors import InputError, ModelRunError, first_line
from parity.hf.loading import LoadedHfModel, quiet_transformers

CACHE_KEYWORDS = ("past_key_values", "cache")
TENSOR_INPUTS = ("input_ids", "attention_mask", "position_ids", "cache_position", "token_type_ids")

KeyValue = tuple[np.ndarray, np.ndarray]
# A model's generation_config may ask greedy search to penalise repeats; free-running
# generation (parity.hf.generation) takes the plain argmax, so torch's generate() does too.
PLAIN_GREEDY = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0}


@dataclass(frozen=True)
class CapturedCall:
    """One forward call: what went in, and what torch gave back.

    Decoder calls (generate()) have logits and a KV cache; a one-forward model's single call
    has neither, only `outputs` (every tensor it returned, by field name).
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

    @property
    def batch(self) -> int:
        """The batch size (any input's first dim: image and audio models have no ids)."""
        first = self.inputs.get("input_ids", next(iter(self.inputs.values()), None))
        return int(first.shape[0]) if first is not None and first.ndim else 1

    @property
    def sequence_length(self) -> int:
        """Tokens in this call; 0 for a model fed pixels or audio features."""
        ids = self.inputs.get("input_ids")
        return int(ids.shape[1]) if ids is not None and ids.ndim == 2 else 0


@dataclass(frozen=True)
class Capture:
    calls: tuple[CapturedCall, ...]
    prompts: tuple[str, ...]
    generated: tuple[str, ...]  # the continuation of each prompt
    seconds: float
    inputs: str = ""  # how a one-forward model's inputs were made (the summary says it)
    new_tokens: np.ndarray | None = None  # generate()'s new token ids, (batch, new tokens)


@contextmanager
def hooked_run(hooks: Sequence[Any], what: str) -> Iterator[None]:
    """Run the model (`what`: "generate()", "the encoder", ...) as every capture does: under
    inference mode with transformers quiet; a failure is one ModelRunError line naming
    `what`; the capture's forward hooks are removed whatever happens."""
    import torch

    try:
        with torch.inference_mode(), quiet_transformers():
            yield
    except ModelRunError:
        raise
    except Exception as exc:
        raise ModelRunError(f"hf: {what} failed: {first_line(exc)}") from exc
    finally:
        for hook in hooks:
            hook.remove()


def capture_generate(
    loaded: LoadedHfModel,
    *,
    prompts: Sequence[str],
    max_new_tokens: int,
    keep_cache: bool = True,
) -> Capture:
    """Run greedy generate() on a left-padded batch of prompts and record every call.

    `keep_cache=False` keeps no KV cache but the prefill's zero-length past: enough for a
    file to generate on its own cache from the first call (parity.hf.padded_batch)."""
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
            name: to_numpy(kwargs[name])
            for name in TENSOR_INPUTS
            if isinstance(kwargs.get(name), torch.Tensor)
        }
        if "input_ids" not in pending["inputs"]:
            raise ModelRunError("hf: generate() called forward without input_ids")
        pending["past"] = _cache_arrays(_cache_of(kwargs)) if keep_cache else ()
        pending["t0"] = time.perf_counter()

    def after(_module: Any, _args: tuple, kwargs: dict[str, Any], output: Any) -> None:
        seconds = time.perf_counter() - pending["t0"]
        first = not calls
        present = _cache_arrays(_output_cache(output, kwargs)) if keep_cache or first else ()
        past = pending["past"] or tuple(
            (_empty_like_time(k), _empty_like_time(v)) for k, v in present
        )
        if not keep_cache:
            present, past = (), past if first else ()
        calls.append(
            CapturedCall(
                index=len(calls),
                inputs=pending["inputs"],
                past=past,
                logits=to_numpy(output.logits),
                present=present,
                seconds=seconds,
            )
        )

    hooks = [
        model.register_forward_pre_hook(before, with_kwargs=True),
        model.register_forward_hook(after, with_kwargs=True),
    ]
    t0 = time.perf_counter()
    with hooked_run(hooks, "generate()"):
        sequences = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,  # every requested step happens, even after eos
            do_sample=False,
            num_beams=1,
            use_cache=True,
            pad_token_id=tokenizer.pad_token_id,
            **PLAIN_GREEDY,
        )
    seconds = time.perf_counter() - t0
    if not calls:
        raise ModelRunError("hf: generate() made no forward call")
    new_tokens = sequences[:, input_ids.shape[1] :]
    generated = tuple(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return Capture(
        calls=tuple(calls),
        prompts=tuple(prompts),
        generated=generated,
        seconds=seconds,
        new_tokens=to_numpy(new_tokens),
    )


def capture_forward(
    loaded: LoadedHfModel,
    *,
    prompts: Sequence[str],
    inputs: Sequence[Mapping[str, np.ndarray]] = (),
    described: str = "",
) -> Capture:
    """One forward per input set of a one-forward model (an encoder, a classifier, a
    detector): `inputs` (generated pixels or audio features, --inputs files) when given,
    else the padded batch of prompts through the tokenizer."""
    import inspect

    import torch

    model = loaded.model
    accepted = inspect.signature(model.forward).parameters
    if inputs:
        sets = [dict(feeds) for feeds in inputs]
        prompts = ()
    else:
        encoded = loaded.tokenizer(list(prompts), return_tensors="np", padding=True)
        sets = [
            {
                name: np.asarray(encoded[name])
                for name in ("input_ids", "attention_mask", "token_type_ids")
                if name in encoded and name in accepted
            }
        ]
        described = described or f"{len(prompts)} prompt(s) through the tokenizer"
    calls = []
    for index, feeds in enumerate(sets):
        unknown = [name for name in feeds if name not in accepted]
        if unknown:
            raise InputError(
                f"hf: input(s) {unknown} are not arguments of {type(model).__name__}.forward"
            )
        kwargs = {name: torch.from_numpy(np.array(value)) for name, value in feeds.items()}
        t0 = time.perf_counter()
        with hooked_run((), "the model's forward"):
            output = model(**kwargs)
        seconds = time.perf_counter() - t0
        outputs = forward_outputs(output)
        if not outputs:
            raise ModelRunError(f"hf: the model returned no named tensor ({type(output).__name__})")
        calls.append(
            CapturedCall(
                index=index,
                inputs={name: np.array(value) for name, value in feeds.items()},
                past=(),
                logits=None,
                present=(),
                seconds=seconds,
                outputs=outputs,
                encoder=True,
            )
        )
    return Capture(
        calls=tuple(calls),
        prompts=tuple(prompts),
        generated=(),
        seconds=sum(c.seconds for c in calls),
        inputs=described,
    )


def forward_outputs(output: Any) -> dict[str, np.ndarray]:
    """Every tensor a forward returned under its field name (a ModelOutput: logits,
    start_logits/end_logits, pred_boxes, last_hidden_state, ...), as Optimum names them."""
    import torch

    items = output.items() if isinstance(output, Mapping) else ()
    return {str(name): to_numpy(value) for name, value in items if isinstance(value, torch.Tensor)}


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
    return tuple((to_numpy(k), to_numpy(v)) for k, v in pairs)


def _empty_like_time(array: np.ndarray) -> np.ndarray:
    """A zero-length past with the present's (batch, heads, _, head_dim)."""
    shape = list(array.shape)
    shape[2] = 0
    return np.zeros(shape, dtype=array.dtype)


def to_numpy(tensor: Any) -> np.ndarray:
    """A captured tensor as its own numpy copy (bfloat16, which numpy lacks, as float32)."""
    import torch

    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy().copy()
