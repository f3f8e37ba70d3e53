"""Module paths as deploy tools spell them, and the projections they pack or split.

ONNX Runtime GenAI's model builder names its nodes by module path, its own way:
`/model/layers.1/attn/qkv_proj/MatMul` for transformers' `model.layers.1.self_attn`, and the
final norm `/model/layers.{N}/final_norm_layernorm` (N: the layer count) for `model.norm`.
It packs q/k/v into one `qkv_proj` MatMul and gate/up into one `gate_up_proj` where torch
computes them apart (Llama, Qwen2, Mistral, Gemma), and splits a packed torch projection
into its parts where torch packs them (Phi-3's `gate_up_proj` becomes `gate_proj` and
`up_proj` MatMuls). A packed ONNX value is torch's parts' outputs concatenated along the
last axis; a split one is an equal chunk of the packed torch output (gate/up: halves).

Keys handed to the torch side (parity.layers.torch_side.HookCapture): a packed value's is its
parts' paths joined by "+", a chunk's `PATH[k/n]`.

Contract:
PACKED; respelled(scope) -> str (a slash scope, GenAI's spelling as transformers'),
projection(path, known) -> Projection | None, split_of(path) -> (packed path, index, count)
| None, parse(key) -> Packed | Chunk | None
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
# a split part's packed module, where the parts are equal chunks of it (q/k/v are not: with
# grouped-query attention k and v are narrower than q)
_EQUAL_CHUNKS = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
_ATTN = re.compile(r"(^|/)attn(/|$)")
_FINAL_NORM = re.compile(r"(^|/)layers\.\d+/final_norm_layernorm(/|$)")
_CHUNK = re.compile(r"^(.+)\[(\d+)/(\d+)\]$")
JOIN = "+"


@dataclass(frozen=True)
class Projection:
    """An ONNX module scope with no torch module of its own: the key the torch side
    computes its value under, and the module named for it in words."""

    key: str
    torch_module: str
    words: str  # how it was matched, for the notes
    reads: str  # the torch module whose input is the projection's input
    covers: tuple[str, ...]  # the torch modules it stands for


@dataclass(frozen=True)
class Packed:
    parts: tuple[str, ...]  # module paths whose outputs are concatenated (last axis)


@dataclass(frozen=True)
class Chunk:
    path: str  # the packed module
    index: int
    count: int  # equal chunks along the last axis


def respelled(scope: str) -> str:
    """A legacy slash scope in transformers' spelling: GenAI's `attn` -> `self_attn`,
    `layers.{N}/final_norm_layernorm` -> `norm`. Unchanged when none applies."""
    scope = _FINAL_NORM.sub(r"\1norm\2", scope)
    return _ATTN.sub(r"\1self_attn\2", scope)


def projection(path: str, known: Collection[str]) -> Projection | None:
    """The torch value an ONNX projection's scope `path` (no torch module of its own)
    stands for: the parts of a packed one, or an equal chunk of the packed module a split
    one came from; None when neither is there."""
    parent, _, leaf = path.rpartition(".")
    prefix = f"{parent}." if parent else ""
    parts = tuple(prefix + p for p in PACKED.get(leaf, ()))
    if parts and all(p in known for p in parts):
        return Projection(
            JOIN.join(parts),
            prefix + JOIN.join(PACKED[leaf]),
            f"{leaf} (packed) against torch's {', '.join(PACKED[leaf])} concatenated",
            reads=parts[0],
            covers=parts,
        )
    split = split_of(path)
    if split is not None and split[0] in known:
        whole, index, count = split
        return Projection(
            f"{whole}[{index}/{count}]",
            whole,
            f"{leaf} (split) against its part of torch's {whole.rpartition('.')[2]}",
            reads=whole,
            covers=(whole,),
        )
    return None


def split_of(path: str) -> tuple[str, int, int] | None:
    """A split projection's packed module, its index among the equal parts and their
    count: `model.layers.0.mlp.up_proj` -> (`model.layers.0.mlp.gate_up_proj`, 1, 2)."""
    parent, _, leaf = path.rpartition(".")
    packed = _EQUAL_CHUNKS.get(leaf)
    if packed is None:
        return None
    members = PACKED[packed]
    return (f"{parent}.{packed}" if parent else packed), members.index(leaf), len(members)


def parse(key: str) -> Packed | Chunk | None:
    """What a key asks the torch side to compute, None for a plain module path."""
    match = _CHUNK.match(key)
    if match:
        return Chunk(match.group(1), int(match.group(2)), int(match.group(3)))
    if JOIN in key:
        return Packed(tuple(key.split(JOIN)))
    return None
