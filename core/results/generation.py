"""What an hf: run adds: its captured steps and, for a causal LM, each prompt generated
freely by ONNX Runtime beside torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from parity.results.comparison import OutputComparison
from parity.results.padded import PaddedBatch
from parity.tolerances import Tolerances


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

    def rejudge(self, tolerances: Tolerances, rows: Sequence[OutputComparison]) -> GenerationInfo:
        """The left-padded batch judged again at `tolerances`, beside the run's `rows` judged
        at them (parity.results.padded); the rest as it was."""
        b = self.padded_batch
        if b is None:
            return self
        return replace(self, padded_batch=b.rejudge(tolerances.for_output(b.output), rows))
