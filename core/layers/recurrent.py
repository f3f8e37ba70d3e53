"""Recurrent layers (LSTM, GRU, RNN) compared layer by layer, output to output.

An ``nn.LSTM(num_layers=3)`` is one module (one FX node on a dynamo export) but three ONNX
nodes, one per layer, each with outputs Y ``[seq, dirs, batch, hidden]``, Y_h and Y_c
``[dirs, batch, hidden]``. torch does not expose its layers' values, so they are computed
here from the module's own weights, one layer at a time, with the same ``torch._VF`` kernel
the module calls, and put in ONNX's layout: each ONNX node's outputs are then compared
with the very quantity they hold, and a bug in layer 1's weights is named at layer 1.
Anything outside that shape of things (projections, packed or unbatched inputs, layouts
other than ONNX's default) is left out and said so, never compared across shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

# ONNX op -> (torch kind, number of state tensors)
ONNX_OPS = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"}
SLOTS = ("Y", "Y_h", "Y_c")  # ONNX's outputs of a recurrent node, in order
SLOT_WORDS = {"Y": "output", "Y_h": "h_n", "Y_c": "c_n"}
# ops that only move a recurrent node's values around (the stacking of h_n, the squeeze of Y)
_SHAPE_OPS = frozenset(
    {"Concat", "Squeeze", "Unsqueeze", "Transpose", "Reshape", "Identity", "Flatten"}
)
_FX_TARGETS = {
    "aten.lstm.input": "lstm",
    "aten.gru.input": "gru",
    "aten.rnn_tanh.input": "rnn_tanh",
    "aten.rnn_relu.input": "rnn_relu",
}
SEP = "#"  # a layer key: "<module path or FX node>#<layer>#<slot>"


def layer_key(base: str, layer: int, slot: str) -> str:
    return f"{base}{SEP}{layer}{SEP}{slot}"


def split_key(key: str) -> tuple[str, int, str] | None:
    parts = key.rsplit(SEP, 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


def layer_words(base: str, layer: int, slot: str) -> str:
    """How a layer's value is named to a user: "lstm layer 1 h_n"."""
    return f"{base} layer {layer} {SLOT_WORDS.get(slot, slot)}"


def is_recurrent_module(module: Any) -> bool:
    return isinstance(module, torch.nn.RNNBase)


def fx_kind(target: str | None) -> str | None:
    """The recurrent kind of an FX node's target ("aten.lstm.input" -> "lstm"), else None."""
    if target is None:
        return None
    return _FX_TARGETS.get(target.removeprefix("torch.ops.").removesuffix(".default"))


@dataclass(frozen=True)
class Stack:
    """What one recurrent call computes, as its kernel reads it."""

    kind: str  # lstm | gru | rnn_tanh | rnn_relu
    input: torch.Tensor
    hx: tuple[torch.Tensor, ...]  # (h0,) or (h0, c0); [layers * dirs, batch, hidden]
    params: tuple[torch.Tensor, ...]
    has_biases: bool
    num_layers: int
    bidirectional: bool
    batch_first: bool


def from_module(module: Any, args: Sequence[Any]) -> Stack | str:
    """The stack of an nn.LSTM / GRU / RNN call (its forward pre-hook's args), or why the
    layers cannot be computed apart (said in a note)."""
    if getattr(module, "proj_size", 0):
        return "an LSTM with proj_size"
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor):
        return "a packed sequence input"
    if x.dim() != 3:
        return "an unbatched input"
    kind = "lstm" if isinstance(module, torch.nn.LSTM) else "gru"
    if isinstance(module, torch.nn.RNN):
        kind = "rnn_tanh" if module.nonlinearity == "tanh" else "rnn_relu"
    dirs = 2 if module.bidirectional else 1
    batch = x.shape[0] if module.batch_first else x.shape[1]
    hx = args[1] if len(args) > 1 else None
    if hx is None:
        zeros = x.new_zeros(module.num_layers * dirs, batch, module.hidden_size)
        hx = (zeros, zeros) if kind == "lstm" else (zeros,)
    elif isinstance(hx, torch.Tensor):
        hx = (hx,)
    return Stack(
        kind,
        x,
        tuple(hx),
        tuple(module._flat_weights),
        bool(module.bias),
        int(module.num_layers),
        bool(module.bidirectional),
        bool(module.batch_first),
    )


