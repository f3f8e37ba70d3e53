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


def make_sentence_dir(
    directory: Path,
    *,
    pooling: tuple[str, ...] = ("mean",),
    normalize: bool = True,
    seed: int = 0,
) -> str:
    """A sentence-transformers folder as the hub ships one: a tiny BertModel saved at its
    root, `modules.json` (Transformer -> Pooling (-> Normalize)), `1_Pooling/config.json` in
    sentence-transformers' own boolean keys, `2_Normalize/`."""
    import json

    import torch
    import transformers

    torch.manual_seed(seed)
    save_text_model(transformers.BertModel(bert_config()), directory)
    modules = [("Transformer", ""), ("Pooling", "1_Pooling")]
    modules += [("Normalize", "2_Normalize")] if normalize else []
    listed = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (kind, path) in enumerate(modules)
    ]
    (directory / "modules.json").write_text(json.dumps(listed))
    keys = {"cls": "cls_token", "mean": "mean_tokens", "max": "max_tokens"}
    config = {f"pooling_mode_{v}": k in pooling for k, v in keys.items()}
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": BERT["hidden_size"], **config})
    )
    if normalize:
        (directory / "2_Normalize").mkdir(exist_ok=True)
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64}))
    return str(directory)


def optimum_export_without_positions(model_dir: str, out_dir: Path) -> Path:
    """Optimum's text-generation-with-past export of a GPT-2 directory through a custom ONNX
    config that leaves position_ids out (GPT-2's own config has them): the file then numbers
    positions from the past length, as transformers does without them."""
    import transformers
    from optimum.exporters.onnx import main_export
    from optimum.exporters.onnx.config import TextDecoderOnnxConfig
    from optimum.exporters.onnx.model_configs import GPT2OnnxConfig

    class WithoutPositions(TextDecoderOnnxConfig):
        NORMALIZED_CONFIG_CLASS = GPT2OnnxConfig.NORMALIZED_CONFIG_CLASS
        DUMMY_INPUT_GENERATOR_CLASSES = GPT2OnnxConfig.DUMMY_INPUT_GENERATOR_CLASSES
        DEFAULT_ONNX_OPSET = GPT2OnnxConfig.DEFAULT_ONNX_OPSET

    config = transformers.AutoConfig.from_pretrained(model_dir)
    custom = WithoutPositions(
        config, task="text-generation", use_past=True, use_past_in_inputs=True
    )
    main_export(
        model_dir,
        output=out_dir,
        task="text-generation-with-past",
        custom_onnx_configs={"model": custom},
        do_validation=False,
    )
    return Path(out_dir) / "model.onnx"
