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
its error against torch is what the sentence says. This module measures; the decision
(parity.results.padded) is made from the figures it keeps, at the run's tolerance and again
at any other (`parity report --tol`).

Measured (tiny random-weight models, ORT 1.32): Optimum's Gemma export serves the batch
(rotary positions shifted by one constant per row leave attention as it was: 6e-8 off
torch), though its present keys are rotated at other positions than torch's (a cache torch
made does not fit it); a GenAI fp32 Llama gets the padded prompt wrong at prefill (0.45 off)
while the unpadded one matches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.hf.capture import Capture, capture_generate
from parity.hf.feeds import full_attention_mask
from parity.hf.generation import own_cache_steps
from parity.hf.loading import LoadedHfModel
from parity.judge.hull import upper_left_hull
from parity.judge.pass_rule import one_sided
from parity.limits.deadline import Deadline
from parity.results import PaddedPrompt
from parity.results.padded import SIDES

__all__ = ["BatchRun", "file_rule", "run_batch"]


@dataclass(frozen=True)
class BatchRun:
    """The batch run: each prompt's figures (not yet judged: parity.results.padded's
    judge_padded decides `batch_passed` and the alone fields), and the file's rule (a key of
    parity.results.padded.RULES)."""

    prompts: tuple[PaddedPrompt, ...]
    rule: str


def file_rule(op_types: frozenset[str]) -> str:
    """ONNX Runtime's GroupQueryAttention wants a right-padded mask; any other file with no
    position_ids numbers positions from the past length (transformers' rule without them)."""
    return "gqa" if "GroupQueryAttention" in op_types else "past"


def run_batch(
    loaded: LoadedHfModel,
    alone: Sequence[Capture],
    candidate: Any,
    *,
    deadline: Deadline | None = None,
) -> BatchRun:
    """torch's generate() on the prompts of `alone` (each prompt's own capture) as one
    left-padded batch, no cache kept; the file (a parity.run.candidates.Candidate) on its own
    cache on the batch and on each prompt alone, fed torch's batch tokens, step by step (one
    step's logits held at a time); each prompt's figures (module)."""
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

    rule = file_rule(candidate.model.op_types)
    fed = batch if SIDES[rule] == "left" else right_padded(batch)
    n = len(prompts)
    error, shift = np.zeros(n), np.zeros(n)
    hulls = [_Hull() for _ in range(n)]
    runs = [steps(fed, slice(None))] + [steps(c, slice(k, k + 1)) for k, c in enumerate(alone)]
    for step, ((in_batch, _), *each) in enumerate(zip(*runs, strict=True)):
        torch_logits = batch.calls[step].logits
        assert torch_logits is not None  # a decoder's calls keep their logits
        error = np.maximum(error, _max_abs(in_batch, torch_logits[:, -1, :]))
        for k, (by_itself, _) in enumerate(each):
            shift[k] = max(shift[k], float(_max_abs(in_batch[k : k + 1], by_itself)[0]))
            hulls[k].add(by_itself, in_batch[k : k + 1])
    rows = tuple(
        PaddedPrompt(
            str(p),
            int(padding[k]),
            float(error[k]),
            batch_passed=False,  # judged by parity.results.padded.judge_padded
            shift=float(shift[k]),
            hull_ref=tuple(float(x) for x in hulls[k].r),
            hull_diff=tuple(float(x) for x in hulls[k].d),
            one_sided=hulls[k].one_sided,
        )
        for k, p in enumerate(prompts)
    )
    return BatchRun(rows, rule)


def right_padded(batch: Capture) -> Capture:
    """The batch with its first call padded on the right: each row's tokens first, in order,
    then its padding (ids and mask moved alike), as ONNX Runtime GenAI pads a batch (its
    PadInputs); what the file is fed after grows the mask by one per step, as for the left."""
    first = batch.calls[0]
    mask = full_attention_mask(first)
    order = np.argsort(mask == 0, axis=1, kind="stable")  # attended positions first, in order
    rows = np.arange(mask.shape[0])[:, None]
    inputs = {"input_ids": first.input_ids[rows, order], "attention_mask": mask[rows, order]}
    return dataclasses.replace(batch, calls=(dataclasses.replace(first, inputs=inputs),))


class _Hull:
    """The points (|alone|, |batch - alone|) of one prompt's logits over the steps, kept as
    their upper-left hull (the pass rule's answer at any tolerance lies on its vertices), and
    whether a NaN or Inf stood in one of the two only (parity.judge.pass_rule.one_sided)."""

    def __init__(self) -> None:
        self.r = np.zeros(0)
        self.d = np.zeros(0)
        self.one_sided = False

    def add(self, alone: np.ndarray, in_batch: np.ndarray) -> None:
        ref = np.asarray(alone, dtype=np.float64).ravel()
        got = np.asarray(in_batch, dtype=np.float64).ravel()
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.abs(got - ref)
        finite = np.isfinite(d)  # both sides finite
        if not finite.all():
            nan_mm, inf_mm = one_sided(ref[~finite], got[~finite])
            self.one_sided |= bool((nan_mm | inf_mm).any())
        r = np.concatenate([self.r, np.abs(ref[finite])])
        self.r, self.d = upper_left_hull(r, np.concatenate([self.d, d[finite]]))


def _max_abs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, max |a - b| in float64 (inf where either is not finite)."""
    diff = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return np.where(np.isfinite(diff), diff, np.inf).max(axis=-1)
