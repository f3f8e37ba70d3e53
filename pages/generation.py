"""Generation page (causal LMs): does ONNX Runtime, left to generate on its own, write what
torch wrote?

Per prompt: the sentence of where the texts part and whether it is a near tie
(parity.show.generation_text), then both texts token by token with the first difference
marked; below, the KV cache as steps x layers grids (keys, values) coloured by error ÷
allowed like every grid. Token texts are the model's output, the prompt the user's: shown as
text or in a dataframe, never as markdown.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from parity.dashboard import state
from parity.dashboard.candidates import candidate_selector
from parity.dashboard.frame import run_or_invite
from parity.hf.generation_figures import KINDS, kv_cache_grid
from parity.results import PaddedBatch, PromptGeneration
from parity.show.generation_text import padded_why, parting_words, tie_words
from parity.text import count_text, number_text

FIRST_DIFFERENCE = "✗ first difference"
MAX_TOKEN_ROWS = 2000
"""Rows drawn per prompt's token table (the first ones, and those around the first
difference): a saved run may carry 300k tokens, which would stall the browser."""
MAX_TEXT = 20_000
"""Characters of a prompt or a generated text drawn (the rest is said, not shown)."""
MAX_PROMPTS = 32
"""Prompts drawn; the others are counted."""


def token_rows(p: PromptGeneration) -> pd.DataFrame:
    """One row per new token: torch's and ONNX Runtime's token (text and id), and whether
    they agree; the first difference is marked in words."""
    parted = p.first_divergence.position if p.first_divergence is not None else None
    n = max(len(p.torch_tokens), len(p.onnx_tokens))
    rows = []
    for i in shown_positions(n, parted):
        torch_id = p.torch_tokens[i] if i < len(p.torch_tokens) else None
        onnx_id = p.onnx_tokens[i] if i < len(p.onnx_tokens) else None
        mark = "✓ same" if torch_id == onnx_id else "· differs"
        rows.append(
            {
                "position": i,
                "torch token": _piece(p.torch_pieces, i),
                "torch id": torch_id,
                "ONNX token": _piece(p.onnx_pieces, i),
                "ONNX id": onnx_id,
                "": FIRST_DIFFERENCE if i == parted else mark,
            }
        )
    return pd.DataFrame(rows)


def shown_positions(n: int, parted: int | None) -> list[int]:
    """At most MAX_TOKEN_ROWS positions of `n`: the first ones, and a window around the
    first difference when it lies past them."""
    if n <= MAX_TOKEN_ROWS:
        return list(range(n))
    if parted is None or parted < MAX_TOKEN_ROWS - 100:
        return list(range(MAX_TOKEN_ROWS))
    head = list(range(MAX_TOKEN_ROWS - 200))
    return head + list(range(max(parted - 100, len(head)), min(parted + 100, n)))


def bounded_text(text: str) -> str:
    """`text`, cut at MAX_TEXT characters with the cut said."""
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}\n[... {len(text) - MAX_TEXT:,} more characters not shown]"


def _piece(pieces: tuple[str, ...], i: int) -> str:
    return repr(pieces[i]) if i < len(pieces) else ""


def _first_difference_style(frame: pd.DataFrame):
    def colour(row: pd.Series) -> list[str]:
        bad = row[""] == FIRST_DIFFERENCE
        return ["background-color: #ffebe9; font-weight: 600" if bad else ""] * len(row)

    return frame.style.apply(colour, axis=1)


def render() -> None:
    st.title("Generation")
    run = run_or_invite(hint="Validate a causal LM (hf:DIR) on the Run page.")
    if run is None:
        return
    view = candidate_selector(run, key=state.CANDIDATE_GENERATION)
    g = view.generation
    if g is None or not (g.prompts or g.free_run_note):
        st.info("This run has no free-running generation: it is made for causal LMs (hf:DIR).")
        return
    if g.free_run_note:
        st.text(g.free_run_note)
    if g.prompts:
        st.caption(
            "ONNX Runtime generated greedily on its own (its own KV cache fed back) from the "
            "same prompts, for as many new tokens as torch's generate(). The verdict stays "
            "the tolerances'."
        )
    if len(g.prompts) > MAX_PROMPTS:
        st.text(f"The first {MAX_PROMPTS} of {len(g.prompts):,} prompts are shown.")
    for i, p in enumerate(g.prompts[:MAX_PROMPTS], 1):
        st.subheader(f"Prompt {i}")
        st.text(bounded_text(p.prompt))
        words = parting_words(p)
        if p.first_divergence is not None:
            words += "\n" + tie_words(p.first_divergence)
        (st.text if p.first_divergence is None else _warn)(words)
        left, right = st.columns(2)
        left.caption("torch")
        left.text(bounded_text(p.torch_text))
        right.caption("ONNX Runtime")
        right.text(bounded_text(p.onnx_text))
        n = max(len(p.torch_tokens), len(p.onnx_tokens))
        if n > MAX_TOKEN_ROWS:
            st.caption(f"{MAX_TOKEN_ROWS:,} of {n:,} tokens are listed (around the first "
                       "difference when it lies further).")  # fmt: skip
        st.dataframe(
            _first_difference_style(token_rows(p)),
            hide_index=True,
            key=f"{state.GEN_TOKENS_PREFIX}{i}",
        )
    if g.padded_batch is not None:
        _padded_batch(g.padded_batch)
    st.subheader("KV cache")
    st.caption(
        "Each step's present key/value per layer, fed torch's own inputs (the step "
        "comparison), coloured by worst error ÷ allowed."
    )
    for kind in KINDS:
        fig = kv_cache_grid(view, kind)
        if fig is None:
            st.text("No present.{i}.key/value outputs were compared.")
            break
        st.plotly_chart(fig, width="stretch", key=f"{state.GEN_KV_PREFIX}{kind}")


def padded_rows(b: PaddedBatch) -> pd.DataFrame:
    """One row per prompt of the padded batch: its padding, its logits' max error against
    torch in the batch and alone, and whether the file gives it in the batch what it gives
    it alone (within the logits tolerance)."""
    return pd.DataFrame(
        [
            {
                "prompt": bounded_text(p.prompt),
                "padding tokens": p.padding,
                "logits max error, batch": number_text(p.batch_error),
                "alone": number_text(p.alone_error),
                "batch vs the file alone": number_text(p.shift),
                "same as alone": "✓" if p.batch_passed else "✗",
            }
            for p in b.prompts
        ]
    )


def _padded_batch(b: PaddedBatch) -> None:
    """A decoder file with no position_ids: the prompts as one padded batch."""
    st.subheader(b.title)
    if not b.prompts:  # not run: why
        st.text(b.text)
        return
    why = padded_why(b)
    st.caption(f"{why[0].upper()}{why[1:]} ({count_text(b.steps, 'step')}).")
    st.dataframe(padded_rows(b), hide_index=True, key=state.GEN_PADDED)
    (_warn if b.fails else st.text)(b.text)


def _warn(text: str) -> None:
    """A warning box whose words stay text (st.warning reads markdown)."""
    with st.container(border=True):
        st.text(text)


render()
