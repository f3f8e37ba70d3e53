"""Record an encoder-decoder model's greedy generate(): the encoder call and every decoder call.

Every call is stored under Optimum's ONNX names, so mapping a call onto a file of an export
folder is a lookup by name (parity.hf.seq2seq_parts). Facts this relies on (transformers
4.57): generate() runs `model.get_encoder()` once, then calls the model's forward per new
token with `decoder_input_ids`, the encoder's `attention_mask`, `encoder_outputs` and an
`EncoderDecoderCache` (self-attention and cross-attention caches) that is mutated in place,
so the past is copied before the call and the present after it. The cross-attention cache
is empty before the first decoder call and filled by it; later calls read it unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.errors import ModelRunError
from parity.hf.capture import KeyValue, _cache_arrays, hooked_run, to_numpy

ENCODER = "encoder"
DECODER = "decoder"
ENCODER_INPUTS = ("input_ids", "attention_mask", "input_features")
LAST_HIDDEN = "last_hidden_state"


def past_name(layer: int, attention: str, kind: str) -> str:
    """Optimum's name of a past key/value input: attention is "decoder" or "encoder"."""
    return f"past_key_values.{layer}.{attention}.{kind}"


def present_name(layer: int, attention: str, kind: str) -> str:
    return f"present.{layer}.{attention}.{kind}"


@dataclass(frozen=True)
class Seq2SeqCall:
    """One call generate() made, under Optimum's names.

    `feeds`: every input an export's file may ask for (the encoder's input_ids /
    attention_mask / input_features; a decoder's input_ids, encoder_attention_mask,
    encoder_hidden_states, past_key_values.{i}.{decoder,encoder}.{key,value} and
    use_cache_branch). `outputs`: what torch computed (last_hidden_state; logits and
    present.{i}.{decoder,encoder}.{key,value}). `padding`: True at the encoder positions
    the attention mask excludes (batch, encoder sequence), None when nothing is padded.
    """

    index: int
    role: str  # ENCODER | DECODER
    decoder_step: int  # 0 = the first decoder call (no past); -1 for the encoder
    feeds: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    padding: np.ndarray | None
    seconds: float
    past_length: int = 0

    @property
    def label(self) -> str:
        return ENCODER if self.role == ENCODER else f"decoder step {self.decoder_step}"

    @property
    def phase(self) -> str:
        if self.role == ENCODER:
            return ENCODER
        return "prefill" if self.past_length == 0 else "decode"

    @property
    def main_input(self) -> np.ndarray:
        return self.feeds["input_features" if "input_features" in self.feeds else "input_ids"]


@dataclass(frozen=True)
class Seq2SeqCapture:
    calls: tuple[Seq2SeqCall, ...]
    prompts: tuple[str, ...]  # empty for audio models
    generated: tuple[str, ...]  # the decoded continuation per batch row ("" without tokenizer)
    seconds: float


