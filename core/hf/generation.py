"""Free-running generation: ONNX Runtime writes on its own beside torch's greedy generate().

The step comparison feeds every call torch's own inputs (right for localising); the question
an LLM user asks first is whether the exported model, left to itself, writes the same
tokens. After the cases, the hf: source runs the ONNX file greedily from the same
left-padded batch of prompts for as many new tokens as generate() made: the argmax of the
last logits, its own `present.*` fed back as `past_key_values.*`, the mask grown by one,
positions continued (the same feeds as the steps: parity.hf.feeds). A model whose ONNX file
has no cache inputs is fed the whole sequence each step. Like generate() with
`min_new_tokens` (parity.hf.capture), the end-of-sequence tokens are never chosen.

Where a prompt's tokens first part, every earlier token agreed, so the ONNX logits there were
computed on torch's own prefix: they are compared with torch's logits of that step
(`logits_error`, and whether they pass the run's tolerance) and torch's top-1 minus top-2
margin says whether the token was a near tie that an acceptable error flipped, or a bug.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from parity.errors import InputError, OnnxRunError
from parity.hf.capture import Capture, CapturedCall
from parity.hf.feeds import LOGITS, PAST_NAME, full_attention_mask, onnx_feeds, present_name
from parity.limits.deadline import Deadline
from parity.results import InputSet, PromptGeneration, TokenDivergence
from parity.signature import OnnxSignature
from parity.tolerances import Tolerance, Tolerances

NOT_CAUSAL = "free-running generation is for causal LMs (this model makes one forward)"
NO_LOGITS = "free-running generation not run: the ONNX file has no 'logits' output"


def eos_ids(model: Any) -> tuple[int, ...]:
    """The end-of-sequence ids generate() kept from being chosen (min_new_tokens)."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))


def why_not(capture: Capture, signature: OnnxSignature) -> str:
    """'' when free-running generation can run on this capture and file, else why not."""
    if not capture.calls or capture.calls[0].encoder or capture.new_tokens is None:
        return NOT_CAUSAL
    if LOGITS not in signature.output_names:
        return NO_LOGITS
    if len(capture.calls) != capture.new_tokens.shape[1]:
        return (
            f"free-running generation not run: generate() made {len(capture.calls)} forward "
            f"call(s) for {capture.new_tokens.shape[1]} new token(s)"
        )
    return ""


def generate_beside(
    loaded: Any,
    capture: Capture,
    candidate: Any,
    tolerances: Tolerances,
    *,
    deadline: Deadline | None = None,
) -> tuple[tuple[PromptGeneration, ...], str]:
    """(prompts, note) for one candidate (a parity.run.candidates.Candidate): the prompts
    generated freely, or () and why not. A file that cannot be run this way (its inputs
    do not fit, ONNX Runtime raises) gets a note, never a failed run: the verdict is the
    step comparison's."""
    signature = candidate.signature
    note = why_not(capture, signature)
    if note:
        return (), note
    try:
        prompts = free_run(
            capture,
            loaded.tokenizer,
            candidate.session,
            signature,
            tolerance=tolerances.for_output(LOGITS),
            eos=eos_ids(loaded.model),
            deadline=deadline,
        )
    except (InputError, OnnxRunError) as exc:
        return (), f"free-running generation not run: {exc.message}"
    return prompts, ""


def free_run(
    capture: Capture,
    tokenizer: Any,
    session: Any,
    signature: OnnxSignature,
    *,
    tolerance: Tolerance,
    eos: Sequence[int] = (),
    deadline: Deadline | None = None,
) -> tuple[PromptGeneration, ...]:
    """Each prompt of `capture` generated greedily by ONNX Runtime on its own (see module)."""
    assert capture.new_tokens is not None
    torch_tokens = capture.new_tokens.astype(np.int64)
    batch, n_new = torch_tokens.shape
    chosen = np.zeros((batch, n_new), dtype=np.int64)
    parted: dict[int, TokenDivergence] = {}
    steps = own_cache_steps(
        capture, session, signature, lambda _, logits: greedy(logits, eos), deadline=deadline
    )
    for step, (onnx_logits, tokens) in enumerate(steps):
        chosen[:, step] = tokens
        torch_logits = _last(capture.calls[step].logits)
        for row in range(batch):
            if row in parted or chosen[row, step] == torch_tokens[row, step]:
                continue
            parted[row] = divergence(
                step,
                torch_logits[row],
                onnx_logits[row],
                int(torch_tokens[row, step]),
                int(chosen[row, step]),
                tolerance=tolerance,
                eos=eos,
            )
    return tuple(
        _prompt(capture, tokenizer, row, torch_tokens[row], chosen[row], parted.get(row))
        for row in range(batch)
    )


