"""Load a local Hugging Face model directory (`hf:DIR`) and its tokenizer, offline.

transformers is an optional extra: every entry point goes through `require_transformers`,
which turns a missing install into one line naming the extra. Nothing here ever reaches the
hub (`local_files_only=True` everywhere, and the directory must exist).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from core.errors import ModelLoadError, UsageError, first_line
from core.hf.options import INSTALL_HINT, format_overrides


def require_transformers() -> ModuleType:
    """The transformers module, or a ModelLoadError that says which extra to install."""
    try:
        return importlib.import_module("transformers")
    except ImportError as exc:
        raise ModelLoadError(
            f"hf: models need the transformers package, which is not installed: {INSTALL_HINT}"
        ) from exc


@dataclass(frozen=True)
class LoadedHfModel:
    """A model in eval mode with its tokenizer, and how it was made (for the summary)."""

    directory: str
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    model_type: str
    random_weights: bool
    encoder: bool  # an encoder (feature extraction: one forward) rather than a causal LM
    config_overrides: Mapping[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> Any:
        return self.model.config

    def describe(self) -> str:
        weights = "random weights" if self.random_weights else "trained weights"
        return (
            f"{self.model_type} ({type(self.model).__name__}, {weights}, "
            f"overrides: {format_overrides(self.config_overrides)})"
        )


def load_hf_model(
    directory: str,
    *,
    random_weights: bool = False,
    config_overrides: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> LoadedHfModel:
    """Config (with overrides applied first), then weights or a random init, then tokenizer."""
    transformers = require_transformers()
    import torch

    overrides = dict(config_overrides or {})
    path = Path(directory)
    if not path.is_dir():
        raise ModelLoadError(f"hf:{directory}: no such directory (hf: takes a local directory)")
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"hf:{directory}: no config.json in the directory")

    config = _load_config(transformers, directory, overrides)
    auto_cls, encoder = _auto_class(transformers, config, directory)
    with quiet_transformers():
        try:
            if random_weights:
                torch.manual_seed(seed)
                model = auto_cls.from_config(config, dtype=torch.float32)
            else:
                # use_kernels=False: validate the model's own code, never hub kernels (5.25
                # turns them on by default and then needs the `kernels` package).
                model = auto_cls.from_pretrained(
                    directory,
                    config=config,
                    local_files_only=True,
                    dtype=torch.float32,
                    use_kernels=False,
                )
        except Exception as exc:  # transformers raises OSError/ValueError/RuntimeError alike
            hint = ""
            if not random_weights and "no file named" in str(exc):
                hint = " (--random-weights builds the model from config.json alone)"
            raise ModelLoadError(
                f"hf:{directory}: cannot load the model: {first_line(exc)}{hint}"
            ) from exc
    model.eval()
    with quiet_transformers():
        tokenizer = _load_tokenizer(transformers, directory, left_pad=not encoder)
    return LoadedHfModel(
        directory=directory,
        model=model,
        tokenizer=tokenizer,
        model_type=str(getattr(config, "model_type", "?")),
        random_weights=random_weights,
        encoder=encoder,
        config_overrides=overrides,
    )


def _load_config(transformers: ModuleType, directory: str, overrides: dict[str, Any]) -> Any:
    try:
        config = transformers.AutoConfig.from_pretrained(directory, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"hf:{directory}: cannot read config.json: {first_line(exc)}") from exc
    old_layers = getattr(config, "num_hidden_layers", None)
    for key, value in overrides.items():
        if not hasattr(config, key):
            raise UsageError(
                f"--config-override {key}: {type(config).__name__} has no attribute {key!r}"
            )
        setattr(config, key, value)
    # Per-layer lists (e.g. Qwen2's layer_types) must follow a shrunk layer count.
    new_layers = getattr(config, "num_hidden_layers", None)
    layer_types = getattr(config, "layer_types", None)
    if (
        "num_hidden_layers" in overrides
        and "layer_types" not in overrides
        and isinstance(layer_types, list)
        and isinstance(new_layers, int)
        and len(layer_types) == old_layers
    ):
        config.layer_types = layer_types[:new_layers]
    return config


def _auto_class(transformers: ModuleType, config: Any, directory: str) -> tuple[Any, bool]:
    """(Auto class, is_encoder): causal LMs first, then encoder-only base models."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    causal_classes = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    architectures = list(getattr(config, "architectures", None) or [])
    # The saved architecture decides: BERT also has a causal-LM class, but a directory
    # saved from BertModel is a feature extractor.
    if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and (
        not architectures or any(a in causal_classes for a in architectures)
    ):
        return transformers.AutoModelForCausalLM, False
    if config.model_type in MODEL_MAPPING_NAMES and not getattr(
        config, "is_encoder_decoder", False
    ):
        return transformers.AutoModel, True
    raise ModelLoadError(
        f"hf:{directory}: model type {config.model_type!r} is neither a causal LM nor an "
        "encoder model; hf: validates those two kinds"
    )


def _load_tokenizer(transformers: ModuleType, directory: str, *, left_pad: bool) -> Any:
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(
            f"hf:{directory}: cannot load the tokenizer (prompts need one): {first_line(exc)}"
        ) from exc
    if left_pad:
        tokenizer.padding_side = "left"  # decoder batches are left-padded for generate()
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(
                f"hf:{directory}: the tokenizer has neither a pad nor an eos token"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class quiet_transformers:
    """Silence transformers' warnings and progress bars ("Loading weights ...") for a block.

    The CLI's output is the per-step table; loading and generate() chatter would bury it.
    """

    def __enter__(self) -> None:
        from transformers.utils import logging

        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")
        self._logging = logging
        self._level = logging.get_verbosity()
        self._bars = logging.is_progress_bar_enabled()
        logging.set_verbosity_error()
        logging.disable_progress_bar()

    def __exit__(self, *exc: object) -> None:
        self._logging.set_verbosity(self._level)
        if self._bars:
            self._logging.enable_progress_bar()
        self._warnings.__exit__(*exc)
