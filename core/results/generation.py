"""What an hf: run adds: its captured steps and, for a causal LM, each prompt generated
freely by ONNX Runtime beside torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from parity.results.evidence import FindingKind


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
class TokenDivergence:
    """Where ONNX Runtime's free-running tokens first part from torch's (parity.hf.generation).

    `position` counts new tokens from 0. `torch_margin` is torch's top-1 minus top-2 logit
    there; `logits_error` the max |onnx - torch| of that position's logits, both given the
    same prefix (every earlier token agreed). `near_tie`: the logits pass the run's tolerance
    (`logits_passed`) and the margin is within what their error can flip, so rounding chose
    the token, not a bug. Judged at the tolerances of the run that made it.
    """

    position: int
    torch_token: int
    onnx_token: int
    torch_margin: float
    logits_error: float
    near_tie: bool
    logits_passed: bool
    torch_piece: str = ""  # each token's text, decoded alone
    onnx_piece: str = ""


@dataclass(frozen=True)
class PromptGeneration:
    """One prompt generated freely by ONNX Runtime beside torch's greedy generate(): new
    tokens only, their texts, each token decoded alone (`*_pieces`), where they part."""

    prompt: str
    torch_tokens: tuple[int, ...]
    onnx_tokens: tuple[int, ...]
    torch_text: str
    onnx_text: str
    first_divergence: TokenDivergence | None = None
    torch_pieces: tuple[str, ...] = ()
    onnx_pieces: tuple[str, ...] = ()

    @property
    def match_ratio(self) -> float:
        """The fraction of new-token positions where both chose the same token."""
        n = max(len(self.torch_tokens), len(self.onnx_tokens))
        if n == 0:
            return 1.0
        same = sum(a == b for a, b in zip(self.torch_tokens, self.onnx_tokens, strict=False))
        return same / n


@dataclass(frozen=True)
class PaddedPrompt:
    """One prompt of the left-padded batch (parity.hf.padded_batch): its padding tokens; the
    max |onnx - torch| of its logits in the batch over every step, the file on its own cache
    (`batch_error`); whether they stay within the logits tolerance of what the file gives the
    prompt alone, fed the same tokens (`batch_passed`; `shift`: their max difference); the
    prompt alone as the step comparison judged it (`alone_error`: None when not compared)."""

    prompt: str
    padding: int
    batch_error: float
    batch_passed: bool
    alone_error: float | None = None
    alone_passed: bool = True
    shift: float = 0.0


@dataclass(frozen=True)
class PaddedBatch:
    """A decoder file with no position_ids, whose steps are compared one prompt at a time,
    run on the prompts as the one left-padded batch generate() makes (parity.hf.padded_batch):
    each prompt's logits over `steps` steps. `kind`: the finding it makes (limitation: only
    padded prompts differ while each alone matches; bug: a prompt with no padding differs
    too; None: the batch matches, or a prompt alone already fails the steps); `text`: the
    sentence every front shows. Judged at the tolerances of the run that made it."""

    prompts: tuple[PaddedPrompt, ...]
    steps: int
    text: str
    kind: FindingKind | None = None
    output: str = "logits"

    @property
    def fails(self) -> bool:
        """The batch fails the run: a finding says why (the step rows all pass)."""
        return self.kind is not None


@dataclass(frozen=True)
class GenerationInfo:
    """What an hf: run adds: its summary (plain JSON, the report's "summary") and steps;
    for a causal LM, each prompt generated freely by ONNX Runtime (`prompts`; () when not
    run, `free_run_note` says why); for a decoder file with no position_ids, the prompts as
    one left-padded batch (`padded_batch`; None when not run)."""

    summary: Mapping[str, Any]
    steps: tuple[GenerationStep, ...]
    prompts: tuple[PromptGeneration, ...] = ()
    free_run_note: str = ""
    padded_batch: PaddedBatch | None = None
