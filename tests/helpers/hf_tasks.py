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
    from tests.helpers.hf_models import make_tokenizer

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


def make_vit_dir(directory: Path, seed: int = 0) -> str:
    """A 2-layer ViT image classifier (32×32 images, 3 labels) and its image processor."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.ViTConfig(image_size=32, num_labels=3, **VISION)
    transformers.ViTForImageClassification(config).save_pretrained(directory)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    return str(directory)


def make_yolos_dir(directory: Path, seed: int = 0) -> str:
    """A 2-layer YOLOS detector (32×48 images, 5 detection tokens) and its image processor."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.YolosConfig(
        image_size=[32, 48], num_labels=3, num_detection_tokens=5, **VISION
    )
    transformers.YolosForObjectDetection(config).save_pretrained(directory)
    processor = transformers.YolosImageProcessor(size={"shortest_edge": 32, "longest_edge": 48})
    processor.save_pretrained(directory)
    return str(directory)


def make_wav2vec2_dir(directory: Path, seed: int = 0) -> str:
    """A 2-layer Wav2Vec2 audio classifier (2 small conv layers) and its feature extractor."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 8),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        num_labels=3,
        vocab_size=32,
    )
    transformers.Wav2Vec2ForSequenceClassification(config).save_pretrained(directory)
    extractor = transformers.Wav2Vec2FeatureExtractor(sampling_rate=16000)
    extractor.save_pretrained(directory)
    return str(directory)