def own_cache_steps(
    capture: Capture,
    session: Any,
    signature: OnnxSignature,
    choose: Callable[[int, np.ndarray], np.ndarray],
    *,
    deadline: Deadline | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The file run on its own, one step per new token of `capture`, from its first call's
    inputs: yields each step's last logits (batch, vocab) and the tokens `choose(step,
    logits)` picked, which the next step is fed with its own `present.*` as the past, the
    mask grown by one (a file with no cache inputs: the whole sequence again)."""
    from parity.run.runner import run_onnx

    assert capture.new_tokens is not None
    n_new = capture.new_tokens.shape[1]
    layers = _cache_layers(signature)
    first = capture.calls[0]
    inputs: dict[str, np.ndarray] = dict(first.inputs)
    past = first.past if layers else ()
    for step in range(n_new):
        if deadline is not None:
            deadline.check()
        call = CapturedCall(
            index=step, inputs=inputs, past=past, logits=None, present=(), seconds=0.0
        )
        feeds = onnx_feeds(call, signature)
        label = f"free-running generation, new token {step + 1}"
        out = run_onnx(
            session,
            InputSet(index=step, feeds=feeds, label=label),
            signature=signature,
            deadline=deadline,
        ).arrays
        mask = full_attention_mask(call)
        logits = _last(out[LOGITS], mask)
        tokens = np.asarray(choose(step, logits), dtype=np.int64)
        yield logits, tokens
        grown = np.concatenate([mask, np.ones((len(tokens), 1), dtype=mask.dtype)], axis=1)
        if layers:
            past = tuple(
                (out[present_name(i, "key")], out[present_name(i, "value")]) for i in layers
            )
            inputs = {"input_ids": tokens[:, None], "attention_mask": grown}
        else:  # no cache inputs: the whole sequence again
            ids = np.concatenate([call.input_ids, tokens[:, None]], axis=1)
            inputs = {"input_ids": ids, "attention_mask": grown}


def greedy(logits: np.ndarray, eos: Sequence[int] = ()) -> np.ndarray:
    """The argmax of each row, end-of-sequence ids left out (generate()'s min_new_tokens)."""
    return np.argmax(_without(logits, eos), axis=-1)


def divergence(
    position: int,
    torch_logits: np.ndarray,
    onnx_logits: np.ndarray,
    torch_token: int,
    onnx_token: int,
    *,
    tolerance: Tolerance,
    eos: Sequence[int] = (),
) -> TokenDivergence:
    """Where the tokens part: torch's margin, the logits' error there and their verdict.

    A near tie: the logits pass the tolerance and torch's margin is within what their error
    can flip (a flip needs margin <= the two logits' errors together, so <= 2 x the max)."""
    from parity.judge.compare import compare_outputs

    ref = torch_logits.astype(np.float64)
    top = np.sort(_without(ref, eos))[-2:]
    margin = float(top[-1] - top[0]) if top.size == 2 else float("inf")
    diff = np.abs(onnx_logits.astype(np.float64) - ref)
    error = float(diff.max()) if diff.size and np.isfinite(diff).all() else float("inf")
    passed = compare_outputs(
        torch_logits[None],
        onnx_logits[None],
        name=LOGITS,
        input_set=position,
        tolerance=tolerance,
    ).status.passed
    return TokenDivergence(
        position=position,
        torch_token=torch_token,
        onnx_token=onnx_token,
        torch_margin=margin,
        logits_error=error,
        near_tie=bool(passed and margin <= 2 * error),
        logits_passed=bool(passed),
    )


def _prompt(
    capture: Capture,
    tokenizer: Any,
    row: int,
    torch_tokens: np.ndarray,
    onnx_tokens: np.ndarray,
    parted: TokenDivergence | None,
) -> PromptGeneration:
    torch_ids = tuple(int(t) for t in torch_tokens)
    onnx_ids = tuple(int(t) for t in onnx_tokens)
    torch_pieces, onnx_pieces = pieces(tokenizer, torch_ids), pieces(tokenizer, onnx_ids)
    if parted is not None:
        at = parted.position
        parted = replace(parted, torch_piece=torch_pieces[at], onnx_piece=onnx_pieces[at])
    texts = capture.generated
    return PromptGeneration(
        prompt=capture.prompts[row] if row < len(capture.prompts) else "",
        torch_tokens=torch_ids,
        onnx_tokens=onnx_ids,
        torch_text=texts[row] if row < len(texts) else decode(tokenizer, torch_ids),
        onnx_text=decode(tokenizer, onnx_ids),
        first_divergence=parted,
        torch_pieces=torch_pieces,
        onnx_pieces=onnx_pieces,
    )


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of new tokens, as the capture decodes torch's (special tokens left out)."""
    return str(tokenizer.decode(list(ids), skip_special_tokens=True))


def pieces(tokenizer: Any, ids: Sequence[int]) -> tuple[str, ...]:
    """Each token's text decoded alone (special tokens kept: every position shows)."""
    return tuple(str(t) for t in tokenizer.batch_decode([[i] for i in ids]))


def _cache_layers(signature: OnnxSignature) -> tuple[int, ...]:
    """The layers whose cache the file takes and gives back (() when it has none)."""
    inputs = {int(m.group(1)) for n in signature.input_names if (m := PAST_NAME.match(n))}
    outputs = set(signature.output_names)
    if not inputs or any(
        present_name(i, kind) not in outputs for i in inputs for kind in ("key", "value")
    ):
        return ()
    return tuple(sorted(inputs))


def _last(logits: np.ndarray | None, mask: np.ndarray | None = None) -> np.ndarray:
    """Each row's last attended position's logits, (batch, vocab), as float32 (float16 files
    included): the last position, unless `mask` (past + current) pads a row on the right
    (a batch padded as ONNX Runtime GenAI pads one: parity.hf.padded_batch)."""
    assert logits is not None and logits.ndim == 3
    if mask is None or logits.shape[1] == 1:
        return np.asarray(logits[:, -1, :], dtype=np.float32)
    window = np.asarray(mask)[:, -logits.shape[1] :] != 0
    last = window.shape[1] - 1 - np.argmax(window[:, ::-1], axis=1)
    return np.asarray(logits[np.arange(len(last)), last, :], dtype=np.float32)


def _without(logits: np.ndarray, eos: Sequence[int]) -> np.ndarray:
    if not eos:
        return logits
    kept = np.array(logits, dtype=np.float64, copy=True)
    ids = [e for e in eos if 0 <= e < kept.shape[-1]]
    kept[..., ids] = -np.inf
    return kept
