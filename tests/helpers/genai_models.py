"""Tiny causal LM folders for ONNX Runtime GenAI's builder, one per architecture.

Hidden 64 with 4 heads (GroupQueryAttention wants a head size that is a multiple of 16),
2 kv heads, 2 layers, random weights; every bias random too (a fresh model's are 0, which
the builder leaves out: Qwen2's packed q/k/v bias then never reaches the file). Phi-3's
config needs `original_max_position_embeddings == max_position_embeddings` for the builder.
"""

from __future__ import annotations

from pathlib import Path

FAMILIES = ("llama", "qwen2", "phi3", "mistral")


def make_causal_dir(directory: Path, family: str, seed: int = 0) -> str:
    import torch
    import transformers

    from tests.helpers.hf_models import SPECIAL, save_model

    common = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **SPECIAL,
    )
    if family == "phi3":
        common["original_max_position_embeddings"] = 64
    names = {"llama": "Llama", "qwen2": "Qwen2", "phi3": "Phi3", "mistral": "Mistral"}
    config = getattr(transformers, f"{names[family]}Config")(**common)
    torch.manual_seed(seed)
    model = getattr(transformers, f"{names[family]}ForCausalLM")(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn_like(p) * 0.1)
    return save_model(model, directory)
