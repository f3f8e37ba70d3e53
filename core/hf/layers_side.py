"""The torch side of an hf: run for --layers: the loaded model, called on each captured call.

parity.layers hooks the model's modules and runs torch once per case; here a case is one
forward call that generate() made (prefill, or a decode step with its KV cache), replayed
with the very tensors captured then (ids, mask, positions, cache positions and the past
keys/values rebuilt as a cache), so torch's intermediate values are those of the run's
reference outputs. An encoder's case is its one forward on the captured inputs.

Module paths are transformers' own (`model.layers.1.mlp.down_proj`): Optimum's legacy
export spells them in node names (`/model/layers.1/mlp/down_proj/MatMul`); Parity's dynamo
export wraps the model (parity.hf.export), so its scopes carry the wrapper's `model.` first.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.hf.capture import CACHE_KEYWORDS, CapturedCall
from parity.hf.export import make_cache
from parity.hf.feeds import full_attention_mask
from parity.hf.loading import LoadedHfModel, quiet_transformers
from parity.hf.seq2seq_capture import ENCODER, Seq2SeqCall
from parity.results import InputSet
from parity.sources import TorchSide

WRAPPER_PREFIX = "model."  # parity.hf.export's wrappers hold the model as `.model`


@dataclass(frozen=True)
class HfTorchModel:
    """What parity.layers reads of a torch model: the module to hook, its kind."""

    module: Any  # the transformers PreTrainedModel
    kind: str = "hf"
    parameter_names: tuple[str, ...] = ()


def hf_torch_side(loaded: LoadedHfModel, calls: Sequence[CapturedCall]) -> TorchSide:
    """The loaded model and its forward on each captured call (by the case's index)."""
    by_index = {call.index: call for call in calls}
    model = loaded.model
    params = inspect.signature(model.forward).parameters
    cache_kw = next((k for k in CACHE_KEYWORDS if k in params), None)

    def call(input_set: InputSet) -> Any:
        return replay(model, by_index[input_set.index], cache_kw)

    def exclude(index: int, shape: tuple[int, ...]) -> np.ndarray | None:
        call = by_index.get(index)
        return None if call is None else padding_of(call, shape)

    what = (
        "its forward on each captured input set"
        if loaded.encoder
        else "each forward call generate() made (prefill and every decode step, its KV "
        "cache rebuilt from the captured past)"
    )
    return TorchSide(
        HfTorchModel(model),
        call=call,
        scope_prefix=WRAPPER_PREFIX,
        traceable=False,
        steps=not loaded.encoder,
        exclude=exclude,
        notes=(
            f"torch side: the hf: model's modules, hooked on {what}",
            "positions the attention mask pads are not judged in intermediate values, as in "
            "the outputs (exports legitimately differ where nothing attends)",
        ),
    )


def replay(model: Any, call: CapturedCall, cache_kw: str | None) -> Any:
    """torch's forward on one captured call, with the tensors captured then. Every
    position's logits are computed (generate() kept the last only), as ONNX files give."""
    import torch

    kwargs: dict[str, Any] = {
        name: torch.from_numpy(np.array(value)) for name, value in call.inputs.items()
    }
    if not call.encoder and cache_kw is not None:
        flat = [torch.from_numpy(np.array(a)) for kv in call.past for a in kv]
        kwargs[cache_kw] = make_cache(flat if call.past_length else [], model.config)
        kwargs["use_cache"] = True
    with torch.inference_mode(), quiet_transformers():
        return model(**kwargs)


def padding_of(call: CapturedCall, shape: tuple[int, ...]) -> np.ndarray | None:
    """True where a value of `shape` sits at a padded position of `call`: its batch axis
    first, then a position axis (this call's tokens, or past + these) at axis 1, or at axis
    2 of a (batch, heads, positions, ...) value."""
    if "input_ids" not in call.inputs and "attention_mask" not in call.inputs:
        return None
    pad = full_attention_mask(call) == 0
    if not pad.any():
        return None
    ids = call.inputs.get("input_ids")
    current = pad[:, -ids.shape[1] :] if ids is not None and ids.ndim == 2 else pad
    return positions_mask((current, pad), shape)


def positions_mask(masks: Sequence[np.ndarray], shape: tuple[int, ...]) -> np.ndarray | None:
    """The first of `masks` (each (batch, positions), True where padded) whose positions
    match a value of `shape` at axis 1, else at axis 2 (a (batch, heads, positions, ...)
    value), placed there to broadcast; None when none fits or the batch differs."""
    for axis in (1, 2):
        if len(shape) <= axis:
            break
        for rows in masks:
            if shape[0] == rows.shape[0] and shape[axis] == rows.shape[1]:
                index = [slice(None), *([None] * (len(shape) - 1))]
                index[axis] = slice(None)
                return rows[tuple(index)]
    return None


def seq2seq_torch_side(model: Any, calls: Sequence[Seq2SeqCall], *, encoder: bool) -> TorchSide:
    """An encoder-decoder model's torch side for one file of its export: the encoder (its
    modules are what Optimum's encoder file scopes) on the encoder call, or the whole model
    (`decoder.*`, `lm_head`) on each decoder call, its self- and cross-attention caches
    rebuilt from the captured past (empty before the first step, as generate() had them)."""
    by_index = {call.index: call for call in calls}
    module = model.get_encoder() if encoder else model

    def call(input_set: InputSet) -> Any:
        return replay_seq2seq(model, by_index[input_set.index])

    def exclude(index: int, shape: tuple[int, ...]) -> np.ndarray | None:
        captured = by_index.get(index)
        pad = None if captured is None else captured.padding
        return None if pad is None else positions_mask((pad,), shape)

    what = "the encoder call" if encoder else "each decoder call, its caches rebuilt"
    return TorchSide(
        HfTorchModel(module),
        call=call,
        traceable=False,
        steps=not encoder,
        exclude=exclude,
        notes=(
            f"torch side: the hf: model's {'encoder' if encoder else 'modules'}, hooked on {what}",
            "encoder positions the attention mask pads are not judged in intermediate values",
        ),
    )


def replay_seq2seq(model: Any, call: Seq2SeqCall) -> Any:
    """torch's forward on one captured encoder-decoder call, with the tensors captured then."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    def tensor(name: str) -> Any:
        return torch.from_numpy(np.array(call.feeds[name]))

    with torch.inference_mode(), quiet_transformers():
        if call.role == ENCODER:
            return model.get_encoder()(**{name: tensor(name) for name in call.feeds})
        from transformers import DynamicCache, EncoderDecoderCache

        caches = []
        for attention in ("decoder", "encoder"):
            flat = []
            layer = 0
            while f"past_key_values.{layer}.{attention}.key" in call.feeds:
                flat += [
                    tensor(f"past_key_values.{layer}.{attention}.key"),
                    tensor(f"past_key_values.{layer}.{attention}.value"),
                ]
                layer += 1
            if call.past_length == 0:
                flat = []
            caches.append(make_cache(flat, model.config) if flat else DynamicCache())
        kwargs: dict[str, Any] = {
            "decoder_input_ids": tensor("input_ids"),
            "encoder_outputs": BaseModelOutput(last_hidden_state=tensor("encoder_hidden_states")),
            "past_key_values": EncoderDecoderCache(*caches),
            "use_cache": True,
        }
        if "encoder_attention_mask" in call.feeds:
            kwargs["attention_mask"] = tensor("encoder_attention_mask")
        return model(**kwargs)
