"""The prompts as one left-padded batch (parity.hf.padded_batch measures them), and the one
decision on them: made when the run is made, and again from the kept figures alone wherever
the run is re-judged (ValidationRun.rejudge: `parity report --tol`, the API, the dashboard's
tolerances), so the batch's verdict and its finding follow the tolerances like every row's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from parity.judge.pass_rule import exceeds
from parity.results.comparison import OutputComparison
from parity.results.evidence import FindingKind
from parity.text import count_text, number_text, tolerance_text
from parity.tolerances import Tolerance

__all__ = ["RULES", "SIDES", "PaddedBatch", "PaddedPrompt", "alone_results", "judge_padded"]

LOGITS = "logits"

# how a file with no position_ids places a row's tokens: what the finding says it does
RULES = {
    "gqa": "its GroupQueryAttention reads the attention mask as right padding",
    "past": "it numbers positions from the past length, not from the attention mask as "
    "generate() does",
}
# which side its batch is padded on, as the runtime it is made for pads one: transformers'
# generate() pads on the left; ONNX Runtime GenAI, which runs GroupQueryAttention files, pads
# on the right (its PadInputs), and its GroupQueryAttention takes padding there only
SIDES = {"gqa": "right", "past": "left"}
RUNTIMES = {"right": "ONNX Runtime GenAI", "left": "generate()"}


@dataclass(frozen=True)
class PaddedPrompt:
    """One prompt of the left-padded batch: its padding tokens; the max |onnx - torch| of its
    logits in the batch over every step, the file on its own cache (`batch_error`); whether
    they stay within the logits tolerance of what the file gives the prompt alone, fed the
    same tokens (`batch_passed`; `shift`: their max difference); the prompt alone as the step
    comparison judged it (`alone_error`: None when not compared).

    `hull_ref` / `hull_diff`: the vertices of the upper-left convex hull of the points
    (|alone|, |batch - alone|) over its logits at every step (parity.judge.hull), which is
    all the pass rule needs to decide `batch_passed` at any (atol, rtol); `one_sided`: a NaN
    or Inf in one of the two only, never the same. None: a run saved before they were kept,
    judged at its own tolerances only."""

    prompt: str
    padding: int
    batch_error: float
    batch_passed: bool
    alone_error: float | None = None
    alone_passed: bool = True
    shift: float = 0.0
    hull_ref: tuple[float, ...] | None = None
    hull_diff: tuple[float, ...] | None = None
    one_sided: bool = False

    @property
    def can_rejudge(self) -> bool:
        return self.hull_ref is not None and self.hull_diff is not None

    def same_at(self, tolerance: Tolerance) -> bool:
        """The batch's logits within `tolerance` of the prompt's alone, at every step (the
        pass rule, parity.judge.pass_rule, on the hull's vertices: the largest
        |d| - rtol·|ref| of all the points is at one of them); the kept verdict without them."""
        if self.hull_ref is None or self.hull_diff is None:
            return self.batch_passed
        if self.one_sided:
            return False
        d = np.asarray(self.hull_diff, dtype=np.float64)
        r = np.asarray(self.hull_ref, dtype=np.float64)
        return not bool(np.any(exceeds(d, r, tolerance.atol, tolerance.rtol)))


@dataclass(frozen=True)
class PaddedBatch:
    """A decoder file with no position_ids, whose steps are compared one prompt at a time,
    run on the prompts as the one left-padded batch generate() makes: each prompt's logits
    over `steps` steps. `kind`: the finding it makes (limitation: only padded prompts differ;
    bug: a prompt with no padding differs too; None: every prompt is the same in the batch
    as alone); `text`: the sentence every front shows; `rule`: how the file places a row's
    tokens (a key of RULES; "" when the batch was not run, or saved before it was kept).
    Judged at the run's tolerance for `output`; `rejudge` judges it at another one."""

    prompts: tuple[PaddedPrompt, ...]
    steps: int
    text: str
    kind: FindingKind | None = None
    output: str = LOGITS
    rule: str = ""

    @property
    def fails(self) -> bool:
        """The batch fails the run: a finding says why (the step rows all pass)."""
        return self.kind is not None

    @property
    def side(self) -> str:
        """Where the batch's padding is: "right" for a GroupQueryAttention file (as ONNX
        Runtime GenAI pads a batch), else "left" (as generate() does)."""
        return SIDES.get(self.rule, "left")

    @property
    def title(self) -> str:
        """Its heading on every front: "Left-padded batch" or "Right-padded batch"."""
        return f"{self.side.capitalize()}-padded batch"

    @property
    def can_rejudge(self) -> bool:
        """It ran and kept the figures that judge it again (not a run saved before them)."""
        kept = all(p.can_rejudge for p in self.prompts)
        return bool(self.prompts) and self.rule in RULES and kept

    def rejudge(self, tolerance: Tolerance, rows: Sequence[OutputComparison]) -> PaddedBatch:
        """Judged again at `tolerance` (the run's for `output`) beside `rows`, the run's rows
        re-judged at it (each prompt alone); as it was where it cannot be."""
        if not self.can_rejudge:
            return self
        return judge_padded(self.prompts, self.steps, self.rule, tolerance, rows)


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


