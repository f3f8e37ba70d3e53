"""Typed description of a model's inputs and outputs, read from the ONNX graph."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

Dim = int | str | None
"""A dimension: a fixed size, a symbolic name (``"batch"``), or unknown (``None``)."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name: "float32", "float16", "int64", "bool", ...
    shape: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def symbolic_dims(self) -> tuple[str, ...]:
        return tuple(d for d in self.shape if isinstance(d, str))

    def shape_text(self) -> str:
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"


# the legacy exporter's OP + OUTPUT + _dim_K: Resizeout_dim_1, Convy_dim_3
_MADE_UP = re.compile(r"^([A-Z][A-Za-z0-9]*?)(\w+)_dim_\d+$")
_UNKNOWN = re.compile(r"^unk__\d+$")  # ONNX shape inference's


def readable_dim(name: str) -> str | None:
    """A dim name as people read it: a name an exporter made up for a size its op computes
    ("Resizeout_dim_1", "Convy_dim_3": an ONNX op, then an output's name) is "Resize size";
    shape inference's "unk__12" is no name (None); any other name is the user's, as it is."""
    made = _MADE_UP.match(name)
    if made:
        ops = _op_types()
        for end in range(len(made.group(1)) + len(made.group(2)) - 1, 0, -1):
            if name[:end] in ops:  # the longest op name that leaves an output name after it
                return f"{name[:end]} size"
    return None if _UNKNOWN.match(name) else name


@functools.cache
def _op_types() -> frozenset[str]:
    """Every ONNX op type (the default domain's), as the legacy exporter spells them."""
    import onnx.defs

    return frozenset(s.name for s in onnx.defs.get_all_schemas() if s.domain == "")


@dataclass(frozen=True)
class Calibrated:
    """A graph input's calibrated range (its QuantizeLinear's): low and high in float."""

    name: str
    low: float
    high: float
    scale: float
    zero_point: int

    def text(self) -> str:
        return f"[{self.low:.4g}, {self.high:.4g}]"


@dataclass(frozen=True)
class IndexLimit:
    """Graph input `name` indexes `size` rows of the Gather `node`'s constant table."""

    name: str
    size: int
    node: str

    def text(self) -> str:
        return f"[0, {self.size}) (the {self.size} rows of the Gather {self.node}'s table)"


@dataclass(frozen=True)
class OnnxSignature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    opset: int
    producer: str
    ir_version: int
    # graph inputs a QuantizeLinear reads, with the range it keeps (parity.load.calibration)
    calibrated: tuple[Calibrated, ...] = field(default=(), compare=False)
    # integer graph inputs that index a constant table's rows (parity.load.index_limits)
    index_limits: tuple[IndexLimit, ...] = field(default=(), compare=False)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def output_dim_names(self, name: str, rank: int) -> tuple[str | None, ...]:
        """The ONNX name of each axis of output `name` (``"batch"``, ``"height"``), None for
        fixed or unnamed dims, or for every axis when the output's rank is not `rank`."""
        spec = next((t for t in self.outputs if t.name == name), None)
        if spec is None or spec.rank != rank:
            return (None,) * rank
        return tuple(readable_dim(d) if isinstance(d, str) and d else None for d in spec.shape)

    @property
    def symbolic_dims(self) -> tuple[str, ...]:
        """Every symbolic dim name of the inputs, in first-seen order."""
        seen: dict[str, None] = {}
        for spec in self.inputs:
            for d in spec.symbolic_dims:
                seen.setdefault(d, None)
        return tuple(seen)
