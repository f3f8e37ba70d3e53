"""Load a local Hugging Face model directory (`hf:DIR`) and its tokenizer, offline.

transformers is an optional extra: every entry point goes through `require_transformers`,
which turns a missing install into one line naming the extra. Nothing here ever reaches the
hub (`local_files_only=True` everywhere, and the directory must exist), and nothing runs a
directory's own code: a config, tokenizer or processor file with `auto_map` is refused before
transformers reads it, and every load passes `trust_remote_code=False` (so transformers never
asks "Do you wish to run the custom code?"). The model's size is estimated from its config
(parity.hf.size) and checked against the memory budget before it is built.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from parity.errors import ModelLoadError, first_line
from parity.hf import sentence
from parity.hf.heads import FORWARD, SEQ2SEQ, ModelClass, choose_model_class
from parity.hf.media import is_media_model, load_processor
from parity.load.pickle_cause import file_pickle_cause, pickle_cause, unpickling_error
from parity.run.hf_options import INSTALL_HINT, format_overrides, typed_override


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
    tokenizer: Any  # transformers PreTrainedTokenizerBase; None for image/audio models
    model_type: str
    random_weights: bool
    encoder: bool  # one forward (an encoder, a classifier, a detector), not generate()
    config_overrides: Mapping[str, Any] = field(default_factory=dict)
    model_class: ModelClass | None = None  # the task and class it was built as, and why
    processor: Any = None  # an image processor / feature extractor (then no tokenizer)

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
    task: str | None = None,
    onnx_outputs: Mapping[str, int] | None = None,
    max_memory: int | None = None,
) -> LoadedHfModel:
    """Config (with overrides applied first), then the class for its task (parity.hf.heads:
    `task`, its architectures, `onnx_outputs` names -> ranks), then weights or a random init,
    then the tokenizer."""
    transformers = require_transformers()

    overrides = dict(config_overrides or {})
    path = Path(directory)
    if not path.is_dir():
        raise ModelLoadError(f"hf:{directory}: no such directory (hf: takes a local directory)")
    # a sentence-transformers folder: the pipeline its modules.json lists (parity.hf.sentence)
    pipeline = sentence.read_pipeline(path) if sentence.wanted(path, task, onnx_outputs) else None
    source = str(path / pipeline.transformer) if pipeline and pipeline.transformer else directory
    if not (Path(source) / "config.json").is_file():
        raise ModelLoadError(f"hf:{source}: no config.json in the directory")

    config = _load_config(transformers, source, overrides)
    if pipeline is not None:
        model_class = ModelClass("feature-extraction", "AutoModel", FORWARD, pipeline.describe())
    else:
        model_class = _model_class(config, directory, task=task, onnx_outputs=onnx_outputs)
    auto_cls = getattr(transformers, model_class.auto_class)
    encoder = model_class.kind == FORWARD
    model = instantiate(
        auto_cls,
        config,
        source,
        random_weights=random_weights,
        seed=seed,
        max_memory=max_memory,
    )
    if pipeline is not None:
        model = sentence.sentence_model(model, pipeline)
    model.eval()
    tokenizer = processor = None
    with quiet_transformers():
        if is_media_model(model):  # pixels or audio: a processor, no tokenizer
            processor = load_processor(transformers, source, model.main_input_name)
        else:
            tokenizer = _load_tokenizer(transformers, source, left_pad=not encoder)
    return LoadedHfModel(
        directory=directory,
        model=model,
        tokenizer=tokenizer,
        model_type=str(getattr(config, "model_type", "?")),
        random_weights=random_weights,
        encoder=encoder,
        config_overrides=overrides,
        model_class=model_class,
        processor=processor,
    )


def instantiate(
    auto_cls: Any,
    config: Any,
    directory: str,
    *,
    random_weights: bool,
    seed: int,
    max_memory: int | None = None,
) -> Any:
    """The model in float32: from config.json alone (seeded random weights) or its weights,
    once its estimated size (parity.hf.size) fits the memory budget."""
    import torch

    from parity.hf.size import check_model_size

    check_model_size(config, f"hf:{directory}", max_memory)
    with quiet_transformers():
        try:
            if random_weights:
                torch.manual_seed(seed)
                return auto_cls.from_config(config, dtype=torch.float32, trust_remote_code=False)
            # use_kernels=False: validate the model's own code, never hub kernels (5.25
            # turns them on by default and then needs the `kernels` package).
            return auto_cls.from_pretrained(
                directory,
                config=config,
                local_files_only=True,
                dtype=torch.float32,
                use_kernels=False,
                trust_remote_code=False,
            )
        except Exception as exc:  # transformers raises OSError/ValueError/RuntimeError alike
            _refuse_pickled_weights(directory, exc)
            hint = ""
            if not random_weights and "no file named" in str(exc):
                hint = " (--random-weights builds the model from config.json alone)"
            raise ModelLoadError(
                f"hf:{directory}: cannot load the model: {first_line(exc)}{hint}"
            ) from exc


def _refuse_pickled_weights(directory: str, exc: BaseException) -> None:
    """One line when torch's weights_only loader refused a weights file (transformers words
    it as a TF 2.0 checkpoint question): which file, and what it needs."""
    refused = unpickling_error(exc)
    if refused is None:
        return
    files = sorted(Path(directory).glob("*.bin"), key=lambda f: str(f) not in str(exc))
    if not files:
        raise ModelLoadError(
            f"hf:{directory}: refused the weights: they need pickle beyond tensors "
            f"({pickle_cause(refused, b'')}); nothing was run"
        ) from exc
    raise ModelLoadError(
        f"hf:{directory}: refused {files[0].name}: it needs pickle beyond tensors "
        f"({file_pickle_cause(refused, files[0])}); nothing was run"
    ) from exc


def _load_config(transformers: ModuleType, directory: str, overrides: dict[str, Any]) -> Any:
    refuse_remote_code(directory)
    try:
        config = transformers.AutoConfig.from_pretrained(
            directory, local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:
        raise ModelLoadError(f"hf:{directory}: cannot read config.json: {first_line(exc)}") from exc
    old_layers = getattr(config, "num_hidden_layers", None)
    for key, value in overrides.items():
        setattr(config, key, typed_override(config, key, value))
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


CODE_FILES = (
    "config.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "feature_extractor_config.json",
    "image_processor_config.json",
    "video_preprocessor_config.json",
)
"""The files of a directory in which transformers looks for `auto_map` (classes it would
import from the directory's own .py files)."""
_MAX_CODE_FILE_BYTES = 64 << 20


def refuse_remote_code(directory: str) -> None:
    """One line when any of the directory's CODE_FILES has `auto_map` (read as JSON, before
    transformers sees it): Parity never imports a directory's Python files."""
    import json

    from parity.files.safe_read import read_bytes

    for name in CODE_FILES:
        path = Path(directory) / name
        if not path.exists() and not path.is_symlink():
            continue
        if path.is_file() and path.stat().st_size > _MAX_CODE_FILE_BYTES:
            raise ModelLoadError(f"hf:{directory}: {name} is over {_MAX_CODE_FILE_BYTES >> 20} MB")
        raw = read_bytes(
            path, what=f"hf:{directory}:", limit=_MAX_CODE_FILE_BYTES, error=ModelLoadError
        )
        try:
            data = json.loads(raw)
        except ValueError:
            continue  # transformers says what is wrong with it
        if isinstance(data, dict) and "auto_map" in data:
            raise ModelLoadError(
                f"hf:{directory}: {name} asks to run its own code (auto_map); Parity never "
                "runs a directory's code"
            )


def _model_class(
    config: Any,
    directory: str,
    *,
    task: str | None,
    onnx_outputs: Mapping[str, int] | None,
) -> ModelClass:
    """The class the directory was made for (parity.hf.heads); one line naming it when hf:
    cannot validate it."""
    try:
        chosen = choose_model_class(config, task=task, onnx_outputs=onnx_outputs)
    except ModelLoadError as exc:
        raise ModelLoadError(f"hf:{directory}: {exc}") from exc
    if chosen.kind == SEQ2SEQ:
        raise ModelLoadError(
            f"hf:{directory}: {chosen.task} ({chosen.auto_class}, model type "
            f"{config.model_type!r}) is an encoder-decoder, but config.json does not say "
            "is_encoder_decoder: true, which hf: needs to validate its generate() steps"
        )
    return chosen


TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
    "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "special_tokens_map.json",
)  # fmt: skip
"""What a saved tokenizer leaves in a folder: without any, transformers fails deep inside
(``stat: path should be string ... not NoneType``), so Parity says it first."""


def _load_tokenizer(transformers: ModuleType, directory: str, *, left_pad: bool) -> Any:
    from pathlib import Path

    if not any((Path(directory) / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"hf:{directory}: no tokenizer files in the folder (tokenizer.json, "
            "tokenizer_config.json, vocab.*, *.model): prompts need one; save it beside the "
            "model (tokenizer.save_pretrained(folder))"
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            directory, local_files_only=True, trust_remote_code=False
        )
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

    def __exit__(self, *exc: Any) -> None:
        self._logging.set_verbosity(self._level)
        if self._bars:
            self._logging.enable_progress_bar()
        self._warnings.__exit__(*exc)
