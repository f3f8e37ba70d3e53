"""Tiny encoder-decoder directories (T5, BART, Whisper: 2 layers, d_model 32, random weights)
and their Optimum exports, made in the test (no hub here).

Optimum's default export writes encoder_model.onnx, decoder_model.onnx,
decoder_with_past_model.onnx and decoder_model_merged.onnx; with no_post_process=True it
writes the first three only, byte for byte the same files (checked on optimum-onnx 0.1). The
"unmerged" layout is therefore the default folder without the merged decoder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.hf_models import make_tokenizer

FAMILIES = ("t5", "bart", "whisper")
TASKS = {
    "t5": "text2text-generation-with-past",
    "bart": "text2text-generation-with-past",
    "whisper": "automatic-speech-recognition-with-past",
}
MEL_BINS, FRAMES = 8, 32  # Whisper: 2 * max_source_positions frames


def make_seq2seq_dir(family: str, directory: Path) -> str:
    import torch
    import transformers

    small = {"vocab_size": 96, "d_model": 32, "pad_token_id": 0, "eos_token_id": 3}
    if family == "t5":
        config = transformers.T5Config(
            d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
            decoder_start_token_id=0, **small,
        )  # fmt: skip
        cls = transformers.T5ForConditionalGeneration
    elif family == "bart":
        config = transformers.BartConfig(
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=64, bos_token_id=2, decoder_start_token_id=3,
            forced_eos_token_id=None, **small,
        )  # fmt: skip
        cls = transformers.BartForConditionalGeneration
    else:
        config = transformers.WhisperConfig(
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            num_mel_bins=MEL_BINS, max_source_positions=FRAMES // 2, max_target_positions=32,
            bos_token_id=2, decoder_start_token_id=2, **small,
        )  # fmt: skip
        cls = transformers.WhisperForConditionalGeneration
    torch.manual_seed(0)
    model = cls(config)
    if family == "whisper":  # random weights: no language/task tokens to force or suppress
        model.generation_config.suppress_tokens = []
        model.generation_config.begin_suppress_tokens = []
    model.save_pretrained(directory)
    if family == "whisper":
        transformers.WhisperFeatureExtractor(
            feature_size=MEL_BINS, sampling_rate=16000, hop_length=500, chunk_length=1
        ).save_pretrained(directory)  # 16000 samples / 500 = 32 frames
    else:
        make_tokenizer().save_pretrained(directory)
    return str(directory)


def export_optimum(family: str, model_dir: str, out: Path) -> Path:
    """Optimum's default export (all four files)."""
    from optimum.exporters import onnx as exporters

    shapes = {"nb_max_frames": FRAMES} if family == "whisper" else {}
    exporters.main_export(model_dir, output=out, task=TASKS[family], do_validation=False, **shapes)
    return out


def unmerged_copy(folder: Path, out: Path) -> Path:
    """What Optimum's no_post_process=True export holds: no merged decoder."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"):
        shutil.copyfile(folder / name, out / name)
    return out
