"""Free-running generation in words: one module for the terminal, the HTML report and the
dashboard's Generation page (its JSON is parity.reports.codec's).

Token texts are the user's (a model can write anything): callers show them as text, and
here they are quoted with repr() wherever they sit inside a sentence.
"""

from __future__ import annotations

from parity.results import (
    GenerationInfo,
    PaddedBatch,
    PaddedPrompt,
    PromptGeneration,
    TokenDivergence,
    ValidationRun,
)
from parity.results.padded import RUNTIMES
from parity.text import count_text, number_text


def token_text(piece: str, token: int) -> str:
    """``'world' #15``: a token's text (quoted, so spaces and empty texts show) and id."""
    return f"{piece!r} #{token}"


def tie_words(d: TokenDivergence) -> str:
    """Whether the parting token is a near tie, in words, with the figures behind it."""
    figures = (
        f"max abs error {number_text(d.logits_error)}; "
        f"torch's top two {number_text(d.torch_margin)} apart"
    )
    if d.near_tie:
        return (
            "a near tie, not a bug: the logits there pass the tolerance and their error can "
            f"flip torch's top two ({figures})"
        )
    if not d.logits_passed:
        return f"not a near tie: the logits there fail the tolerance ({figures})"
    return f"not a near tie: the logits there pass the tolerance, too close to flip ({figures})"


def parting_words(p: PromptGeneration) -> str:
    """'same N tokens' or where the texts part, which tokens, and the match ratio."""
    n = len(p.torch_tokens)
    d = p.first_divergence
    if d is None:
        return f"same {n} token{'' if n == 1 else 's'}"
    return (
        f"parts at new token {d.position + 1} of {n}: torch "
        f"{token_text(d.torch_piece, d.torch_token)}, ONNX "
        f"{token_text(d.onnx_piece, d.onnx_token)} ({p.match_ratio:.0%} of positions match)"
    )


def padded_why(b: PaddedBatch) -> str:
    """Why the batch ran, and how (padded on the side the file's runtime pads it)."""
    return (
        "the file has no position_ids, so the steps ran each prompt alone; here the prompts ran "
        f"as one batch, as {RUNTIMES[b.side]} makes it, the file on its own cache fed torch's "
        "tokens"
    )


def padded_prompt_words(p: PaddedPrompt) -> str:
    """One prompt of the padded batch: its padding, its logits' error there (and how far
    from what the file gives it alone, where beyond the tolerance), and alone."""
    moved = "" if p.batch_passed else f", {number_text(p.shift)} from the file's own alone"
    return (
        f"{count_text(p.padding, 'padding token')}: logits max {number_text(p.batch_error)} "
        f"off torch in the batch{moved}; {number_text(p.alone_error)} alone"
    )


def padded_lines(g: GenerationInfo) -> list[str]:
    """The prompts as one padded batch (parity.hf.padded_batch): a header, one line per
    prompt, then the sentence unless it is a finding (said with the findings, not twice)."""
    b = g.padded_batch
    if b is None:
        return []
    if not b.prompts:  # not run: why
        return [b.text]
    lines = [f"{b.title}: {padded_why(b)} ({count_text(b.steps, 'step')}):"]
    lines += [
        f"  prompt {i} {p.prompt!r}: {padded_prompt_words(p)}" for i, p in enumerate(b.prompts, 1)
    ]
    return lines + ([f"  {b.text}"] if b.kind is None else [])


def generation_lines(g: GenerationInfo) -> list[str]:
    """The terminal's section: per prompt, both texts, where they part, near tie or not;
    then the padded batch, where one was run."""
    return _free_lines(g) + padded_lines(g)


def _free_lines(g: GenerationInfo) -> list[str]:
    if not g.prompts:
        return [g.free_run_note] if g.free_run_note else []
    n = len(g.prompts[0].torch_tokens)
    lines = [
        f"Free-running generation (ONNX Runtime greedy on its own, {n} new token(s) per "
        "prompt, beside torch's generate()):"
    ]
    for i, p in enumerate(g.prompts, 1):
        lines.append(f"  prompt {i} {p.prompt!r}: {parting_words(p)}")
        lines.append(f"    torch: {p.torch_text!r}")
        lines.append(f"    ONNX:  {p.onnx_text!r}")
        if p.first_divergence is not None:
            lines.append(f"    {tie_words(p.first_divergence)}")
    return lines


def summary_line(run: ValidationRun) -> str:
    """'' unless a prompt's tokens part without a near tie: then one line naming where
    (the verdict stays the tolerances')."""
    if run.generation is None:
        return ""
    bugs = [
        (i, d)
        for i, p in enumerate(run.generation.prompts, 1)
        if (d := p.first_divergence) is not None and not d.near_tie
    ]
    if not bugs:
        return ""
    where = ", ".join(f"prompt {i} at new token {d.position + 1}" for i, d in bugs)
    return f"Generation: ONNX Runtime's tokens part from torch's, not a near tie: {where}"
