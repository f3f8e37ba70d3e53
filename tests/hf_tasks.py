"""Tiny task models (a head on a 2-layer, hidden-32 body), saved and exported by Optimum.

Random weights from a config, saved with save_pretrained into tmp dirs, exported with
Optimum's `main_export` for a named task (no hub is reachable; nothing is downloaded).
"""

from __future__ import annotations

from pathlib import Path

BERT = {
    "vocab_size": 96,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}
VISION = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "patch_size": 8,
    "num_channels": 3,
}


def bert_config(**extra):
    import transformers

    return transformers.BertConfig(**BERT, **extra)


def save_text_model(model, directory: Path) -> str:
    """save_pretrained with an encoder tokenizer (WordLevel, right padding)."""
    from hf_models import make_tokenizer

    model.save_pretrained(directory)
    make_tokenizer(
        specials=("[PAD]", "[UNK]", "[CLS]", "[SEP]"),
        decoder=False,
        input_names=("input_ids", "token_type_ids", "attention_mask"),
    ).save_pretrained(directory)
    return str(directory)


def optimum_export(model_dir: str, out_dir: Path, task: str) -> Path:
    """Optimum's ONNX export of a saved directory for `task`; the model.onnx path."""
    from optimum.exporters.onnx import main_export

    main_export(model_dir, output=out_dir, task=task, do_validation=False)
    return Path(out_dir) / "model.onnx"
