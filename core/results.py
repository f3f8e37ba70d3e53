"""Typed results that pass between the core's steps, the CLI, the dashboard and reports.

Data flows one way: InputSet -> (torch, ONNX Runtime) OutputSet -> OutputComparison ->
ValidationRun. Re-judging at other tolerances never touches raw tensors: every
OutputComparison carries an ErrorProfile (core.error_profile) that answers for any (atol, rtol).
"""

from __future__ import annotations

from collections.abc import Mapping
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

    @property
    def mismatch_fraction(self) -> float | None:
        if self.n_mismatch is None:
            return None
        return self.n_mismatch / self.n_elements if self.n_elements else 0.0

    @property
    def min_atol_to_pass(self) -> float | None:
        """Smallest atol that passes at this comparison's rtol (None: no atol can)."""
        if self.profile is None:
            return None
        return self.profile.min_atol(self.tolerance.rtol)

    def rejudge(self, tolerance: Tolerance) -> OutputComparison:
        """The same comparison judged at another tolerance, from the profile alone."""
        if self.profile is None or self.status not in (Status.PASS, Status.FAIL):
            return replace(self, tolerance=tolerance)
        passed = self.profile.passes(tolerance)
        n_mismatch = self.profile.n_mismatch(tolerance)
        return replace(
            self,
            tolerance=tolerance,
            n_mismatch=n_mismatch,
            status=Status.PASS if passed else Status.FAIL,
            message="" if passed else failure_message(n_mismatch, self.n_elements, self.stats),
        )


@dataclass(frozen=True)
class RunError:
    kind: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class ValidationRun:
    """Everything one validation produced. Raw outputs are kept for inspection views."""

    model: str
    onnx: str
    signature: OnnxSignature | None
    tolerances: Tolerances
    environment: Mapping[str, str]
    input_sets: tuple[InputSet, ...]
    comparisons: tuple[OutputComparison, ...]
    ref_outputs: tuple[OutputSet, ...] = ()
    onnx_outputs: tuple[OutputSet, ...] = ()
    errors: tuple[RunError, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    layers: LayersResult | None = None  # intermediate values compared (--layers), core.layers

    @property
    def verdict(self) -> str:
        if self.errors:
            return "error"
        if all(c.status.passed for c in self.comparisons) and self.comparisons:
            return "pass"
        return "fail"

    @property
    def is_generation(self) -> bool:
        """Its input sets are an LLM's generate() steps (core.hf), not generated inputs."""
        return self.extra.get("kind") == "hf_generate"

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
        return replace(
            self,
            tolerances=tolerances,
            comparisons=tuple(c.rejudge(tolerances.for_output(c.name)) for c in self.comparisons),
        )
