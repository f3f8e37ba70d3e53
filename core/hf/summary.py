"""The summary of an hf: run (`GenerationInfo.summary`, the JSON report's "summary").

model, config overrides, random or trained weights, prompts, captured calls, export OK/FAILED
and its time, steps OK/total (and which failed), padding excluded, time per phase.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from parity.results import OutputComparison, ValidationRun, set_passed

if TYPE_CHECKING:
    from parity.hf.capture import Capture
    from parity.hf.loading import LoadedHfModel
    from parity.hf.seq2seq_loading import LoadedSeq2Seq
    from parity.run.hf_options import HfOptions

MASKED_NOTE = (
    "positions the attention mask excludes (padding) are never attended; exports may "
    "differ there, so they are counted apart and not judged"
)
PHASES = ("load", "capture", "export", "onnxruntime", "compare", "batch", "generation", "total")
_TIMING_KEYS = {"load": "load_model", "batch": "padded_batch"}


def build_summary(
    model: str,
    loaded: LoadedHfModel,
    options: HfOptions,
    capture: Capture,
    export_info: Mapping[str, Any],
    comparisons: Sequence[OutputComparison],
    timings: Mapping[str, float],
) -> dict[str, Any]:
    calls = capture.calls
    judged = bool(comparisons)
    ok = [call.label for call in calls if set_passed(comparisons, call.index)]
    padding = padding_side(calls[0].inputs.get("attention_mask"))
    return {
        "model": model,
        "kind": "encoder" if loaded.encoder else "causal_lm",
        "model_type": loaded.model_type,
        "architecture": type(loaded.model).__name__,
        **model_class_summary(loaded),
        "config_overrides": dict(loaded.config_overrides),
        "weights": "random" if loaded.random_weights else "trained",
        "prompts": list(capture.prompts),
        "inputs": capture.inputs,  # how a one-forward model's inputs were made
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
        "masked": masked_summary(comparisons),
        "timings": {phase: timings.get(_TIMING_KEYS.get(phase, phase)) for phase in PHASES},
        "transformers": transformers_version(),
    }


def model_class_summary(loaded: LoadedHfModel | LoadedSeq2Seq) -> dict[str, Any]:
    """The task the model was built for and what chose it (parity.hf.heads)."""
    chosen = getattr(loaded, "model_class", None)
    if chosen is None:
        return {}
    return {"task": chosen.task, "class_chosen_by": chosen.chosen_by}


def padding_side(mask: np.ndarray | None) -> str:
    """ "left", "right" or "none": where the batch's padding sits."""
    if mask is None or not (mask == 0).any():
        return "none"
    return "left" if (mask[:, 0] == 0).any() else "right"


def judged_summary(run: ValidationRun) -> dict[str, Any]:
    """The run's summary with its verdicts read from its comparisons as they are now, so a
    run re-judged at other tolerances (`parity report --tol`) says which steps pass then."""
    if run.generation is None:
        return {}
    summary = dict(run.generation.summary)
    if run.outputs:
        steps = run.generation.steps
        ok = [s.label for s in steps if set_passed(run.outputs, s.index)]
        summary["steps_ok"] = len(ok)
        summary["failed_steps"] = [s.label for s in steps if s.label not in ok]
        summary["masked"] = masked_summary(run.outputs)
    return summary


def steps_json(run: ValidationRun) -> list[dict[str, Any]]:
    """The report's "steps": one row per step, with whether it passes now."""
    if run.generation is None:
        return []
    return [
        {
            "index": s.index,
            "step": s.step,
            "phase": s.phase,
            "label": s.label,
            "batch": s.batch,
            "sequence_length": s.sequence_length,
            "past_length": s.past_length,
            "ok": set_passed(run.outputs, s.index),
        }
        for s in run.generation.steps
    ]


def masked_positions_json(run: ValidationRun) -> list[dict[str, Any]]:
    """The report's "masked_positions": one entry per comparison with excluded elements."""
    return [
        {
            "input_set": c.input_set,
            "output": c.name,
            "n_masked": c.n_excluded,
            "max_abs": c.excluded_max_abs,
        }
        for c in run.outputs
        if c.n_excluded
    ]


def masked_summary(comparisons: Sequence[OutputComparison]) -> dict[str, Any]:
    """Elements excluded (padding) over every comparison, and the largest diff there."""
    diffs = [c.excluded_max_abs for c in comparisons if c.excluded_max_abs is not None]
    return {
        "n_elements": sum(c.n_excluded for c in comparisons),
        "max_abs": max(diffs) if diffs else None,
        "note": MASKED_NOTE,
    }


def transformers_version() -> str:
    module = sys.modules.get("transformers")
    return str(getattr(module, "__version__", "not loaded"))