def judge_padded(
    prompts: Sequence[PaddedPrompt],
    steps: int,
    rule: str,
    tolerance: Tolerance,
    rows: Sequence[OutputComparison],
) -> PaddedBatch:
    """The batch judged at `tolerance` beside each prompt alone (its `steps` calls in `rows`,
    one prompt's after another): each prompt's `batch_passed` from its hull, its `alone_*`
    from the rows; the finding it makes, in words. The one decision, at run and re-judge."""
    alone = alone_results(rows, [steps] * len(prompts))
    judged = tuple(
        replace(p, batch_passed=p.same_at(tolerance), alone_error=error, alone_passed=ok)
        for p, (error, ok) in zip(prompts, alone, strict=True)
    )
    side = SIDES[rule]
    run = (
        f"Run as one {side}-padded batch, as {RUNTIMES[side]} pads one ({len(judged)} prompts, "
        f"{steps} steps)"
    )
    wrong = [(k, p) for k, p in enumerate(judged, 1) if not p.batch_passed]
    if not wrong:
        most = max((p.batch_error for p in judged), default=0.0)
        apart = max((p.shift for p in judged), default=0.0)
        text = (
            f"{run} on its own cache, the file gives each prompt what it gives it alone, "
            f"within the logits tolerance ({tolerance_text(tolerance)}: at most "
            f"{number_text(apart)} apart; logits max "
            f"{number_text(most)} off torch), though it has no position_ids."
        )
        if side == "right":  # what it cannot do, said without failing the run
            left = "It cannot serve a batch padded on the left, as generate() pads one"
            text += f" {left}: {RULES[rule]}."
        return PaddedBatch(judged, steps, text, rule=rule)
    off = "; ".join(
        f"prompt {k} {p.prompt!r} ({count_text(p.padding, 'padding token')}) is off by "
        f"{number_text(p.batch_error)} in its logits"
        for k, p in wrong
    )
    errors = [p.alone_error for p in judged if p.alone_error is not None]
    most_alone = number_text(max(errors)) if errors else "-"
    alone_words = (
        f"each prompt alone matches torch (max {most_alone})"
        if all(p.alone_passed for p in judged)
        else f"each prompt alone is at most {most_alone} off torch, as its steps say"
    )
    if all(p.padding > 0 for _, p in wrong):
        why = (  # a GroupQueryAttention file that fails the padding it is made for
            f"it has no position_ids input and {RULES[rule]}"
            if side == "left"
            else f"it has no position_ids input and, though {RULES[rule]}, gets a padded row wrong"
        )
        text = f"This file cannot serve {side}-padded batches: {why}. {run}, {off}; {alone_words}."
        return PaddedBatch(judged, steps, text, FindingKind.LIMITATION, rule=rule)
    text = (
        f"{run}, the file's logits for a prompt with no padding differ from what it gives "
        f"that prompt alone: {off}; {alone_words}."
    )
    return PaddedBatch(judged, steps, text, FindingKind.BUG, rule=rule)
