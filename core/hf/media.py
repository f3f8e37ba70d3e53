"""Inputs of image and audio models (`pixel_values`, `input_features`, `input_values`).

These directories have an image processor or a feature extractor and no tokenizer. Parity
makes seeded random images (uint8, at the processor's size) or a seeded random waveform
(one second at the extractor's sampling rate) and runs them through the directory's own
processor, so the values have the distribution the model expects; without a processor,
pixel_values are drawn standard normal at the config's image size. `--inputs` files are used
as given instead. Importing this module never imports transformers.

Contract:
MEDIA_INPUTS; is_media_model(model) -> bool
load_processor(transformers, directory, main_input) -> processor or None
generated_inputs(model, processor, *, seed, batch) -> MediaInputs
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.errors import ModelLoadError, first_line

PIXELS = "pixel_values"
MEDIA_INPUTS = (PIXELS, "input_features", "input_values")
DEFAULT_BATCH = 2
WAVE_SECONDS = 1.0
_FALLBACK_IMAGE = 224


@dataclass(frozen=True)
class MediaInputs:
    """One forward's inputs and how they were made (the run summary shows `described`)."""

    feeds: Mapping[str, np.ndarray]
    described: str


def is_media_model(model: Any) -> bool:
    """True when the model's main input is pixels or audio features, not token ids."""
    return getattr(model, "main_input_name", "input_ids") in MEDIA_INPUTS


def load_processor(transformers: Any, directory: str, main_input: str) -> Any:
    """The directory's image processor (pixels) or feature extractor (audio); None when it
    has none (pixels are then generated from the config alone)."""
    auto = transformers.AutoImageProcessor if main_input == PIXELS else None
    auto = auto or transformers.AutoFeatureExtractor
    try:
        return auto.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
    except Exception as exc:
        if main_input == PIXELS:
            return None
        raise ModelLoadError(
            f"hf:{directory}: cannot load the feature extractor ({main_input} need one): "
            f"{first_line(exc)}"
        ) from exc


def generated_inputs(
    model: Any, processor: Any, *, seed: int, batch: int = DEFAULT_BATCH
) -> MediaInputs:
    """Seeded inputs for the model's main input, through its processor when it has one."""
    rng = np.random.default_rng(seed)
    main = model.main_input_name
    if main == PIXELS:
        return _images(model.config, processor, rng, batch)
    return _audio(processor, rng, batch, main)


def _images(config: Any, processor: Any, rng: np.random.Generator, batch: int) -> MediaInputs:
    height, width = _image_size(config, processor)
    channels = int(getattr(config, "num_channels", 3) or 3)
    if processor is None:
        pixels = rng.standard_normal((batch, channels, height, width), dtype=np.float32)
        return MediaInputs(
            {PIXELS: pixels},
            f"{batch} standard-normal pixel_values {height}×{width} (no image processor), seeded",
        )
    images = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(batch)]
    out = processor(images=images, return_tensors="np")
    pixels = np.asarray(out[PIXELS], dtype=np.float32)
    return MediaInputs(
        {PIXELS: pixels},
        f"{batch} random {height}×{width} images through {type(processor).__name__} "
        f"-> pixel_values {list(pixels.shape)}, seeded",
    )


def _image_size(config: Any, processor: Any) -> tuple[int, int]:
    """(height, width) of the raw images: the processor's size, else the config's."""
    size = getattr(processor, "size", None) or {}
    if isinstance(size, Mapping):
        if "height" in size and "width" in size:
            return int(size["height"]), int(size["width"])
        if "shortest_edge" in size:
            short = int(size["shortest_edge"])
            longest = size.get("longest_edge")
            return short, int(longest) if longest else short
    elif isinstance(size, int):
        return size, size
    image = getattr(config, "image_size", _FALLBACK_IMAGE)
    if isinstance(image, (list, tuple)):
        return int(image[0]), int(image[1])
    return int(image), int(image)


def _audio(processor: Any, rng: np.random.Generator, batch: int, main: str) -> MediaInputs:
    rate = int(getattr(processor, "sampling_rate", 16000) or 16000)
    samples = int(rate * WAVE_SECONDS)
    waves = [(0.1 * rng.standard_normal(samples)).astype(np.float32) for _ in range(batch)]
    out = processor(waves, sampling_rate=rate, return_tensors="np")
    if main not in out:
        raise ModelLoadError(
            f"{type(processor).__name__} made {sorted(out)}, not the model's input {main!r}"
        )
    feeds = {main: np.asarray(out[main], dtype=np.float32)}
    return MediaInputs(
        feeds,
        f"{batch} random {WAVE_SECONDS:g} s waveforms at {rate} Hz through "
        f"{type(processor).__name__} -> {main} {list(feeds[main].shape)}, seeded",
    )
