"""Source: an encoder-decoder hf: model's generate(), step by step, against an export folder.

Load `hf:DIR` (T5, BART, Whisper, ...) -> the encoder's inputs (tokenized prompts, or audio
features generated at the feature extractor's size / given with --inputs) -> greedy
generate() captured: the encoder call and every decoder call -> each call is one Case, run
on the file of the export that computes it (parity.hf.seq2seq_parts) and labelled `encoder`,
`decoder step 0`, `decoder step 1`, ... The encoder's padding (what its attention mask
excludes) is not judged in its hidden states nor in the cross-attention keys/values made
from them. Parity does not export encoder-decoder models itself: --onnx names the folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parity.errors import UsageError
from parity.hf.seq2seq_capture import DECODER, Seq2SeqCall, Seq2SeqCapture, capture_seq2seq
from parity.hf.seq2seq_loading import (
    LoadedSeq2Seq,
    encoder_inputs,
    is_encoder_decoder_dir,
    load_seq2seq,
)
from parity.hf.seq2seq_parts import (
    Part,
    Role,
    feeds_for,
    folder_files,
    ignored_outputs,
    padding_mask,
    part_for,
    parts_of,
    reference_for,
)
from parity.hf.source import NOT_EXPORTED, HfSourceBase, call_case
from parity.hf.steps_text import SEQ2SEQ
from parity.hf.summary import (
    PHASES,
    masked_summary,
    model_class_summary,
    padding_side,
    transformers_version,
)
from parity.results import (
    GenerationInfo,
    GenerationStep,
    InputSet,
    OutputComparison,
)
from parity.run.config import RunConfig
from parity.run.hf_options import hf_directory
from parity.run.progress import ProgressReporter
from parity.settings import Mention
from parity.signature import OnnxSignature
from parity.sources import Case, TorchSide

_TIMING_KEYS = {"load": "load_model"}


def is_seq2seq(config: RunConfig) -> bool:
    """An hf: run whose directory holds an encoder-decoder model."""
    return config.model is not None and is_encoder_decoder_dir(hf_directory(config.model))


SEQ2SEQ_NO_FLOAT64 = (
    "noise floor not measured: an encoder-decoder model's calls are not made again in float64 "
    "(decoder-only and one-forward hf: models are)"
)


FOLDER_LAYERS = (
    "an encoder-decoder export folder runs several files: give one of them with --onnx "
    "(encoder_model.onnx, decoder_model_merged.onnx, decoder_model.onnx or "
    "decoder_with_past_model.onnx) to compare its intermediate values"
)


class Seq2SeqSource(HfSourceBase):
    """Each case: one call of generate() (the encoder's, or a decoder step's)."""

    def __init__(self, config: RunConfig, report: ProgressReporter) -> None:
        super().__init__(config, report)
        self._inputs_file = _one_given_set(config)
        self._given_feeds = config.feeds[0] if config.feeds else None
        self._loaded: LoadedSeq2Seq | None = None
        self._capture: Seq2SeqCapture | None = None
        self._parts: tuple[Part, ...] = ()
        self._files: dict[str, str] = {}
        self._inputs_made = ""

    def onnx_parts(self, path: str) -> dict[str, str]:
        """A folder: the files of it this run uses, by name; a file: itself."""
        self._files = folder_files(path) if Path(path).is_dir() else {"": path}
        return self._files

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        raise UsageError(
            (
                f"{self.model} is an encoder-decoder model: give ",
                Mention("onnx", "FOLDER"),
                ", an Optimum export (optimum-cli export onnx --model DIR --task "
                "text2text-generation-with-past FOLDER; automatic-speech-recognition-with-past "
                "for audio), or one of its files",
            )
        )

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        self._parts = parts_of(parts or {"": signature})
        decoder = any(p.role is not Role.ENCODER for p in self._parts)
        _, capture = self._captured(decoder=decoder)
        for call in capture.calls:
            part = part_for(call, self._parts)
            if part is not None:
                yield dataclasses.replace(_case(call, part), float64_note=SEQ2SEQ_NO_FLOAT64)

    def _captured(self, *, decoder: bool = True) -> tuple[LoadedSeq2Seq, Seq2SeqCapture]:
        if self._loaded is None or self._capture is None:
            self._loaded = self._load_timed(
                lambda: load_seq2seq(
                    hf_directory(self.model),
                    random_weights=self.options.random_weights,
                    config_overrides=self.options.config_overrides,
                    seed=self._seed,
                    task=self.options.task,
                    max_memory=self._max_memory,
                )
            )
            what = f"generate(): {self.options.max_new_tokens} new token(s)" if decoder else ""
            self._report("capture", what or "the encoder's forward", 0.15)
            prompts = () if self._loaded.audio else self.options.prompts
            inputs, self._inputs_made = encoder_inputs(
                self._loaded, prompts=prompts, seed=self._seed, given=self._given_inputs()
            )
            self._capture = self._counted(
                capture_seq2seq(
                    self._loaded.model,
                    inputs,
                    max_new_tokens=self.options.max_new_tokens,
                    tokenizer=self._loaded.tokenizer,
                    prompts=prompts,
                    decoder=decoder,
                )
            )
        return self._loaded, self._capture

    def _given_inputs(self) -> dict[str, np.ndarray] | None:
        if self._given_feeds is not None:  # the Python API's arrays
            return {name: np.asarray(a) for name, a in self._given_feeds.items()}
        if self._inputs_file is None:
            return None
        from parity.limits.budget import MemoryBudget
        from parity.run.inputs import read_feeds_file

        return read_feeds_file(self._inputs_file, budget=MemoryBudget.of(self._max_memory))

    def _inputs_text(self, encoder: Seq2SeqCall) -> str:
        shapes = ", ".join(f"{n} {list(a.shape)}" for n, a in encoder.feeds.items())
        if self._inputs_file is not None:
            return f"{shapes} from {self._inputs_file}"
        return f"{shapes}: {self._inputs_made}"

    def torch_side(self) -> TorchSide:
        """One file of the export: the encoder, or the model on its decoder calls (a merged
        decoder's too: parity.layers compares each branch), parity.hf.layers_side. A folder:
        none, and why."""
        if len(self._parts) != 1:
            return TorchSide(None, missing=FOLDER_LAYERS)
        role = self._parts[0].role
        from parity.hf.layers_side import seq2seq_torch_side

        loaded, capture = self._captured()
        return seq2seq_torch_side(loaded.model, capture.calls, encoder=role is Role.ENCODER)

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> GenerationInfo:
        loaded, capture = self._captured()
        validated = [c for c in capture.calls if part_for(c, self._parts) is not None]
        return GenerationInfo(
            summary=self._summary(loaded, capture, validated, comparisons, timings),
            steps=tuple(generation_step(c) for c in validated),
        )

    def _summary(
        self,
        loaded: LoadedSeq2Seq,
        capture: Seq2SeqCapture,
        validated: list[Seq2SeqCall],
        comparisons: Sequence[OutputComparison],
        timings: Mapping[str, float],
    ) -> dict[str, Any]:
        from parity.results import set_passed

        calls = capture.calls
        ok = [c.label for c in validated if set_passed(comparisons, c.index)]
        failed = [c.label for c in validated if c.label not in ok] if comparisons else []
        done = {c.index for c in validated}
        mask = calls[0].feeds.get("attention_mask")
        padding = padding_side(mask)
        decoders = [c for c in calls if c.role == DECODER]
        return {
            "model": self.model,
            "kind": SEQ2SEQ,
            "model_type": loaded.model_type,
            **model_class_summary(loaded),
            "architecture": type(loaded.model).__name__,
            "config_overrides": dict(loaded.config_overrides),
            "weights": "random" if loaded.random_weights else "trained",
            "prompts": list(capture.prompts),
            "inputs": self._inputs_text(calls[0]),
            "padding": padding,
            "left_padded": padding == "left",
            "generated": list(capture.generated),
            "max_new_tokens": self.options.max_new_tokens if decoders else None,
            "n_calls": len(calls),
            "n_encoder": len(calls) - len(decoders),
            "n_prefill": sum(c.past_length == 0 for c in decoders),
            "n_decode": sum(c.past_length > 0 for c in decoders),
            "n_forward": 0,
            "files": [
                {
                    "file": Path(self._files.get(part.key, part.key)).name,
                    "role": str(part.role),
                    "steps": [c.label for c in validated if part_for(c, self._parts) is part],
                }
                for part in self._parts
            ],
            "not_validated": [c.label for c in calls if c.index not in done],
            "export": dict(NOT_EXPORTED),
            "steps_ok": len(ok) if comparisons else 0,
            "steps_total": len(validated),
            "failed_steps": failed,
            "masked": masked_summary(comparisons),
            "timings": {p: timings.get(_TIMING_KEYS.get(p, p)) for p in PHASES},
            "transformers": transformers_version(),
        }


def _case(call: Seq2SeqCall, part: Part) -> Case:
    ignore = ignored_outputs(call, part)
    reference = {k: v for k, v in reference_for(call, part.signature).items() if k not in ignore}
    return call_case(
        InputSet(index=call.index, feeds=feeds_for(call, part.signature), label=call.label),
        reference,
        call.seconds,
        lambda name, shape: padding_mask(call, name, shape),
        part=part.key,
        ignore=ignore,
    )


def generation_step(call: Seq2SeqCall) -> GenerationStep:
    shape = call.main_input.shape
    return GenerationStep(
        index=call.index,
        step=call.index + 1,
        phase=call.phase,
        label=call.label,
        batch=int(shape[0]),
        sequence_length=int(shape[-1]),
        past_length=call.past_length,
    )


def _one_given_set(config: RunConfig) -> str | None:
    """The --inputs file, if any: one given set at most (its encoder's inputs for one
    generate() run)."""
    if config.n_given_sets > 1:
        raise UsageError(
            (
                "an encoder-decoder hf: model takes one ",
                Mention("input_files"),
                f" file (its encoder's inputs for one generate() run), got {config.n_given_sets}",
            )
        )
    return config.input_files[0] if config.input_files else None
