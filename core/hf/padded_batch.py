"""A decoder file with no `position_ids`, on the prompts as one left-padded batch.

Such a file places each row's tokens by its own rule (Optimum's Gemma export numbers
positions from the past length; ONNX Runtime GenAI's GroupQueryAttention reads the mask as
right padding), not by the attention mask as generate() does, so its steps cannot be fed
torch's cache of a left-padded batch: the step comparison runs each prompt alone
(parity.hf.source). Whether the file serves the batch generate() makes is asked here:
torch's greedy generate() on the left-padded batch; the file on its own cache from that
batch's first call, fed torch's tokens (parity.hf.generation's own_cache_steps); beside it,
the file on each prompt alone, fed the same tokens. Padding must change nothing: a prompt
whose logits in the batch differ from its own alone beyond the logits tolerance is one the
file gets wrong (the file against itself, so a quantized file's own error does not count);
its error against torch is what the sentence says.

Measured (tiny random-weight models, ORT 1.32): Optimum's Gemma export serves the batch
(rotary positions shifted by one constant per row leave attention as it was: 6e-8 off
torch), though its present keys are rotated at other positions than torch's (a cache torch
made does not fit it); a GenAI fp32 Llama gets the padded prompt wrong at prefill (0.45 off)
while the unpadded one matches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.hf.capture import Capture, capture_generate
from parity.hf.feeds import LOGITS, full_attention_mask
from parity.hf.generation import own_cache_steps
from parity.hf.loading import LoadedHfModel
from parity.limits.deadline import Deadline
from parity.results import FindingKind, OutputComparison, PaddedBatch, PaddedPrompt
from parity.text import count_text, number_text
from parity.tolerances import Tolerance

__all__ = ["BatchRow", "BatchRun", "alone_results", "judge_batch", "run_batch"]


# how a file with no position_ids places a row's tokens: what the finding says it does
RULES = {
    "gqa": "its GroupQueryAttention reads the attention mask as right padding",
    "past": "it numbers positions from the past length, not from the attention mask as "
    "generate() does",
}


@dataclass(frozen=True)
class BatchRow:
    """One prompt in the batch, before the step comparison's verdict on it alone is added."""

    prompt: str
    padding: int
    error: float  # max |onnx - torch| of its logits in the batch, over the steps
    shift: float  # max |batch - alone| of the file's own logits, fed the same tokens
    same: bool  # the batch's logits within the logits tolerance of its own alone, each step


@dataclass(frozen=True)
class BatchRun:
    """The batch run: each prompt's row, and the file's rule (a key of RULES)."""

    rows: tuple[BatchRow, ...]
    rule: str


def file_rule(op_types: frozenset[str]) -> str:
    """ONNX Runtime's GroupQueryAttention wants a right-padded mask; any other file with no
    position_ids numbers positions from the past length (transformers' rule without them)."""
    return "gqa" if "GroupQueryAttention" in op_types else "past"


def run_batch(
    loaded: LoadedHfModel,
    alone: Sequence[Capture],
    candidate: Any,
    tolerance: Tolerance,
    *,
    deadline: Deadline | None = None,
) -> BatchRun:
    """torch's generate() on the prompts of `alone` (each prompt's own capture) as one
    left-padded batch, no cache kept; the file (a parity.run.candidates.Candidate) on its own
    cache on the batch and on each prompt alone, fed torch's batch tokens, step by step (one
    step's logits held at a time); each prompt's errors and verdict (module)."""
    prompts = [p for part in alone for p in part.prompts]
    n_new = len(alone[0].calls)
    batch = capture_generate(loaded, prompts=prompts, max_new_tokens=n_new, keep_cache=False)
    assert batch.new_tokens is not None
    tokens = batch.new_tokens.astype(np.int64)
    padding = (full_attention_mask(batch.calls[0]) == 0).sum(axis=1)

    def steps(capture: Capture, rows: slice) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return own_cache_steps(
            capture,
            candidate.session,
            candidate.signature,
            lambda step, _: tokens[rows, step],
            deadline=deadline,
        )

    n = len(prompts)
    error, shift, same = np.zeros(n), np.zeros(n), np.ones(n, dtype=bool)
    runs = [steps(batch, slice(None))] + [steps(c, slice(k, k + 1)) for k, c in enumerate(alone)]
    for step, ((in_batch, _), *each) in enumerate(zip(*runs, strict=True)):
        torch_logits = batch.calls[step].logits
        assert torch_logits is not None  # a decoder's calls keep their logits
        error = np.maximum(error, _max_abs(in_batch, torch_logits[:, -1, :]))
        for k, (by_itself, _) in enumerate(each):
            shift[k] = max(shift[k], float(_max_abs(in_batch[k : k + 1], by_itself)[0]))
            same[k] &= _within(by_itself, in_batch[k : k + 1], step, tolerance)
    rows = tuple(
        BatchRow(str(p), int(padding[k]), float(error[k]), float(shift[k]), bool(same[k]))
        for k, p in enumerate(prompts)
    )
    return BatchRun(rows, file_rule(candidate.model.op_types))


