"""Map captured generate() calls onto an ONNX file's inputs and outputs.

One naming serves both kinds of file Parity meets: Optimum's (`input_ids`, `attention_mask`
over past + current length, `position_ids`, `past_key_values.{i}.key/value` in,
`logits` over the full sequence and `present.{i}.key/value` out) and Parity's own export,
which uses the same names on purpose. Rules: an empty cache is fed as zero-length tensors,
a missing mask as ones, missing position ids as generate() computes them from the mask;
torch's logits (often only the last position, `logits_to_keep=1`) are compared with the
matching last positions of the ONNX logits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from parity.errors import InputError
from parity.hf.capture import CapturedCall
from parity.signature import OnnxSignature, TensorSpec

PAST_NAME = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
PRESENT_NAME = re.compile(r"^present\.(\d+)\.(key|value)$")
LOGITS = "logits"
HIDDEN = ("last_hidden_state", "token_embeddings")  # sentence-transformers: the same rows
KNOWN_INPUTS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "cache_position",
    "token_type_ids",
    "use_cache_branch",
)


def past_name(layer: int, kind: str) -> str:
    return f"past_key_values.{layer}.{kind}"


def present_name(layer: int, kind: str) -> str:
    return f"present.{layer}.{kind}"


def full_attention_mask(call: CapturedCall) -> np.ndarray:
    """The mask over past + current positions; ones when generate() left it out."""
    mask = call.inputs.get("attention_mask")
    if mask is not None:
        return mask
    batch, seq = call.input_ids.shape
    return np.ones((batch, call.past_length + seq), dtype=np.int64)


def position_ids(call: CapturedCall) -> np.ndarray:
    """Captured position ids, else generate()'s rule: cumsum(mask) - 1, padding at 1."""
    captured = call.inputs.get("position_ids")
    if captured is not None:
        return captured
    mask = full_attention_mask(call).astype(np.int64)
    positions = np.cumsum(mask, axis=1) - 1
    positions[mask == 0] = 1
    return positions[:, -call.input_ids.shape[1] :]


def cache_position(call: CapturedCall) -> np.ndarray:
    captured = call.inputs.get("cache_position")
    if captured is not None:
        return captured
    past = call.past_length
    return np.arange(past, past + call.input_ids.shape[1], dtype=np.int64)


def onnx_feeds(call: CapturedCall, signature: OnnxSignature) -> dict[str, np.ndarray]:
    """The feeds of one captured call for this ONNX file, cast to its declared dtypes.

    Raises InputError listing both sides' names when an ONNX input has no captured match.
    """
    feeds: dict[str, np.ndarray] = {}
    unmatched: list[str] = []
    for spec in signature.inputs:
        value = _feed(call, spec.name)
        if value is None:
            unmatched.append(spec.name)
            continue
        feeds[spec.name] = _cast(value, spec.dtype)
    if unmatched:
        raise InputError(
            f"hf: cannot feed ONNX input(s) {unmatched} from the captured generate() calls; "
            f"ONNX inputs: {list(signature.input_names)}; captured: {captured_names(call)}"
        )
    has_past = any(PAST_NAME.match(name) for name in signature.input_names)
    if not has_past and call.past_length > 0:
        raise InputError(
            "hf: the ONNX file takes no past_key_values.{i}.key/value inputs, so decode steps "
            f"cannot be fed; ONNX inputs: {list(signature.input_names)}; "
            f"captured: {captured_names(call)}"
        )
    return feeds


def captured_names(call: CapturedCall) -> list[str]:
    names = list(KNOWN_INPUTS)
    for layer in range(len(call.past)):
        names += [past_name(layer, "key"), past_name(layer, "value")]
    return names


