"""Free-running generation in words and JSON: one module for the terminal, the JSON report,
saved runs, the HTML report and the dashboard's Generation page.

Token texts are the user's (a model can write anything): callers show them as text, and
here they are quoted with repr() wherever they sit inside a sentence.
"""

from __future__ import annotations

from typing import Any

import parity.files.strict_json as sj
from parity.results import GenerationInfo, PromptGeneration, TokenDivergence, ValidationRun
from parity.text import number_text

DIVERGENCE_FIELDS = (
    "position",
    "torch_token",
    "onnx_token",
    "torch_margin",
    "logits_error",
    "near_tie",
    "logits_passed",
    "torch_piece",
    "onnx_piece",
)


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


def generation_lines(g: GenerationInfo) -> list[str]:
    """The terminal's section: per prompt, both texts, where they part, near tie or not."""
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
        (i, p)
        for i, p in enumerate(run.generation.prompts, 1)
        if p.first_divergence is not None and not p.first_divergence.near_tie
    ]
    if not bugs:
        return ""
    where = ", ".join(f"prompt {i} at new token {p.first_divergence.position + 1}" for i, p in bugs)
    return f"Generation: ONNX Runtime's tokens part from torch's, not a near tie: {where}"


def generation_json(g: GenerationInfo) -> dict[str, Any]:
    """The report's "generation": {"prompts": [...]} (and "note" when it was not run)."""
    data: dict[str, Any] = {"prompts": [prompt_json(p) for p in g.prompts]}
    if g.free_run_note:
        data["note"] = g.free_run_note
    return data


def prompt_json(p: PromptGeneration) -> dict[str, Any]:
    d = p.first_divergence
    return {
        "prompt": p.prompt,
        "torch_tokens": list(p.torch_tokens),
        "onnx_tokens": list(p.onnx_tokens),
        "torch_text": p.torch_text,
        "onnx_text": p.onnx_text,
        "match_ratio": p.match_ratio,
        "first_divergence": None if d is None else {f: getattr(d, f) for f in DIVERGENCE_FIELDS},
        "torch_pieces": list(p.torch_pieces),
        "onnx_pieces": list(p.onnx_pieces),
    }


def prompts_from_json(raw: Any, at: str = "generation.prompts") -> tuple[PromptGeneration, ...]:
    """Prompts read back from a saved run (sj.FieldError naming the field when malformed)."""
    if raw is None:
        return ()
    return tuple(_prompt(item, f"{at}[{i}]") for i, item in enumerate(sj.array(raw, at)))


def _prompt(raw: Any, at: str) -> PromptGeneration:
    raw = sj.obj(raw, at)
    d = raw.get("first_divergence")

    def ints(key: str) -> tuple[int, ...]:
        items = sj.array(sj.field(raw, key, at), f"{at}.{key}")
        return tuple(sj.integer(v, f"{at}.{key}[{i}]") for i, v in enumerate(items))

    def texts(key: str) -> tuple[str, ...]:
        items = sj.array(raw.get(key, []), f"{at}.{key}")
        return tuple(sj.string(v, f"{at}.{key}[{i}]") for i, v in enumerate(items))

    return PromptGeneration(
        prompt=sj.string(sj.field(raw, "prompt", at), f"{at}.prompt"),
        torch_tokens=ints("torch_tokens"),
        onnx_tokens=ints("onnx_tokens"),
        torch_text=sj.string(sj.field(raw, "torch_text", at), f"{at}.torch_text"),
        onnx_text=sj.string(sj.field(raw, "onnx_text", at), f"{at}.onnx_text"),
        first_divergence=None if d is None else _divergence(d, f"{at}.first_divergence"),
        torch_pieces=texts("torch_pieces"),
        onnx_pieces=texts("onnx_pieces"),
    )


def _divergence(raw: Any, at: str) -> TokenDivergence:
    raw = sj.obj(raw, at)

    def get(key: str, check: Any) -> Any:
        return check(sj.field(raw, key, at), f"{at}.{key}")

    def figure(key: str) -> float:  # null: a non-finite value written as strict JSON
        value = sj.optional(sj.number, raw.get(key), f"{at}.{key}")
        return float("inf") if value is None else value

    return TokenDivergence(
        position=get("position", sj.integer),
        torch_token=get("torch_token", sj.integer),
        onnx_token=get("onnx_token", sj.integer),
        torch_margin=figure("torch_margin"),
        logits_error=figure("logits_error"),
        near_tie=get("near_tie", sj.boolean),
        logits_passed=sj.boolean(raw.get("logits_passed", False), f"{at}.logits_passed"),
        torch_piece=sj.string(raw.get("torch_piece", ""), f"{at}.torch_piece"),
        onnx_piece=sj.string(raw.get("onnx_piece", ""), f"{at}.onnx_piece"),
    )
