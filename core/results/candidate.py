"""One way the ONNX side was run (CandidateInfo) and its share of a run (CandidateRun), and
what the run was made from (Provenance)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypeVar, cast

from parity.results.approximation import ApproximationResult
from parity.results.comparison import OutputComparison, OutputSet
from parity.results.quantization import QuantizationResult
from parity.tolerances import Tolerances
from parity.verdict import Verdict

if TYPE_CHECKING:  # annotation only: parity.layers stands on this package
    from parity.layers.result import LayersResult

R = TypeVar("R")


class RunKind(StrEnum):
    """Where a run's reference outputs came from (its source)."""

    TORCH = "torch"  # a torch model on generated or given inputs
    REFERENCE = "reference"  # stored reference outputs (REF.npz) on given inputs
    HF_GENERATE = "hf_generate"  # the forward calls of an hf: model's generate()
    ONNX = "onnx"  # a reference ONNX file run by ONNX Runtime (ONNX against ONNX)


@dataclass(frozen=True)
class Provenance:
    """What a run was made from, beyond the model spec and ONNX path: the files and
    settings that decide its numbers, with content hashes computed while loading."""

    kind: RunKind = RunKind.TORCH
    onnx_sha256: str | None = None
    model_sha256: str | None = None
    opset: int | None = None
    producer: str | None = None
    ort_opt_level: str | None = None
    seed: int | None = None
    weights_file: str | None = None
    reference_file: str | None = None  # REF.npz, or the reference ONNX file (kind onnx)
    reference_provider: str | None = None  # kind onnx: how the reference file was run
    reference_opt_level: str | None = None
    inputs_by: str | None = None  # torch got the feeds by "name" or by "position"
    inputs_note: str | None = None  # why by position (parity.run.input_binding)
    # the settings the run was made with, as JSON (parity.run.config_json): to make it again
    config: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class CandidateInfo:
    """One way the ONNX side was run: a file under one provider at one optimisation level.

    `error` is set when the candidate could not be run at all (unreadable file, a session
    that would not start, inputs that do not fit its signature, ONNX Runtime raising): it
    then has no comparisons, and the run's verdict is ERROR. `notes` say what was adapted
    (feeds cast to its input dtypes, outputs compared in the reference's dtype).
    """

    index: int
    onnx: str
    provider: str
    ort_opt_level: str
    onnx_sha256: str | None = None
    error: str | None = None
    error_kind: str | None = None  # parity.errors kind ("onnx_load", "onnx_run", "inputs", ...)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0  # ONNX Runtime time over every input set

    @property
    def label(self) -> str:
        """``#1 model.onnx (CPU, all)``: how tables, menus and grids name a candidate."""
        provider = self.provider.removesuffix("ExecutionProvider")
        name = PurePath(self.onnx).name or self.onnx
        return f"#{self.index} {name} ({provider}, {self.ort_opt_level})"


@dataclass(frozen=True)
class CandidateRun:
    """One candidate's share of a run (`ValidationRun.candidates`): its info, its judged rows,
    its ONNX outputs and its analyses' results (its layers among them). The run stores one
    per candidate, so no reader works out where a candidate's rows and output sets lie."""

    info: CandidateInfo
    outputs: tuple[OutputComparison, ...] = ()  # its (input set, output) rows
    # one OutputSet per input set, in `input_sets` order (empty ones for a candidate that could
    # not run); () when the run kept no outputs
    onnx_outputs: tuple[OutputSet, ...] = ()
    # what each analysis found of it, by the analysis's name (parity.results.by_name): its
    # intermediate values against the reference ("layers", --layers), its quantized weights
    # judged ("quantization"), its intended approximations ("approximation")
    results: Mapping[str, object] = field(default_factory=dict)

    def result(self, name: str, cls: type[R]) -> R | None:
        """Analysis `name`'s result for this candidate (None: not run, or found nothing)."""
        value = self.results.get(name)
        return value if isinstance(value, cls) else None

    @property
    def layers(self) -> LayersResult | None:
        """Its intermediate values against the reference (--layers: parity.layers.result)."""
        return cast("LayersResult | None", self.results.get("layers"))

    @property
    def quantization(self) -> QuantizationResult | None:
        """Its weight-only quantized ops judged for what they are (parity.analyses.quantization)."""
        return self.result("quantization", QuantizationResult)

    @property
    def approximation(self) -> ApproximationResult | None:
        """Its intended approximations (a tanh GELU, 16-bit weights) judged for what they are."""
        return self.result("approximation", ApproximationResult)

    @property
    def index(self) -> int:
        return self.info.index

    @property
    def label(self) -> str:
        return self.info.label

    @property
    def verdict(self) -> Verdict:
        """ERROR when it could not be run; PASS when it has rows and every one passes."""
        if self.info.error is not None:
            return Verdict.ERROR
        ok = bool(self.outputs) and all(c.status.passed for c in self.outputs)
        return Verdict.PASS if ok else Verdict.FAIL

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def failing(self) -> tuple[str, ...]:
        """Names of its outputs that fail in at least one input set (as `ValidationRun.failing`)."""
        return tuple(dict.fromkeys(c.name for c in self.outputs if not c.status.passed))

    def rejudge(self, tolerances: Tolerances) -> CandidateRun:
        """Its rows judged again at `tolerances` (from their profiles alone)."""
        rows = tuple(c.rejudge(tolerances.for_output(c.name)) for c in self.outputs)
        return replace(self, outputs=rows)
