"""Source: a data set (`--data`) judged with an hf: folder's one-forward model (a classifier,
an encoder, an image model), read through the folder's own tokenizer or image processor.

Each case is one batch (parity.sources.data.DataBatches): torch's forward on that batch
alone, its outputs under the ONNX names (parity.hf.feeds), the padding positions no query
attends left out as in every hf: run; nothing is captured up front, so memory is a batch's.
Texts (a .txt file, a table's text column) go through the tokenizer with truncation at the
model's length and, where the file fixes the sequence length, padding to it; otherwise each
batch is padded to its longest text (parity.data.batches). Images (an ImageFolder's files, a
table's image column) go through the image processor. Parity's own export of such a model is
static (one batch, one length), so a data run needs the file given (--onnx).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from parity.errors import UsageError
from parity.hf.capture import capture_forward
from parity.hf.feeds import masked_positions, paired_outputs
from parity.hf.loading import LoadedHfModel
from parity.hf.media import PIXELS
from parity.hf.source import HfSourceBase, call_case
from parity.results import InputSet
from parity.run.config import RunConfig
from parity.run.progress import ProgressReporter
from parity.signature import OnnxSignature
from parity.sources import Case, TorchSide
from parity.sources.data import DataBatches

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
NO_EXPORT = (
    "--data with an hf: model needs its ONNX file (--onnx): Parity's own export of a "
    "one-forward model is static (one batch, one length) and a data set's batches are not; "
    "export it with Optimum (optimum-cli export onnx --model DIR OUT)"
)


class HfDataSource(DataBatches, HfSourceBase):
    """Each case: a batch of the user's samples, through the folder's processor, and the
    model's forward on it once."""

    keeps_arrays = False
    runs_other_sizes = False

    def __init__(self, config: RunConfig, report: ProgressReporter) -> None:
        super().__init__(config, report)
        self._start_data(config)
        self._loaded: LoadedHfModel | None = None

    def _model(self, signature: OnnxSignature) -> LoadedHfModel:
        if self._loaded is None:
            self._loaded = self._load_model(signature)
            if not self._loaded.encoder:
                raise UsageError(
                    f"--data needs a one-forward hf: model (a classifier, an encoder, an image "
                    f"model); {self.model} ({self._loaded.model_type}) generates, and its "
                    "inputs are the steps of generate()"
                )
        return self._loaded

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        raise UsageError(NO_EXPORT)

    def known_tasks(self) -> dict[str, str]:
        """Tasks the model's own config tells (an `id2label` of two or more classes on a
        classification head: its `logits` are a classification)."""
        loaded = self._loaded
        if loaded is None or loaded.model_class is None:
            return {}
        labels = getattr(loaded.config, "id2label", None) or {}
        if "classification" in loaded.model_class.task and len(labels) >= 2:
            return {"logits": "classification"}
        return {}

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        self.timings.update(inputs=0.0, torch=0.0)
        loaded = self._model(signature)
        self._open_data(signature, model_processor(loaded, signature))
        accepted = inspect.signature(loaded.model.forward).parameters

        def reference(batch: Any, input_set: InputSet) -> Case:
            feeds = {n: a for n, a in input_set.feeds.items() if n in accepted}
            call = capture_forward(loaded, prompts=(), inputs=[feeds]).calls[0]
            self.timings["torch"] += call.seconds
            ref, pairing = paired_outputs(call, signature.outputs)
            case = call_case(
                input_set, ref, call.seconds, lambda n, s: masked_positions(call, n, s)
            )
            if pairing:
                made = dataclasses.replace(case.reference, pairing=pairing)
                case = dataclasses.replace(case, reference=made)
            return case

        yield from self._cases_of(reference)

    def generation(self, comparisons: Any, timings: Any) -> None:
        return None

    def torch_side(self) -> TorchSide:
        return TorchSide(None, missing="a data run lets each batch go (--layers is refused)")


def model_processor(loaded: LoadedHfModel, signature: OnnxSignature) -> Any:
    """The folder's own processor as a parity.data.read.Processor: its image processor for a
    file that takes pixel_values, else its tokenizer; None when it has neither."""
    if loaded.processor is not None and PIXELS in signature.input_names:
        return _image_processor(loaded.processor)
    if loaded.tokenizer is not None and "input_ids" in signature.input_names:
        return _tokenizer(loaded, signature)
    return None


def _image_processor(processor: Any) -> Any:
    from parity.data.read import Processor

    def arrays(image: Any) -> dict[str, np.ndarray]:
        out = processor(images=image.convert("RGB"), return_tensors="np")
        return {PIXELS: np.asarray(out[PIXELS][0], dtype=np.float32)}

    def file(path: str) -> dict[str, np.ndarray]:
        from PIL import Image

        with Image.open(path) as image:
            return arrays(image)

    def value(cell: Any) -> dict[str, np.ndarray]:
        from PIL import Image

        if isinstance(cell, Mapping):  # an Image column as stored: {"bytes", "path"}
            cell = cell.get("bytes") or cell.get("path")
        if isinstance(cell, (bytes, bytearray)):
            with Image.open(io.BytesIO(cell)) as image:
                return arrays(image)
        if isinstance(cell, str):
            return file(cell)
        if hasattr(cell, "convert"):  # a PIL image (datasets decodes its Image column)
            return arrays(cell)
        raise TypeError(f"not an image ({type(cell).__name__})")

    return Processor("image", type(processor).__name__, file, value)


def _tokenizer(loaded: LoadedHfModel, signature: OnnxSignature) -> Any:
    """Texts through the tokenizer: truncated at the model's length; padded to the file's
    sequence length where it fixes one, else to each batch's longest (`pad`)."""
    from parity.data.read import Processor

    tokenizer = loaded.tokenizer
    specs = {s.name: s for s in signature.inputs}
    fixed = specs["input_ids"].shape[1] if len(specs["input_ids"].shape) == 2 else None
    fixed = fixed if isinstance(fixed, int) else None
    longest = _max_length(tokenizer, loaded.config)
    length = fixed or longest
    wanted = [n for n in TEXT_INPUTS if n in specs]

    def value(text: Any) -> dict[str, np.ndarray]:
        if not isinstance(text, str):
            raise TypeError(f"not a text ({type(text).__name__})")
        encoded = tokenizer(
            text,
            truncation=length is not None,
            max_length=length,
            padding="max_length" if fixed else False,
            return_tensors="np",
        )
        out = {n: np.asarray(encoded[n][0]) for n in wanted if n in encoded}
        ids = out["input_ids"]
        out.setdefault("attention_mask", np.ones_like(ids))
        out.setdefault("token_type_ids", np.zeros_like(ids))
        return {n: out[n] for n in wanted}

    def file(path: str) -> dict[str, np.ndarray]:
        return value(Path(path).read_text(encoding="utf-8").rstrip("\n"))

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    pad = {} if fixed else {"input_ids": int(pad_id), "attention_mask": 0, "token_type_ids": 0}
    how = f"padded to {fixed}" if fixed else "padded to each batch's longest"
    cut = f", truncated at {length}" if length else ""
    return Processor(
        "text",
        f"{type(tokenizer).__name__} ({how}{cut})",
        file,
        value,
        {n: v for n, v in pad.items() if n in specs},
    )


def _max_length(tokenizer: Any, config: Any) -> int | None:
    """The longest input the model takes: the tokenizer's model_max_length where it is set
    (transformers' "unset" is a huge number), else the config's position embeddings."""
    found = []
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and limit < 1_000_000:
        found.append(limit)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        found.append(positions)
    return min(found) if found else None
