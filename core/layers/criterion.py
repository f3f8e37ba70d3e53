"""When an intermediate value diverges: the rule, in one place.

A value's error is its `error_ratio` (parity.layers.stats: the largest |onnx - ref| relative
to the value's typical size plus the element's own size). Float noise is small in those
units but grows with depth and is amplified by some ops (softmax, exp, normalisation), so
a value is only said to diverge where its error is both

- above the noise threshold (`THRESHOLD` for float32 and float64, looser for 16-bit types), and
- at least `MIN_JUMP` times the largest error among the matched values feeding it:
  the error was born in this op (or in the unmatched ops just before it), not carried in.

A value above the threshold without that jump is "carried". NaN/Inf on one side only, where
no input had any, is born here too ("nonfinite"); a shape that differs is "shape_mismatch".
The first divergence is the earliest such birth in graph order, over every input set.
"""

from __future__ import annotations

from dataclasses import dataclass

from parity.layers.result import LayerStatus
from parity.layers.stats import ValueStats

THRESHOLD = 1e-4
MIN_JUMP = 10.0
_FLOOR = 1e-7  # inputs' error below this counts as this: a jump from exact zero is finite
_THRESHOLDS = {"float16": 2e-2, "bfloat16": 1e-1}

CRITERION = (
    "error_ratio = max |onnx-ref| / (scale + |ref|), scale = median non-zero |ref|; a value "
    f"diverges where error_ratio > {THRESHOLD:g} (float16 {_THRESHOLDS['float16']:g}, "
    f"bfloat16 {_THRESHOLDS['bfloat16']:g}) and error_ratio >= {MIN_JUMP:g} x the largest "
    "error_ratio of the matched values feeding it (jump); above the threshold without the "
    "jump it is carried; NaN/Inf on one side only with none in its inputs is born there; "
    "the first divergence is the earliest in ONNX graph order over all input sets"
)


@dataclass(frozen=True)
class Judgement:
    status: LayerStatus
    jump: float | None
    nonfinite: bool  # this value (or what fed it) has one-sided NaN/Inf


def threshold_for(dtype: str) -> float:
    return _THRESHOLDS.get(dtype, THRESHOLD)


def judge(
    stats: ValueStats,
    *,
    inputs_ratio: float,
    inputs_nonfinite: bool,
    dtype: str = "float32",
) -> Judgement:
    """Judge one value from its statistics and the worst of its matched inputs'."""
    if not stats.shape_ok:
        return Judgement(LayerStatus.SHAPE_MISMATCH, None, inputs_nonfinite)
    if stats.n_nonfinite_mismatch:
        status = LayerStatus.CARRIED if inputs_nonfinite else LayerStatus.NONFINITE
        return Judgement(status, None, True)
    ratio = stats.error_ratio or 0.0
    jump = ratio / max(inputs_ratio, _FLOOR)
    if ratio <= threshold_for(dtype):
        return Judgement(LayerStatus.PASS, jump, inputs_nonfinite)
    status = LayerStatus.DIVERGES if jump >= MIN_JUMP else LayerStatus.CARRIED
    return Judgement(status, jump, inputs_nonfinite)


def reappears(alone: ValueStats, in_run: float | None, dtype: str = "float32") -> bool:
    """Re-run alone on the reference's values of its inputs, a flagged node still errs: a
    shape or one-sided NaN/Inf, or an error above the noise threshold that is at least
    1/`MIN_JUMP` of its max |error| in the full run (`in_run`). Else the error was carried:
    an op that shrinks its values (GELU of negative inputs) has a tiny scale, so its own
    rounding alone can pass the threshold while being a small part of what it passes on."""
    if not alone.shape_ok or alone.n_nonfinite_mismatch:
        return True
    if (alone.error_ratio or 0.0) <= threshold_for(dtype):
        return False
    return in_run is None or (alone.max_abs or 0.0) * MIN_JUMP >= in_run
