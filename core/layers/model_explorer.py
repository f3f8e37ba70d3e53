"""Model Explorer node data: the layers comparison as colours on Model Explorer's graph view.

Model Explorer (`pip install ai-edge-model-explorer model-explorer-onnx`, then
`model-explorer --extensions=model_explorer_onnx`) overlays per-node numbers read from a JSON
file: ``{GRAPH_ID: {"results": {NODE_ID: {"value": N, "bgColor"?: C}}, "thresholds": [...]}}``.
Its ONNX adapter names a graph after the ONNX graph (``main_graph`` for torch exports) and a
node after the ONNX node's name, so the keys here are node names; unnamed nodes cannot be
addressed and are counted apart (`NodeData.skipped`).

One number per node: the worst, over input sets, of the chosen metric of the node's compared
outputs. Thresholds are decades around the pass line (greens below it, amber to red above);
the nodes where a divergence starts are drawn in purple whatever their value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parity.errors import UsageError
from parity.files.atomic import write_output
from parity.files.json_output import dumps
from parity.layers import views
from parity.load.onnx_read import read_onnx

if TYPE_CHECKING:
    from parity.layers.result import LayersResult

WHAT = "Model Explorer node data"
DEFAULT_GRAPH = "main_graph"  # what torch.onnx.export (both exporters) names the graph
DIVERGES_COLOR = "#7b1fa2"
_BIG = 1.7976931348623157e308  # JSON has no Infinity: one-sided NaN/Inf errors are the max float
_BANDS = (  # (multiple of the pass line, colour): a value <= threshold takes that colour
    (0.01, "#388e3c"),
    (0.1, "#8bc34a"),
    (1.0, "#c8e6c9"),
    (10.0, "#ffa000"),
    (1000.0, "#ff5722"),
)


@dataclass(frozen=True)
class NodeData:
    """The JSON document and what could not be put in it."""

    document: dict[str, Any]
    n_nodes: int
    skipped: int  # compared values whose node has no name (Model Explorer cannot address them)

    def to_json(self) -> str:
        return dumps(self.document, indent=1)


def node_data(
    result: LayersResult,
    *,
    metric: str = "error_ratio",
    pass_line: float | None = None,
    graph: str = DEFAULT_GRAPH,
) -> NodeData:
    """Node data for the graph `graph`, one result per named ONNX node."""
    if metric not in views.METRICS:
        raise UsageError(f"unknown metric {metric!r}; one of {', '.join(views.METRICS)}")
    results: dict[str, dict[str, Any]] = {}
    skipped = 0
    for v in views.worst_per_value(result.values, metric).values():
        x = views.metric_of(v, metric)
        if x is None:
            continue
        if not v.onnx_node:
            skipped += 1
            continue
        entry = results.get(v.onnx_node)
        value = min(x, _BIG)
        diverges = views.is_divergent(v)
        if entry is not None:  # a node with several compared outputs: its worst one
            value = max(value, entry["value"])
            diverges = diverges or "bgColor" in entry
        entry = {"value": value}
        if diverges:
            entry.update(bgColor=DIVERGES_COLOR, textColor="#ffffff")
        results[v.onnx_node] = entry
    line = pass_line if pass_line is not None and pass_line > 0 else 1.0
    thresholds = [{"value": line * k, "bgColor": c} for k, c in _BANDS]
    thresholds.append({"value": _BIG, "bgColor": "#d32f2f"})
    document = {graph: {"results": results, "thresholds": thresholds}}
    return NodeData(document=document, n_nodes=len(results), skipped=skipped)


def graph_name(onnx_path: str | Path | None) -> str:
    """The ONNX file's main graph name, as the ONNX adapter spells its graph id (an unnamed
    graph is ""); DEFAULT_GRAPH if the file cannot be read."""
    if onnx_path is None or not Path(onnx_path).is_file():
        return DEFAULT_GRAPH
    try:
        name = read_onnx(onnx_path, external_data=False).graph.name
    except Exception:  # an unreadable file: the default still matches torch's exports
        return DEFAULT_GRAPH
    return name


def write_node_data(
    result: LayersResult,
    path: str | Path,
    *,
    metric: str = "error_ratio",
    pass_line: float | None = None,
    onnx_path: str | Path | None = None,
) -> NodeData:
    """Write the node data JSON to `path` atomically (a failure is one WriteError line)."""
    data = node_data(result, metric=metric, pass_line=pass_line, graph=graph_name(onnx_path))
    write_output(path, data.to_json() + "\n", what=WHAT)
    return data
