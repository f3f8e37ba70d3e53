"""Load an encoder-decoder `hf:DIR` (T5, BART, Whisper, ...) and make its encoder's inputs.

The class comes from parity.hf.heads (`--task`, config.architectures), limited to the
encoder-decoder tasks. Text models (a tokenizer) encode the prompts as one right-padded
batch, the encoders' convention (generate() masks the padding for every decoder step). Audio
models (main input `input_features`) take the seeded features parity.hf.media makes through the
directory's feature extractor, or the `input_features` of an --inputs file; no tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parity.errors import InputError, ModelLoadError
from parity.hf.heads import BY_NAME, SEQ2SEQ, ModelClass, choose_model_class, tasks_for
from parity.hf.loading import (
    _load_config,
    _load_tokenizer,
    instantiate,
    quiet_transformers,
    require_transformers,
)
from parity.hf.media import generated_inputs, is_media_model, load_processor
from parity.settings import Mention, Setting

AUDIO_INPUT = "input_features"


def is_encoder_decoder_dir(directory: str) -> bool:
    """Whether config.json says encoder-decoder (read as JSON; anything unreadable is left
    to the regular loader, which says what is wrong)."""
    from parity.errors import ParityError
    from parity.files.safe_read import read_text

    try:
        data = json.loads(read_text(Path(directory) / "config.json", what="", error=ParityError))
    except (ParityError, ValueError):
        return False
    return isinstance(data, dict) and data.get("is_encoder_decoder") is True


@dataclass(frozen=True)
class LoadedSeq2Seq:
    directory: str
    model: Any  # transformers ...ForConditionalGeneration in eval mode
    tokenizer: Any  # None for an audio model
    model_type: str
    random_weights: bool
    audio: bool  # the encoder reads input_features
    model_class: ModelClass
    config_overrides: Mapping[str, Any] = field(default_factory=dict)


def load_seq2seq(
    directory: str,
    *,
    random_weights: bool = False,
    config_overrides: Mapping[str, Any] | None = None,
    seed: int = 0,
    task: str | None = None,
    max_memory: int | None = None,
) -> LoadedSeq2Seq:
    transformers = require_transformers()
    overrides = dict(config_overrides or {})
    config = _load_config(transformers, directory, overrides)
    model_type = str(getattr(config, "model_type", "?"))
    chosen = _seq2seq_class(config, model_type, directory, task)
    auto_cls = getattr(transformers, chosen.auto_class)
    model = instantiate(
        auto_cls,
        config,
        directory,
        random_weights=random_weights,
        seed=seed,
        max_memory=max_memory,
    )
    model.eval()
    audio = is_media_model(model)
    tokenizer = None
    if not audio:
        with quiet_transformers():
            tokenizer = _load_tokenizer(transformers, directory, left_pad=False)
    return LoadedSeq2Seq(
        directory=directory,
        model=model,
        tokenizer=tokenizer,
        model_type=model_type,
        random_weights=random_weights,
        audio=audio,
        model_class=chosen,
        config_overrides=overrides,
    )


def _seq2seq_class(config: Any, model_type: str, directory: str, task: str | None) -> ModelClass:
    """The encoder-decoder class: --task or the architectures when they name one, else the
    first encoder-decoder task the model type has."""
    chosen = choose_model_class(config, task=task)
    if chosen.kind == SEQ2SEQ:
        return chosen
    if task is not None:
        raise ModelLoadError(
            (
                f"hf:{directory}: ",
                Mention("task", str(task)),
                f" is not an encoder-decoder task, and this directory holds one ({model_type}); "
                f"its tasks: {', '.join(_seq2seq_tasks(model_type))}",
            )
        )
    names = _seq2seq_tasks(model_type)
    if not names:
        raise ModelLoadError(
            f"hf:{directory}: encoder-decoder model type {model_type!r} has no sequence-to-"
            "sequence class in transformers; hf: validates T5/BART-like and Whisper-like models"
        )
    found = BY_NAME[names[0]]
    return ModelClass(names[0], found.auto_class, SEQ2SEQ, "is_encoder_decoder")


def _seq2seq_tasks(model_type: str) -> list[str]:
    return [name for name in tasks_for(model_type) if BY_NAME[name].kind == SEQ2SEQ]


def encoder_inputs(
    loaded: LoadedSeq2Seq,
    *,
    prompts: Sequence[str],
    seed: int,
    given: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], str]:
    """The encoder's inputs and how they were made: given feeds, generated audio features,
    or the tokenized prompts."""
    if loaded.audio:
        if given is not None:
            features = given.get(AUDIO_INPUT)
            if features is None or features.ndim != 3:
                raise InputError(
                    f": an audio model needs {AUDIO_INPUT!r} (batch, mel bins, frames); "
                    f"the file has {sorted(given)}",
                    setting=Setting("input_files"),
                )
            return {AUDIO_INPUT: np.ascontiguousarray(features, dtype=np.float32)}, "given"
        transformers = require_transformers()
        with quiet_transformers():
            processor = load_processor(transformers, loaded.directory, AUDIO_INPUT)
        made = generated_inputs(loaded.model, processor, seed=seed)
        return {k: np.asarray(v) for k, v in made.feeds.items()}, made.described
    if given is not None:
        raise InputError(
            (
                "applies to audio models (input_features); a text model's encoder inputs are its ",
                Mention("prompt"),
                " texts",
            ),
            setting=Setting("input_files"),
        )
    encoded = loaded.tokenizer(list(prompts), return_tensors="np", padding=True)
    ids = np.asarray(encoded["input_ids"], dtype=np.int64)
    mask = encoded.get("attention_mask")
    mask = np.ones_like(ids) if mask is None else np.asarray(mask, dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask}, "the tokenized prompts"
