"""Source: the forward calls an hf: model makes in greedy generate(), with an export step.

Load `hf:DIR` -> capture generate() (prefill + each decode step; an encoder's single
forward) -> when no ONNX file is given, export it (core.hf.export) into the run's temp
folder or --export-path -> one Case per captured call: the call's feeds for this ONNX file,
torch's outputs under the ONNX names, the logits positions torch kept (a crop of the ONNX
logits) and the padding positions the attention mask excludes (not judged: exports
legitimately differ where nothing attends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.config import RunConfig
from core.errors import ExportError
from core.hf.capture import Capture, CapturedCall, capture_forward, capture_generate
from core.hf.feeds import LOGITS, masked_positions, onnx_feeds, reference_outputs
from core.hf.loading import LoadedHfModel, load_hf_model
from core.hf.options import HfOptions, hf_directory
from core.hf.summary import build_summary
from core.progress import ProgressReporter
from core.results import (
    GenerationInfo,
    GenerationStep,
    InputSet,
    OutputComparison,
    OutputSet,
    Provenance,
    RunKind,
)
from core.signature import OnnxSignature
from core.sources import Case, Crop

PADDING = "padding, never attended"
NOT_EXPORTED = {"status": "not run (--onnx given)", "seconds": None}


class HfSource:
    """Each case: one captured forward call of generate() (or an encoder's forward)."""

    environment_modules: tuple[str, ...] = ("transformers",)

    def __init__(self, config: RunConfig, report: ProgressReporter) -> None:
        assert config.model is not None
        self.model: str = config.model
        self.n_cases: int | None = None
        self.timings: dict[str, float] = {}
        self.options: HfOptions = config.hf or HfOptions()
        self._seed = config.seed
        self._report = report
        self._loaded: LoadedHfModel | None = None
        self._capture: Capture | None = None
        self._export: dict[str, Any] = dict(NOT_EXPORTED)

    def _captured(self) -> tuple[LoadedHfModel, Capture]:
        """Load the model and capture its calls, once."""
        if self._loaded is None or self._capture is None:
            self._report("load", f"loading {self.model}", 0.02)
            t0 = time.perf_counter()
            self._loaded = load_hf_model(
                hf_directory(self.model),
                random_weights=self.options.random_weights,
                config_overrides=self.options.config_overrides,
                seed=self._seed,
            )
            self.timings["load_model"] = time.perf_counter() - t0
            self._capture = _capture(self._loaded, self.options, self._report)
            self.timings["capture"] = self._capture.seconds
            self.n_cases = len(self._capture.calls)
        return self._loaded, self._capture

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        """Parity's own export: to --export-path, else into the run's temp folder."""
        from core.hf.export import export_decoder, export_encoder

        loaded, capture = self._captured()
        given = self.options.export_path
        path = Path(given) if given else workdir() / "model.onnx"
        self._report("export", f"exporting with torch.onnx.export(dynamo=True) to {path}", 0.25)
        exporter = export_encoder if loaded.encoder else export_decoder
        try:
            result = exporter(loaded.model, capture.calls, path)
        except ExportError as exc:
            self.timings["export"] = exc.seconds or 0.0
            self._export = {"status": "FAILED", "seconds": exc.seconds, "cause": exc.cause}
            summary = build_summary(*self._summary_input(), (), self.timings)
            raise exc.with_summary(summary) from exc.__cause__
        self.timings["export"] = result.seconds
        self._export = {
            "status": "OK",
            "seconds": result.seconds,
            "path": str(result.path),
            "dynamic": {
                "batch": result.dynamic.batch,
                "sequence_length": result.dynamic.sequence,
                "past_sequence_length": result.dynamic.past,
            },
        }
        return str(result.path)

    def cases(self, signature: OnnxSignature) -> Iterator[Case]:
        _, capture = self._captured()
        for call in capture.calls:
            yield _case(call, signature)

    def provenance(self) -> Provenance:
        return Provenance(kind=RunKind.HF_GENERATE, seed=self._seed)

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> GenerationInfo:
        _, capture = self._captured()
        return GenerationInfo(
            summary=build_summary(*self._summary_input(), comparisons, timings),
            steps=tuple(generation_step(call) for call in capture.calls),
        )

    def _summary_input(self) -> tuple[str, LoadedHfModel, HfOptions, Capture, dict[str, Any]]:
        loaded, capture = self._captured()
        return self.model, loaded, self.options, capture, self._export


def _capture(loaded: LoadedHfModel, options: HfOptions, report: ProgressReporter) -> Capture:
    if loaded.encoder:
        report("capture", "forward() on the prompts (encoder)", 0.15)
        return capture_forward(loaded, prompts=options.prompts)
    report("capture", f"generate(): {options.max_new_tokens} new token(s)", 0.15)
    return capture_generate(loaded, prompts=options.prompts, max_new_tokens=options.max_new_tokens)


def _case(call: CapturedCall, signature: OnnxSignature) -> Case:
    """One call: its feeds, torch's outputs, the logits crop and the padding excluded."""
    reference = reference_outputs(call, tuple(signature.output_names))
    exclude: dict[str, np.ndarray] = {}
    for name, array in reference.items():
        where = masked_positions(call, name, tuple(array.shape))
        if where is not None and where.any():
            exclude[name] = where
    crop = logits_crop(reference.get(LOGITS))
    return Case(
        input_set=InputSet(index=call.index, feeds=onnx_feeds(call, signature), label=call.label),
        reference=OutputSet(arrays=reference, seconds=call.seconds),
        exclude=exclude,
        exclude_reason=PADDING,
        crop={LOGITS: crop} if crop is not None else {},
    )


def logits_crop(logits: np.ndarray | None) -> Crop | None:
    """torch's generate() computes the logits of the last position(s) only
    (`logits_to_keep`); ONNX files give every position: compare the ones torch kept."""
    if logits is None or logits.ndim != 3 or logits.shape[1] == 0:
        return None
    kept = int(logits.shape[1])
    return Crop(
        index=(slice(None), slice(-kept, None), slice(None)),
        reason=f"the last {kept} position(s), the ones torch's generate() computed",
    )


def generation_step(call: CapturedCall) -> GenerationStep:
    return GenerationStep(
        index=call.index,
        step=call.step,
        phase=call.phase,
        label=call.label,
        batch=int(call.input_ids.shape[0]),
        sequence_length=int(call.input_ids.shape[1]),
        past_length=call.past_length,
    )
