"""One output compared: the sets of feeds and outputs it is made from, its statistics, its
rounding noise and its verdict (OutputComparison), re-judged from its profile alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np

from parity.judge.error_profile import ErrorProfile
from parity.messages import failure_message, with_notes
from parity.results.noise import Noise
from parity.tolerances import Tolerance


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    MISSING = "missing"
    ERROR = "error"  # ONNX Runtime raised on this input set: `message` holds its first line

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
    # the reference side: ONNX outputs paired with torch outputs of another name, in one
    # line (parity.run.runner.pair_outputs); the run's candidates say it
    pairing: str = ""


@dataclass(frozen=True)
class InputCase:
    """One input set of a run with what belongs to it: the reference outputs it gave (None:
    the run kept no outputs) and its outputs' exclusion masks (True: the element is not
    judged, e.g. padding an attention mask excludes), broadcastable to each output."""

    input_set: InputSet
    reference: OutputSet | None = None
    exclusions: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.input_set.index


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
    candidate: int = 0  # which candidate (ValidationRun.candidates) this row judges
    notes: tuple[str, ...] = ()  # in `message` after the verdict; kept when re-judged
    noise: Noise | None = None  # --noise-floor: against a float64 reference run

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
    def narrowed(self) -> bool:
        """Only the float width differs: ONNX gives a 16-bit float where the reference is
        float32 (a file converted to float16 with float16 outputs, keep_io_types=False).
        That is the file's own precision: its values are judged as a FAIL row's are."""
        return (
            self.status is Status.DTYPE_MISMATCH
            and self.profile is not None
            and self.ref_dtype in ("float32", "float64")
            and self.onnx_dtype in ("float16", "bfloat16")
        )

    @property
    def can_rejudge(self) -> bool:
        """A tolerance can change its verdict: judged element by element, with a profile
        (shape, dtype and missing failures, and string outputs, stay what they are)."""
        return self.profile is not None and self.status in (Status.PASS, Status.FAIL)

    @property
    def passes_only_loosened(self) -> bool:
        """It passes at its tolerance and fails at the default one (a tolerance loosened for
        it lets it through: what a bug that tolerance hides looks like)."""
        default = Tolerance()
        if self.status is not Status.PASS or not self.can_rejudge or self.tolerance == default:
            return False
        return not self.rejudge(default).status.passed

    def rejudge(self, tolerance: Tolerance) -> OutputComparison:
        """The same comparison judged at another tolerance, from the profile alone."""
        if not self.can_rejudge or self.profile is None:  # can_rejudge: a profile is kept
            return replace(self, tolerance=tolerance)
        passed = self.profile.passes(tolerance)
        n_mismatch = self.profile.n_mismatch(tolerance)
        return replace(
            self,
            tolerance=tolerance,
            n_mismatch=n_mismatch,
            status=Status.PASS if passed else Status.FAIL,
            message=with_notes(
                "" if passed else failure_message(n_mismatch, self.n_judged, self.stats),
                self.notes,
            ),
        )


def set_passed(comparisons: Sequence[OutputComparison], input_set: int) -> bool:
    """Every output of one input set (an hf: step) was judged and passes."""
    mine = [c for c in comparisons if c.input_set == input_set]
    return bool(mine) and all(c.status.passed for c in mine)