def from_fx(kind: str, args: Sequence[Any]) -> Stack | str:
    """The stack of an aten.lstm / gru / rnn_* FX node from its (evaluated) arguments."""
    x, hx, params, has_biases, num_layers, _dropout, _train, bidirectional, batch_first = args
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        return "an unbatched input"
    hx = (hx,) if isinstance(hx, torch.Tensor) else tuple(hx)
    return Stack(
        kind,
        x,
        hx,
        tuple(params),
        bool(has_biases),
        int(num_layers),
        bool(bidirectional),
        bool(batch_first),
    )


def layers(stack: Stack) -> list[dict[str, torch.Tensor]] | str:
    """Each layer's Y, Y_h (and Y_c) in ONNX's layout, computed one layer at a time."""
    dirs = 2 if stack.bidirectional else 1
    per_dir = 4 if stack.has_biases else 2
    if len(stack.params) != stack.num_layers * dirs * per_dir:
        return "weights the layer-by-layer computation does not know (a projection?)"
    fn = getattr(torch._VF, stack.kind)
    x = stack.input
    out: list[dict[str, torch.Tensor]] = []
    for k in range(stack.num_layers):
        params = list(stack.params[k * dirs * per_dir : (k + 1) * dirs * per_dir])
        hx = [h[k * dirs : (k + 1) * dirs] for h in stack.hx]
        state = hx if stack.kind == "lstm" else hx[0]
        result = fn(
            x, state, params, stack.has_biases, 1, 0.0, False, stack.bidirectional,
            stack.batch_first,
        )  # fmt: skip
        y, states = result[0], result[1:]
        seq_first = y.transpose(0, 1) if stack.batch_first else y  # [seq, batch, dirs*hidden]
        t, b, _ = seq_first.shape
        onnx_y = seq_first.reshape(t, b, dirs, -1).permute(0, 2, 1, 3).contiguous()
        values = {"Y": onnx_y, "Y_h": states[0]}
        if len(states) > 1:
            values["Y_c"] = states[1]
        out.append(values)
        x = y
    return out


def agrees_with(per_layer: list[dict[str, torch.Tensor]], output: Any) -> bool:
    """The layers computed apart end where the module ended: its h_n is their stacked Y_h
    (else the computation is not the module's, and nothing is compared from it)."""
    if not isinstance(output, tuple) or len(output) < 2:
        return False
    state = output[1]
    h_n = state[0] if isinstance(state, tuple) else state
    if not isinstance(h_n, torch.Tensor):
        return False
    stacked = torch.cat([v["Y_h"] for v in per_layer], dim=0)
    return stacked.shape == h_n.shape and bool(torch.allclose(stacked, h_n, rtol=1e-4, atol=1e-5))


def values_slot(
    inputs_of: Mapping[str, tuple[str, ...]],
    ops: Mapping[str, tuple[str, int]],
    value: str,
) -> int | None:
    """Which output of the recurrent nodes (0 Y, 1 Y_h, 2 Y_c) `value` only moves around
    (through Concat / Squeeze / Transpose ...): `ops[name]` = (op type, output slot) of each
    value's producer. None when it mixes slots or computes something else."""
    slots: set[int] = set()
    stack, seen = [value], set()
    while stack:
        name = stack.pop()
        if name in seen or name not in ops:
            continue
        seen.add(name)
        op, slot = ops[name]
        if op in ONNX_OPS:
            slots.add(slot)
        elif op in _SHAPE_OPS:
            stack.extend(inputs_of.get(name, ())[:1] if op != "Concat" else inputs_of[name])
        elif op != "Constant":
            return None
    return slots.pop() if len(slots) == 1 else None
