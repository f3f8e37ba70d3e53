"""The size of an hf: model, estimated from its config before it is built.

A config.json of a few bytes can ask for any model: `num_hidden_layers: 1000000`, or a
`hidden_size`/`vocab_size` in the billions, is gigabytes of float32 parameters that
transformers allocates layer by layer before anything fails. The estimate is an upper bound
over the fields configs use for widths, depths, feed-forward sizes, vocabularies, positions
and experts (every nested sub-config, e.g. a text_config and a vision_config, counted too):

    per config: 2·vocab·width + positions·width + channels·kernel²·width + 3·width²
                + layers · (8·width·attention + 3·width·ffn·experts + 16·width)

(positions include an image's patches; channels·kernel² is a patch or audio stem, kernel at
least 3; attention is heads·head_dim, at least width, with room for a decoder's
cross-attention; ffn is at least 4·width; layers sums every depth field, encoder and decoder
alike). Four bytes a parameter (float32) are checked against the memory budget
(parity.limits.budget).

Contract: estimate_parameters(config) -> int; check_model_size(config, what, max_memory)
raises BudgetError (one line) when the estimate is over the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from parity.limits.budget import MemoryBudget
from parity.settings import Mention

_WIDTH = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "word_embed_proj_dim")
_LAYERS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers") + (
    "decoder_layers",
    "num_decoder_layers",
    "decoder_num_layers",
    "num_encoder_layers",
)
_FFN = ("intermediate_size", "ffn_dim", "n_inner", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim") + (
    "hidden_dim",
    "moe_intermediate_size",
    "ffn_hidden_size",
)
_VOCAB = ("vocab_size",)
_POSITIONS = (
    "max_position_embeddings",
    "n_positions",
    "max_source_positions",
    "max_target_positions",
) + ("n_ctx",)
_HEADS = ("num_attention_heads", "num_heads", "n_head", "encoder_attention_heads") + (
    "decoder_attention_heads",
)
_HEAD_DIM = ("head_dim", "d_kv", "kv_channels", "attention_head_size")
_CHANNELS = ("num_channels", "num_mel_bins", "input_feat_per_channel", "in_channels")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_BYTES_PER_PARAMETER = 4  # hf: models are built in float32


def estimate_parameters(config: Any) -> int:
    """An upper bound of the parameters `config` (a transformers config or its dict) asks
    for; Python ints, so no size overflows."""
    data = config.to_dict() if hasattr(config, "to_dict") else config
    total = 0
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        if not isinstance(item, Mapping):
            continue
        stack.extend(v for v in item.values() if isinstance(v, Mapping))
        width = _largest(item, _WIDTH)
        if not width:
            continue
        layers = sum(_count(item.get(k)) for k in _LAYERS)
        ffn = max(_largest(item, _FFN), 4 * width)
        attention = max(width, _largest(item, _HEADS) * _largest(item, _HEAD_DIM))
        experts = max(1, _largest(item, _EXPERTS))
        vocab, positions = _largest(item, _VOCAB), _largest(item, _POSITIONS)
        patch = _count(item.get("patch_size"))
        if patch and _count(item.get("image_size")):
            positions += (_count(item.get("image_size")) // patch + 1) ** 2
        stem = _largest(item, _CHANNELS) * max(3, patch) ** 2 * width + 3 * width * width
        total += 2 * vocab * width + positions * width + stem
        per_layer = 8 * width * attention + 3 * width * ffn * experts + 16 * width
        total += max(1, layers) * per_layer
    return total


def check_model_size(config: Any, what: str, max_memory: int | None) -> None:
    """Refuse (BudgetError, one line) a model whose estimated float32 parameters are over
    the budget (--max-memory; parity.limits.budget's default without it)."""
    data = config.to_dict() if hasattr(config, "to_dict") else config
    parameters = estimate_parameters(data)
    fields = ", ".join(
        f"{k} {data[k]}" for k in (*_WIDTH, *_LAYERS, *_VOCAB) if _count(data.get(k))
    )
    MemoryBudget.of(max_memory).check(
        parameters * _BYTES_PER_PARAMETER,
        f"{what}'s model (an estimated {parameters:,} float32 parameters from "
        f"its config: {fields or 'nested configs'})",
        proceed=("shrink it with ", Mention("config_override"), " (e.g. num_hidden_layers=2)"),
    )


def _largest(item: Mapping[str, Any], keys: Iterable[str]) -> int:
    return max((_count(item.get(k)) for k in keys), default=0)


def _count(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0
