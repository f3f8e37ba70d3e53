"""What the frozen-size search found (parity.run.frozen_search, the analysis
parity.analyses.frozen_sizes): the nodes holding a size or branch frozen at export, and the
input axes the file fixes where the torch model takes other sizes. Each is a result of the
whole run held by name (parity.results.by_name), written as the list the JSON report has
always had at its top level (`frozen`, `static_axes`: empty when not looked for); its
findings are parity.show.frozen_findings'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from parity.files.derived_json import MAX_NOTES, Form, register
from parity.results.by_name import analysis_result

__all__ = ["FROZEN_KINDS", "FrozenNode", "FrozenNodes", "StaticAxes", "StaticAxis"]

FROZEN_KINDS = ("size", "branch")  # `frozen[].kind`


@dataclass(frozen=True)
class FrozenNode:
    """A node of the ONNX graph that holds a size (or a branch) tracing froze at the
    export's size (parity.frozen): the JSON report's top-level `frozen` list. `dims` maps each
    dim the constant equals to its value at the export's size ({"height": 64, "width": 48});
    `source` is the torch line the exporter recorded (``models.py:18``) or None; `confirmed`:
    the file passes at the recovered size and the graph with the constant recomputed agrees
    with torch at the failing size (a node is shown only once confirmed, unless said)."""

    node: str
    op: str
    kind: str  # FROZEN_KINDS
    constant: tuple[float, ...]
    dims: Mapping[str, int]
    source: str | None = None
    confirmed: bool = False
    text: str = ""  # the one sentence every front shows (parity.frozen's words)


@dataclass(frozen=True)
class StaticAxis:
    """An input axis the ONNX file fixes although the torch model runs at other sizes (the
    dynamo exporter made an LSTM's time axis static): the JSON report's `static_axes`.
    `text` is the one line every front shows (parity.run.frozen_search's words)."""

    input: str
    axis: int
    size: int  # the file's fixed size
    torch_size: int  # another size torch ran at
    text: str = ""


@analysis_result("frozen", per_run=True, always=True)
@dataclass(frozen=True)
class FrozenNodes:
    """The frozen nodes found, confirmed ones first: the report's `frozen` list."""

    nodes: tuple[FrozenNode, ...] = ()


@analysis_result("static_axes", per_run=True, always=True)
@dataclass(frozen=True)
class StaticAxes:
    """The input axes the file fixes where torch takes other sizes: the report's
    `static_axes` list."""

    axes: tuple[StaticAxis, ...] = ()


# their JSON: a list (at most MAX_NOTES long: a forged file's 300,000 is one line's refusal)
register(FrozenNode, Form(choices={"kind": FROZEN_KINDS}, absent={"constant": (), "dims": {}}))
register(FrozenNodes, Form(unwrap="nodes", limits={"nodes": MAX_NOTES}))
register(StaticAxes, Form(unwrap="axes", limits={"axes": MAX_NOTES}))