def capture_seq2seq(
    model: Any,
    encoder_inputs: Mapping[str, np.ndarray],
    *,
    max_new_tokens: int,
    tokenizer: Any = None,
    prompts: Sequence[str] = (),
    decoder: bool = True,
) -> Seq2SeqCapture:
    """Run greedy generate() (or, with `decoder=False`, the encoder alone) and record calls.

    `encoder_inputs`: the encoder's named inputs (input_ids + attention_mask, or
    input_features), as numpy arrays.
    """
    import torch

    tensors = {
        name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in encoder_inputs.items()
    }
    mask = encoder_inputs.get("attention_mask")
    padding = (mask == 0) if mask is not None and (mask == 0).any() else None
    calls: list[Seq2SeqCall] = []
    encoder_out: dict[str, np.ndarray] = {}
    pending: dict[str, Any] = {}

    def encoder_before(_module: Any, _args: tuple, _kwargs: dict[str, Any]) -> None:
        pending["t_encoder"] = time.perf_counter()

    def encoder_after(_module: Any, _args: tuple, _kwargs: dict[str, Any], output: Any) -> None:
        hidden = to_numpy(output[0])
        encoder_out[LAST_HIDDEN] = hidden
        feeds = {k: v for k, v in encoder_inputs.items() if k in ENCODER_INPUTS}
        calls.append(
            Seq2SeqCall(
                index=len(calls),
                role=ENCODER,
                decoder_step=-1,
                feeds=feeds,
                outputs={LAST_HIDDEN: hidden},
                padding=padding,
                seconds=time.perf_counter() - pending["t_encoder"],
            )
        )

    def before(_module: Any, _args: tuple, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("decoder_input_ids")
        if not isinstance(ids, torch.Tensor):
            raise ModelRunError("hf: generate() called the decoder without decoder_input_ids")
        cache = kwargs.get("past_key_values")
        pending["ids"] = to_numpy(ids)
        pending["self"] = _cache_arrays(getattr(cache, "self_attention_cache", None))
        pending["cross"] = _cache_arrays(getattr(cache, "cross_attention_cache", None))
        pending["t0"] = time.perf_counter()

    def after(_module: Any, _args: tuple, kwargs: dict[str, Any], output: Any) -> None:
        seconds = time.perf_counter() - pending["t0"]
        cache = getattr(output, "past_key_values", None) or kwargs.get("past_key_values")
        self_present = _cache_arrays(getattr(cache, "self_attention_cache", None))
        cross_present = _cache_arrays(getattr(cache, "cross_attention_cache", None))
        if not self_present or not cross_present or LAST_HIDDEN not in encoder_out:
            raise ModelRunError(
                "hf: generate() gave no EncoderDecoderCache with self- and cross-attention "
                "keys/values (or ran no encoder); is use_cache supported by this model?"
            )
        step = sum(c.role == DECODER for c in calls)
        calls.append(
            _decoder_call(
                index=len(calls),
                step=step,
                ids=pending["ids"],
                encoder_hidden=encoder_out[LAST_HIDDEN],
                mask=mask,
                past=(pending["self"], pending["cross"]),
                present=(self_present, cross_present),
                logits=to_numpy(output.logits),
                padding=padding,
                seconds=seconds,
            )
        )

    encoder = model.get_encoder()
    hooks = [
        encoder.register_forward_pre_hook(encoder_before, with_kwargs=True),
        encoder.register_forward_hook(encoder_after, with_kwargs=True),
    ]
    if decoder:
        hooks += [
            model.register_forward_pre_hook(before, with_kwargs=True),
            model.register_forward_hook(after, with_kwargs=True),
        ]
    t0 = time.perf_counter()
    sequences = None
    with hooked_run(hooks, "generate()" if decoder else "the encoder"):
        if decoder:
            sequences = model.generate(
                **tensors,
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,  # every requested step happens
                do_sample=False,
                num_beams=1,
                use_cache=True,
            )
        else:
            encoder(**tensors)
    seconds = time.perf_counter() - t0
    if not calls:
        raise ModelRunError("hf: generate() made no encoder call")
    generated: tuple[str, ...] = ()
    if sequences is not None and tokenizer is not None:
        generated = tuple(tokenizer.batch_decode(sequences, skip_special_tokens=True))
    return Seq2SeqCapture(
        calls=tuple(calls), prompts=tuple(prompts), generated=generated, seconds=seconds
    )


def _decoder_call(
    *,
    index: int,
    step: int,
    ids: np.ndarray,
    encoder_hidden: np.ndarray,
    mask: np.ndarray | None,
    past: tuple[tuple[KeyValue, ...], tuple[KeyValue, ...]],
    present: tuple[tuple[KeyValue, ...], tuple[KeyValue, ...]],
    logits: np.ndarray,
    padding: np.ndarray | None,
    seconds: float,
) -> Seq2SeqCall:
    """One decoder call under Optimum's names. Before the first call both caches are empty:
    the past fed to a merged decoder's no-cache branch is then the zero-length self-attention
    past and zeros at the encoder's length for cross-attention (one `encoder_sequence_length`
    for every input, as the file declares); that branch reads neither."""
    self_past, cross_past = past
    self_present, cross_present = present
    past_length = int(self_past[0][0].shape[2]) if self_past else 0
    if not self_past:
        self_past = tuple((_resized(k, 0), _resized(v, 0)) for k, v in self_present)
        cross_past = tuple((np.zeros_like(k), np.zeros_like(v)) for k, v in cross_present)
    feeds: dict[str, np.ndarray] = {
        "input_ids": ids,
        "encoder_hidden_states": encoder_hidden,
        "use_cache_branch": np.array([past_length > 0]),
    }
    if mask is not None:
        feeds["encoder_attention_mask"] = mask
    outputs: dict[str, np.ndarray] = {"logits": logits}
    for attention, pasts, presents in (
        (DECODER, self_past, self_present),
        (ENCODER, cross_past, cross_present),
    ):
        for layer, ((pk, pv), (k, v)) in enumerate(zip(pasts, presents, strict=True)):
            feeds[past_name(layer, attention, "key")] = pk
            feeds[past_name(layer, attention, "value")] = pv
            outputs[present_name(layer, attention, "key")] = k
            outputs[present_name(layer, attention, "value")] = v
    return Seq2SeqCall(
        index=index,
        role=DECODER,
        decoder_step=step,
        feeds=feeds,
        outputs=outputs,
        padding=padding,
        seconds=seconds,
        past_length=past_length,
    )


def _resized(array: np.ndarray, length: int) -> np.ndarray:
    """Zeros with `array`'s (batch, heads, _, head_dim) and `length` positions."""
    shape = list(array.shape)
    shape[2] = length
    return np.zeros(shape, dtype=array.dtype)
