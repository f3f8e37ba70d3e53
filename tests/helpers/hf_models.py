"""Tiny Hugging Face model directories built in code (random weights, in-code tokenizer).

No hub is reachable here: every test model is made from a config and saved with
save_pretrained, with a WordLevel tokenizer built in memory.
"""

from __future__ import annotations

from pathlib import Path

PROMPTS = ("continue : it rains , what should i do ?", "hello world")
WORDS = tuple(dict.fromkeys(" ".join((*PROMPTS, "the a is sun")).split()))
SPECIAL = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}


def make_tokenizer(
    *,
    specials: tuple[str, str, str, str] = ("<pad>", "<unk>", "<s>", "</s>"),
    decoder: bool = True,
    input_names: tuple[str, ...] = ("input_ids", "attention_mask"),
):
    """A WordLevel tokenizer over WORDS. `specials` are (pad, unk, bos/cls, eos/sep), ids
    0-3; a decoder's tokenizer declares the last two as bos/eos."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    pad, unk, first, last = specials
    vocab = {token: i for i, token in enumerate(specials)}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    ends = {"bos_token": first, "eos_token": last} if decoder else {}
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=pad,
        unk_token=unk,
        model_input_names=list(input_names),
        **ends,
    )


def randomized(model, weight_std: float = 0.5):
    """Every parameter random, seeded (biases and LayerNorm weights too: a fresh model's are
    0 and 1, which an exporter or optimizer may fold away and a moved bias would not
    change); LayerNorm weights near 1, biases small and not 0. In eval mode."""
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            small = "bias" in name or "LayerNorm" in name
            p.copy_(torch.randn_like(p) * (0.1 if small else weight_std))
            if "LayerNorm.weight" in name or name.endswith(("ln_1.weight", "ln_2.weight")):
                p.add_(1.0)
    return model.eval()


def save_model(model, directory: Path) -> str:
    model.save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return str(directory)


def make_llama_dir(directory: Path, *, hidden: int = 32) -> str:
    """A 2-layer Llama (hidden 32, vocab 96) with random weights, saved with its tokenizer."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **SPECIAL,
    )
    torch.manual_seed(0)
    return save_model(transformers.LlamaForCausalLM(config), directory)


def make_gemma_dir(directory: Path) -> str:
    """A 2-layer Gemma (hidden 32, head_dim 8, vocab 96) with random weights: Optimum exports
    it without position_ids (the file numbers positions from the past length)."""
    import torch
    import transformers

    config = transformers.GemmaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        **SPECIAL,
    )
    torch.manual_seed(0)
    return save_model(transformers.GemmaForCausalLM(config), directory)


def make_gpt2_dir(directory: Path) -> str:
    """A 2-layer GPT-2 (hidden 32, vocab 96, learned absolute positions) with random weights."""
    import torch
    import transformers

    config = transformers.GPT2Config(
        vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64, **SPECIAL
    )
    torch.manual_seed(0)
    return save_model(transformers.GPT2LMHeadModel(config), directory)
