"""Sources: where a run's cases come from. The loop in parity.pipeline is the only consumer.

A source yields `Case`s lazily: an input set, the reference outputs for it, and what must
not be judged. Kinds today: generated or given inputs + a torch model (`torch_inputs`),
stored reference outputs (`stored`), the captured generate() calls of an hf: model
(`parity.hf.source`), a reference ONNX file (`onnx_reference`; its `reference_signature` is
the signature cases are made for, where other sources take the first candidate's).
A new kind of run is a new Source; a new way to run the ONNX side is a new candidate in
the loop (parity.run.candidates). Neither is a new orchestrator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from parity.results import (
    GenerationInfo,
    InputSet,
    OutputComparison,
    OutputSet,
    PrecisionRun,
    Provenance,
)
from parity.signature import OnnxSignature


@dataclass(frozen=True)
class Crop:
    """Compare a candidate's output at `index` only (e.g. the logits positions torch kept);
    `reason` is said in the comparison's message whenever the crop changes the shape."""

    index: tuple[slice, ...]
    reason: str


@dataclass(frozen=True)
class Case:
    """One input set with its reference outputs, computed once for every candidate.

    `exclude[name]`: bool mask broadcastable to output `name`, True where an element is not
    judged (`exclude_reason` says why, e.g. padding the attention mask never attends).
    `ignore[name]`: a candidate output that is not compared at all in this case, and why (a
    merged decoder's placeholder outputs on the branch that does not compute them).
    """

    input_set: InputSet
    reference: OutputSet
    exclude: Mapping[str, np.ndarray] = field(default_factory=dict)
    exclude_reason: str = ""
    crop: Mapping[str, Crop] = field(default_factory=dict)
    part: str = ""  # the file of a multi-file export that runs this case ("": the only file)
    ignore: Mapping[str, str] = field(default_factory=dict)  # candidate outputs not compared: why
    # --noise-floor: the reference run again in float64 (None: not run; `float64_note` why)
    float64: Mapping[str, np.ndarray] | None = None
    float64_note: str = ""
    # ... and at a 16-bit candidate's precision, by precision (a source that can: see
    # TorchSource.measure_noise_at)
    at_precision: Mapping[str, PrecisionRun] = field(default_factory=dict)


class Source(Protocol):
    """What the loop needs from a kind of run (see parity.pipeline.run_validation)."""

    model: str  # the run's model text (a spec, or "reference:FILE")
    n_cases: int | None  # for progress; None until known
    timings: dict[str, float]  # what the source spent (load_model, capture, export, ...)
    environment_modules: tuple[str, ...]  # modules whose versions the report lists

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        """The ONNX file when none was given (a demo's export, the source's own export), else
        UsageError. `workdir()` makes a temp folder that is removed when the run ends."""
        ...

    def cases(self, signature: OnnxSignature) -> Iterator[Case]:
        """The cases, made lazily, for an ONNX file with this signature.

        A source whose export may be several files (an encoder-decoder folder) also has
        `onnx_parts(path) -> {part: file}` (first: the main file, whose signature is the
        run's) and takes `cases(signature, parts={part: signature})`; each case says its
        `part`. The loop asks for parts only when `onnx_parts` gives more than one file.
        """
        ...

    def provenance(self) -> Provenance:
        """Kind, hashes and files this source read (the loop adds the ONNX side)."""
        ...

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> GenerationInfo | None:
        """What an hf: run adds to the run (None for other sources)."""
        ...
