"""Typed results that pass between the core's steps, the CLI, the dashboard and reports.

Data flows one way: InputSet -> (torch, ONNX Runtime) OutputSet -> OutputComparison ->
ValidationRun. Re-judging at other tolerances never touches raw tensors: every
OutputComparison carries an ErrorProfile (core.error_profile) that answers for any (atol, rtol).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np

from core.error_profile import ErrorProfile
from core.layers.result import LayersResult
from core.messages import failure_message
from core.signature import OnnxSignature
from core.tolerances import Tolerance, Tolerances


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    MISSING = "missing"

    @property
    def passed(self) -> bool:
        return self is Status.PASS


@dataclass(frozen=True)
class InputSet:
    """One set of feeds, keyed by ONNX input name. `label` says where it came from."""

    index: int
    feeds: Mapping[str, np.ndarray]
    label: str = ""

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(int(d) for d in a.shape) for name, a in self.feeds.items()}

    def describe(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"shape": [int(d) for d in a.shape], "dtype": str(a.dtype)}
            for name, a in self.feeds.items()
        }


@dataclass(frozen=True)
class OutputSet:
    """Outputs of one side (torch or ONNX) for one input set, in the ONNX output order."""

    arrays: Mapping[str, np.ndarray]
    seconds: float = 0.0
    notes: tuple[str, ...] = ()  # e.g. "output 'y': bfloat16 compared as float32"


@dataclass(frozen=True)
class ErrorStats:
    """Element-wise statistics of one output (float64 arithmetic, NaN/Inf handled apart).

    Values are None where undefined (e.g. max_rel when every ref element is 0, cosine of
    a zero vector, statistics of an empty tensor).
    """

    max_abs: float | None
    worst_index: tuple[int, ...] | None
    ref_at_worst: float | None
    onnx_at_worst: float | None
    max_rel: float | None
    mean_abs: float | None
    rms: float | None
    p99_abs: float | None
    n_nan_mismatch: int
    n_inf_mismatch: int
    cosine: float | None
    snr_db: float | None


@dataclass(frozen=True)
class OutputComparison:
    """The verdict and statistics for one (input set, output)."""

    input_set: int
    name: str
    status: Status
    tolerance: Tolerance
    ref_shape: tuple[int, ...] | None
    onnx_shape: tuple[int, ...] | None
    ref_dtype: str | None
    onnx_dtype: str | None
    n_elements: int
    stats: ErrorStats | None = None
    profile: ErrorProfile | None = None
    n_mismatch: int | None = None
    message: str = ""
    n_excluded: int = 0  # elements not judged (an exclusion mask), counted apart
    excluded_max_abs: float | None = None  # largest finite |onnx - ref| among them

    @property
    def n_judged(self) -> int:
        """Elements the verdict covers: all but the excluded ones."""
        return self.n_elements - self.n_excluded

    @property
    def mismatch_fraction(self) -> float | None:
        if self.n_mismatch is None:
            return None
        return self.n_mismatch / self.n_judged if self.n_judged else 0.0

    @property
    def min_atol_to_pass(self) -> float | None:
        """Smallest atol that passes at this comparison's rtol (None: no atol can)."""
        if self.profile is None:
            return None
        return self.profile.min_atol(self.tolerance.rtol)

    @property
    def can_rejudge(self) -> bool:
        """A tolerance can change its verdict: judged element by element, with a profile
        (shape, dtype and missing failures, and string outputs, stay what they are)."""
        return self.profile is not None and self.status in (Status.PASS, Status.FAIL)

    def rejudge(self, tolerance: Tolerance) -> OutputComparison:
        """The same comparison judged at another tolerance, from the profile alone."""
        if not self.can_rejudge:
            return replace(self, tolerance=tolerance)
        passed = self.profile.passes(tolerance)
        n_mismatch = self.profile.n_mismatch(tolerance)
        return replace(
            self,
            tolerance=tolerance,
            n_mismatch=n_mismatch,
            status=Status.PASS if passed else Status.FAIL,
            message="" if passed else failure_message(n_mismatch, self.n_judged, self.stats),
        )


