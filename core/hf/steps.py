"""Judge one captured call: every ONNX output against torch, padding counted apart.

Positions that the attention mask excludes (left padding of a decoder batch, right padding
of an encoder batch) are never attended, and exports legitimately differ there (0.4 has been
seen). So, before `compare_outputs`, the ONNX values at those positions are replaced by
torch's: the verdict and statistics cover attended positions only. How many elements were
excluded and the largest |onnx - ref| among them are kept in a `MaskedInfo` and appended to
the comparison's message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.hf.capture import CapturedCall
from core.hf.feeds import LOGITS, align_logits, masked_positions, reference_outputs
from core.results import OutputComparison
from core.tolerances import Tolerance, Tolerances

Compare = Callable[..., OutputComparison]  # core.compare.compare_outputs


@dataclass(frozen=True)
class MaskedInfo:
    """What was excluded from one comparison: padding elements and the largest diff there."""

    input_set: int
    output: str
    n_masked: int
    max_abs: float | None  # None when every excluded difference is NaN/Inf

    def to_json(self) -> dict[str, Any]:
        return {
            "input_set": self.input_set,
            "output": self.output,
            "n_masked": self.n_masked,
            "max_abs": self.max_abs,
        }


@dataclass(frozen=True)
class StepResult:
    """One call judged: torch's and ONNX's arrays as compared, comparisons, exclusions."""

    ref: Mapping[str, np.ndarray]
    onnx: Mapping[str, np.ndarray]  # logits cut to the positions torch computed
    comparisons: tuple[OutputComparison, ...]
    masked: tuple[MaskedInfo, ...]


def compare_call(
    call: CapturedCall,
    raw: Mapping[str, np.ndarray],
    *,
    output_names: Sequence[str],
    tolerances: Tolerances,
    compare: Compare,
) -> StepResult:
    """Compare every ONNX output of one call (ONNX order), then torch-only outputs."""
    ref = reference_outputs(call, tuple(output_names))
    shown: dict[str, np.ndarray] = {}
    comparisons: list[OutputComparison] = []
    masked: list[MaskedInfo] = []
    for name in list(raw) + [n for n in ref if n not in raw]:
        ref_array, onnx_array, note = ref.get(name), raw.get(name), ""
        if name == LOGITS and ref_array is not None and onnx_array is not None:
            onnx_array, note = align_logits(ref_array, onnx_array)
        if onnx_array is not None:
            shown[name] = onnx_array
        comparison, info = compare_step_output(
            ref_array,
            onnx_array,
            call=call,
            name=name,
            input_set=call.index,
            tolerance=tolerances.for_output(name),
            compare=compare,
            note=note,
        )
        comparisons.append(comparison)
        if info is not None:
            masked.append(info)
    return StepResult(ref=ref, onnx=shown, comparisons=tuple(comparisons), masked=tuple(masked))


def compare_step_output(
    ref: np.ndarray | None,
    onnx: np.ndarray | None,
    *,
    call: CapturedCall,
    name: str,
    input_set: int,
    tolerance: Tolerance,
    compare: Compare,
    note: str = "",
) -> tuple[OutputComparison, MaskedInfo | None]:
    """compare_outputs on the attended positions; padding positions are reported apart."""
    info: MaskedInfo | None = None
    judged = onnx
    if ref is not None and onnx is not None and ref.shape == onnx.shape:
        where = masked_positions(call, name, tuple(ref.shape))
        if where is not None:
            where = np.broadcast_to(where, ref.shape)
            n_masked = int(where.sum())
            if n_masked:
                diff = np.abs(ref[where].astype(np.float64) - onnx[where].astype(np.float64))
                finite = diff[np.isfinite(diff)]
                max_abs = float(finite.max()) if finite.size else None
                info = MaskedInfo(input_set, name, n_masked, max_abs)
                judged = onnx.copy()
                judged[where] = ref[where].astype(onnx.dtype, copy=False)
    comparison = compare(ref, judged, name=name, input_set=input_set, tolerance=tolerance)
    notes = [text for text in (comparison.message, note, _masked_text(info)) if text]
    if len(notes) > (1 if comparison.message else 0):
        comparison = replace(comparison, message="; ".join(notes))
    return comparison, info


def step_ok(index: int, comparisons: Sequence[OutputComparison]) -> bool:
    mine = [c for c in comparisons if c.input_set == index]
    return bool(mine) and all(c.status.passed for c in mine)


def step_json(call: CapturedCall, comparisons: Sequence[OutputComparison]) -> dict[str, Any]:
    """One row of `extra["steps"]`: which step, which phase, its sizes, and whether it passed."""
    return {
        "index": call.index,
        "step": call.step,
        "phase": call.phase,
        "label": call.label,
        "batch": int(call.input_ids.shape[0]),
        "sequence_length": int(call.input_ids.shape[1]),
        "past_length": call.past_length,
        "ok": step_ok(call.index, comparisons),
    }


def _masked_text(info: MaskedInfo | None) -> str:
    if info is None:
        return ""
    where = "nan/inf" if info.max_abs is None else f"{info.max_abs:.3g}"
    return f"{info.n_masked} padding element(s) excluded (never attended), max abs diff {where}"
