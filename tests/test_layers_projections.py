"""Module paths as GenAI's builder spells them, and packed / split projections
(parity.layers.projections): the naming rules alone, on transformers' own module paths."""

from __future__ import annotations

import pytest
import torch

from parity.layers.projections import Chunk, Packed, parse, projection, respelled, split_of


@pytest.fixture(scope="module")
def paths() -> dict[str, set[str]]:
    """named_modules() of a tiny Llama (q/k/v, gate/up apart) and Phi-3 (both packed)."""
    import transformers

    common = dict(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    phi3 = transformers.Phi3ForCausalLM(
        transformers.Phi3Config(**common, original_max_position_embeddings=16)
    )
    return {
        "llama": {p for p, _ in llama.named_modules()},
        "phi3": {p for p, _ in phi3.named_modules()},
    }


def test_genai_s_spelling_is_read_as_transformers() -> None:
    assert respelled("model/layers.1/attn/qkv_proj") == "model/layers.1/self_attn/qkv_proj"
    assert respelled("model/layers.2/final_norm_layernorm") == "model/norm"
    assert respelled("model/layers.0/mlp/down_proj") == "model/layers.0/mlp/down_proj"
    assert respelled("encoder/attn_norm") == "encoder/attn_norm"  # a whole part only


def test_a_packed_scope_stands_for_torch_s_parts(paths) -> None:
    made = projection("model.layers.0.self_attn.qkv_proj", paths["llama"])
    assert made is not None and made.torch_module == "model.layers.0.self_attn.q_proj+k_proj+v_proj"
    assert parse(made.key) == Packed(
        tuple(f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj"))
    )
    assert made.reads == "model.layers.0.self_attn.q_proj"
    # Phi-3 has its own qkv_proj: no projection needed, none made for a path it has
    assert projection("model.layers.0.self_attn.q_proj", paths["phi3"]) is None


def test_a_split_scope_stands_for_its_half_of_the_packed_module(paths) -> None:
    made = projection("model.layers.0.mlp.up_proj", paths["phi3"])
    assert made is not None and made.torch_module == "model.layers.0.mlp.gate_up_proj"
    assert parse(made.key) == Chunk("model.layers.0.mlp.gate_up_proj", 1, 2)
    assert split_of("model.layers.0.mlp.gate_proj") == ("model.layers.0.mlp.gate_up_proj", 0, 2)
    assert projection("model.layers.0.mlp.up_proj", paths["llama"]) is None  # its own module
    assert parse("model.layers.0.mlp.up_proj") is None
