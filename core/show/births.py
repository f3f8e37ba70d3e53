"""Where an error is born, in words, when the first divergence is an op that only moves data
(parity.layers.movers decides which ops do and counts the unmatched nodes feeding one; each
flagged LayerValue carries `moves_data` and `feeding`). The findings, the terminal, the HTML
report and the Layers page say it through these.

Contract: born_before(v) -> bool; feeding_words(v) -> "2 MatMul, 1 Dropout and 9 that move
data or compute sizes"; feeding_count(v) -> int; birth_place(v, article) -> "at the Reshape
node x" or "among the 9 unmatched nodes feeding the Reshape node x (1 Dropout, ...)".
"""

from __future__ import annotations

from typing import Protocol


class _Flagged(Protocol):  # parity.layers.result.LayerValue
    # read-only, as a frozen dataclass's fields are (a plain attribute would ask settable)
    @property
    def onnx_op(self) -> str: ...
    @property
    def onnx_node(self) -> str: ...
    @property
    def moves_data(self) -> bool: ...
    @property
    def feeding(self) -> tuple[tuple[str, int], ...]: ...


MOVES_DATA = frozenset(
    {
        "Transpose",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Flatten",
        "Expand",
        "Split",
        "Concat",
        "Slice",
        "Gather",
    }
)
# shape arithmetic: ops that feed a mover its sizes, never a number of the model's
SHAPES = frozenset({"Shape", "Size", "Range", "ConstantOfShape", "Cast", "Equal", "Where"})


def _computes(op: str) -> bool:
    return op not in MOVES_DATA and op not in SHAPES


def born_before(v: _Flagged) -> bool:
    """`v`'s node only moves data and an unmatched node that computes feeds it: the error is
    born among those nodes, not at `v`'s."""
    return v.moves_data and any(_computes(op) for op, _ in v.feeding)


def feeding_words(v: _Flagged) -> str:
    """The unmatched nodes feeding `v`, by op: those that compute one by one, the rest
    counted ("1 Dropout, 2 MatMul and 12 that move data or compute sizes")."""
    computing = sorted(
        ((op, n) for op, n in v.feeding if _computes(op)), key=lambda kv: (-kv[1], kv[0])
    )
    rest = sum(n for op, n in v.feeding if not _computes(op))
    said = ", ".join(f"{n} {op}" for op, n in computing)
    if not rest:
        return said
    others = f"{rest} that move data or compute sizes"
    if not computing:
        return ", ".join(f"{n} {op}" for op, n in v.feeding)
    return f"{said} and {others}"


def feeding_count(v: _Flagged) -> int:
    return sum(n for _, n in v.feeding)


def birth_place(v: _Flagged, article: str = "the") -> str:
    """Where the error of a first divergence is made, in words, with its preposition
    (`article` "its" where the module was just named)."""
    node = f"{article} {v.onnx_op} node {v.onnx_node}"
    if not born_before(v):
        return f"at {node}"
    return (
        f"among the {feeding_count(v)} unmatched nodes feeding {node} ({feeding_words(v)}; a "
        f"{v.onnx_op} only moves data)"
    )