def set_passed(comparisons: Sequence[OutputComparison], input_set: int) -> bool:
    """Every output of one input set (an hf: step) was judged and passes."""
    mine = [c for c in comparisons if c.input_set == input_set]
    return bool(mine) and all(c.status.passed for c in mine)


class RunKind(StrEnum):
    """Where a run's reference outputs came from (its source)."""

    TORCH = "torch"  # a torch model on generated or given inputs
    REFERENCE = "reference"  # stored reference outputs (REF.npz) on given inputs
    HF_GENERATE = "hf_generate"  # the forward calls of an hf: model's generate()


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
    reference_file: str | None = None
    inputs_by: str | None = None  # torch got the feeds by "name" or by "position"
    inputs_note: str | None = None  # why by position (core.input_binding)


@dataclass(frozen=True)
class GenerationStep:
    """One captured forward call of an hf: run: which step, which phase, its sizes."""

    index: int  # the input set it became
    step: int
    phase: str  # "prefill" | "decode" | "forward"
    label: str
    batch: int
    sequence_length: int
    past_length: int


@dataclass(frozen=True)
class GenerationInfo:
    """What an hf: run adds: its summary (plain JSON, the report's "summary") and steps."""

    summary: Mapping[str, Any]
    steps: tuple[GenerationStep, ...]


@dataclass(frozen=True)
class SavedFrom:
    """Where a reopened run was saved, and what was hashed then (core.saved_run)."""

    path: str
    identity: Mapping[str, Any]
    saved_by: Mapping[str, Any]
    outputs_kept: bool


@dataclass(frozen=True)
class ValidationRun:
    """Everything one validation produced. Raw outputs are kept for inspection views.

    `exclusions[k]` holds, for input set k, the outputs' exclusion masks (True: the element
    is not judged, e.g. padding an attention mask excludes), broadcastable to the output.
    """

    model: str
    onnx: str
    signature: OnnxSignature | None
    tolerances: Tolerances
    environment: Mapping[str, str]
    input_sets: tuple[InputSet, ...]
    comparisons: tuple[OutputComparison, ...]
    ref_outputs: tuple[OutputSet, ...] = ()
    onnx_outputs: tuple[OutputSet, ...] = ()
    exclusions: tuple[Mapping[str, np.ndarray], ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=Provenance)
    generation: GenerationInfo | None = None
    saved: SavedFrom | None = None
    layers: LayersResult | None = None  # intermediate values compared (--layers), core.layers

    @property
    def verdict(self) -> str:
        if all(c.status.passed for c in self.comparisons) and self.comparisons:
            return "pass"
        return "fail"

    @property
    def is_generation(self) -> bool:
        """Its input sets are an LLM's generate() steps (core.hf), not generated inputs."""
        return self.generation is not None

    def exclusion(self, input_set: int, name: str) -> np.ndarray | None:
        """The exclusion mask of one output (broadcastable to it), or None."""
        for position, s in enumerate(self.input_sets):
            if s.index == input_set and position < len(self.exclusions):
                return self.exclusions[position].get(name)
        return None

    @property
    def output_names(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for c in self.comparisons:
            seen.setdefault(c.name, None)
        return tuple(seen)

    def comparison(self, input_set: int, name: str) -> OutputComparison:
        for c in self.comparisons:
            if c.input_set == input_set and c.name == name:
                return c
        raise KeyError((input_set, name))

    def rejudge(self, tolerances: Tolerances) -> ValidationRun:
        """Judge every output again at new tolerances; milliseconds, no tensors touched."""
        tolerances.check_outputs(self.output_names)
        return replace(
            self,
            tolerances=tolerances,
            comparisons=tuple(c.rejudge(tolerances.for_output(c.name)) for c in self.comparisons),
        )