def _feed(call: CapturedCall, name: str) -> np.ndarray | None:
    if name not in KNOWN_INPUTS and name in call.inputs:  # pixel_values, input_features, ...
        return call.inputs[name]
    if name == "input_ids":
        return call.inputs.get("input_ids")
    if name == "attention_mask":
        return full_attention_mask(call)
    if name == "position_ids":
        return position_ids(call)
    if name == "cache_position":
        return cache_position(call)
    if name == "token_type_ids":
        captured = call.inputs.get("token_type_ids")
        return captured if captured is not None else np.zeros_like(call.input_ids)
    if name == "use_cache_branch":  # Optimum's merged decoders: one graph, two branches
        return np.array([call.past_length > 0])
    match = PAST_NAME.match(name)
    if match:
        layer, kind = int(match.group(1)), match.group(2)
        if layer >= len(call.past):
            return None
        return call.past[layer][0 if kind == "key" else 1]
    return None


def _cast(value: np.ndarray, dtype: str) -> np.ndarray:
    if dtype in ("", "str") or str(value.dtype) == dtype:
        return value
    try:
        return value.astype(dtype)
    except TypeError:
        return value


def reference_outputs(
    call: CapturedCall, outputs: Sequence[TensorSpec | str]
) -> dict[str, np.ndarray]:
    """torch's outputs of one call under the ONNX output names they match (`paired_outputs`
    without its line)."""
    return paired_outputs(call, outputs)[0]


def paired_outputs(
    call: CapturedCall, outputs: Sequence[TensorSpec | str]
) -> tuple[dict[str, np.ndarray], str]:
    """torch's outputs of one call under the ONNX output names they match: by name (logits
    and present.N by their role), then the ONNX outputs left by order and shape with the
    call's outputs left (an Olive file names BERT's pooler output `tanh`:
    parity.run.runner.pair_by_order), and one line naming those ("" when none).

    ONNX outputs with no torch counterpart are left out: the comparison reports them as
    missing on the torch side.
    """
    from parity.run.runner import pair_by_order, renamed_note

    ref: dict[str, np.ndarray] = {}
    free: list[TensorSpec | str] = []
    for spec in outputs:
        name = spec.name if isinstance(spec, TensorSpec) else spec
        if name in call.outputs:
            ref[name] = call.outputs[name]
            continue
        if name == LOGITS and call.logits is not None:
            ref[name] = call.logits
            continue
        match = PRESENT_NAME.match(name)
        if match and int(match.group(1)) < len(call.present):
            ref[name] = call.present[int(match.group(1))][0 if match.group(2) == "key" else 1]
            continue
        free.append(spec)
    rest = [n for n in call.outputs if n not in ref]
    taken = pair_by_order([tuple(call.outputs[n].shape) for n in rest], free) if rest else {}
    for name, k in taken.items():
        ref[name] = call.outputs[rest[k]]
    note = renamed_note([(name, rest[k]) for name, k in taken.items()])
    names = [o.name if isinstance(o, TensorSpec) else o for o in outputs]
    return {n: ref[n] for n in names if n in ref}, note


def masked_positions(call: CapturedCall, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """Boolean array (broadcastable to `shape`): True where the attention mask excludes.

    Left-padding positions are never attended, so exports may legitimately differ there.
    present.{i}.* are (batch, heads, past + current, head_dim); logits are
    (batch, positions, vocab) for the last positions of the current tokens; an encoder's
    last_hidden_state is (batch, sequence, hidden).
    """
    if "input_ids" not in call.inputs and "attention_mask" not in call.inputs:
        return None  # pixels or audio features: no padding mask
    mask = full_attention_mask(call) == 0
    if not mask.any():
        return None
    if PRESENT_NAME.match(name) and len(shape) == 4 and shape[2] == mask.shape[1]:
        return mask[:, None, :, None]
    if name == LOGITS and len(shape) == 3 and shape[1] <= mask.shape[1]:
        return mask[:, -shape[1] :, None]
    if name in HIDDEN and len(shape) == 3 and shape[1] == mask.shape[1]:
        return mask[:, :, None]  # an encoder's padded query rows
    return None
