"""The run summary in the seed's spirit (`ValidationRun.extra["summary"]`, plain JSON).

model, config overrides, random or trained weights, prompts, captured calls, export OK/FAILED
and its time, steps OK/total (and which failed), padding excluded, time per phase.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.hf.capture import Capture
from core.hf.loading import LoadedHfModel
from core.hf.options import HfOptions
from core.hf.steps import MaskedInfo, step_ok
from core.results import OutputComparison

MASKED_NOTE = (
    "positions the attention mask excludes (padding) are never attended; exports may "
    "differ there, so they are counted apart and not judged"
)
PHASES = ("load", "capture", "export", "onnxruntime", "compare", "total")
_TIMING_KEYS = {"load": "load_model"}


def build_summary(
    model: str,
    loaded: LoadedHfModel,
    options: HfOptions,
    capture: Capture,
    export_info: Mapping[str, Any],
    comparisons: Sequence[OutputComparison],
    timings: Mapping[str, float],
    masked: Sequence[MaskedInfo] = (),
) -> dict[str, Any]:
    calls = capture.calls
    judged = bool(comparisons)
    ok = [call.label for call in calls if step_ok(call.index, comparisons)]
    padding = padding_side(calls[0].inputs.get("attention_mask"))
    return {
        "model": model,
        "kind": "encoder" if loaded.encoder else "causal_lm",
        "model_type": loaded.model_type,
        "architecture": type(loaded.model).__name__,
        "config_overrides": dict(loaded.config_overrides),
        "weights": "random" if loaded.random_weights else "trained",
        "prompts": list(capture.prompts),
        "padding": padding,
        "left_padded": padding == "left",
        "generated": list(capture.generated),
        "max_new_tokens": None if loaded.encoder else options.max_new_tokens,
        "n_calls": len(calls),
        "n_prefill": sum(c.phase == "prefill" for c in calls),
        "n_decode": sum(c.phase == "decode" for c in calls),
        "n_forward": sum(c.phase == "forward" for c in calls),
        "export": dict(export_info),
        "steps_ok": len(ok) if judged else 0,
        "steps_total": len(calls),
        "failed_steps": [c.label for c in calls if c.label not in ok] if judged else [],
        "masked": masked_summary(masked),
        "timings": {phase: timings.get(_TIMING_KEYS.get(phase, phase)) for phase in PHASES},
        "transformers": transformers_version(),
    }


def padding_side(mask: np.ndarray | None) -> str:
    """ "left", "right" or "none": where the batch's padding sits."""
    if mask is None or not (mask == 0).any():
        return "none"
    return "left" if (mask[:, 0] == 0).any() else "right"


def masked_summary(masked: Sequence[MaskedInfo]) -> dict[str, Any]:
    diffs = [m.max_abs for m in masked if m.max_abs is not None]
    return {
        "n_elements": sum(m.n_masked for m in masked),
        "max_abs": max(diffs) if diffs else None,
        "note": MASKED_NOTE,
    }


def transformers_version() -> str:
    module = sys.modules.get("transformers")
    return str(getattr(module, "__version__", "not loaded"))