def _max_abs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, max |a - b| in float64 (inf where either is not finite)."""
    diff = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return np.where(np.isfinite(diff), diff, np.inf).max(axis=-1)


def _within(ref: np.ndarray, got: np.ndarray, step: int, tolerance: Tolerance) -> bool:
    from parity.judge.compare import compare_outputs

    judged = compare_outputs(ref, got, name=LOGITS, input_set=step, tolerance=tolerance)
    return judged.status.passed


def alone_results(
    comparisons: Sequence[OutputComparison], calls_per_prompt: Sequence[int]
) -> list[tuple[float | None, bool]]:
    """Each prompt alone, as the step comparison judged its logits: (max abs, all passed);
    its calls are numbered on after the previous prompt's (parity.hf.source.merged_capture)."""
    results, start = [], 0
    for n in calls_per_prompt:
        rows = [
            c
            for c in comparisons
            if c.name == LOGITS and c.candidate == 0 and start <= c.input_set < start + n
        ]
        errors = [
            c.stats.max_abs for c in rows if c.stats is not None and c.stats.max_abs is not None
        ]
        results.append((max(errors) if errors else None, all(c.status.passed for c in rows)))
        start += n
    return results


def judge_batch(
    batch: BatchRun, steps: int, alone: Sequence[tuple[float | None, bool]]
) -> PaddedBatch:
    """The batch judged beside each prompt alone: the finding it makes, in words (module)."""
    prompts = tuple(
        PaddedPrompt(r.prompt, r.padding, r.error, r.same, error, ok, r.shift)
        for r, (error, ok) in zip(batch.rows, alone, strict=True)
    )
    run = f"Run as one left-padded batch ({len(prompts)} prompts, {steps} steps)"
    wrong = [(k, p) for k, p in enumerate(prompts, 1) if not p.batch_passed]
    if not wrong:
        most = max((p.batch_error for p in prompts), default=0.0)
        text = (
            f"{run} on its own cache, the file gives each prompt what it gives it alone "
            f"(logits max {number_text(most)} off torch), though it has no position_ids."
        )
        return PaddedBatch(prompts, steps, text)
    off = "; ".join(
        f"prompt {k} {p.prompt!r} ({count_text(p.padding, 'padding token')}) is off by "
        f"{number_text(p.batch_error)} in its logits"
        for k, p in wrong
    )
    errors = [p.alone_error for p in prompts if p.alone_error is not None]
    most_alone = number_text(max(errors)) if errors else "-"
    alone_words = (
        f"each prompt alone matches torch (max {most_alone})"
        if all(p.alone_passed for p in prompts)
        else f"each prompt alone is at most {most_alone} off torch, as its steps say"
    )
    if all(p.padding > 0 for _, p in wrong):
        text = (
            "This file cannot serve left-padded batches: it has no position_ids input and "
            f"{RULES[batch.rule]}. {run}, {off}; {alone_words}."
        )
        return PaddedBatch(prompts, steps, text, FindingKind.LIMITATION)
    text = (
        f"{run}, the file's logits for a prompt with no padding differ from what it gives "
        f"that prompt alone: {off}; {alone_words}."
    )
    return PaddedBatch(prompts, steps, text, FindingKind.BUG)
