"""The Model Explorer node data opens on the graph Model Explorer's own ONNX adapter builds.

Real parts: a legacy export with a bug planted in one layer, localised by parity.layers, and
the `model-explorer-onnx` adapter converting the same file; the JSON must parse into
`ai-edge-model-explorer`'s node-data classes (strictly: no unknown field) and every key must
be a graph / node id of the adapter's graph.
"""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path

import onnx
import pytest
import torch

from parity.layers import model_explorer as me
from parity.layers.localise import localise
from parity.load.onnx_model import load_onnx
from parity.load.torch_model import load_torch_model
from parity.run.inputs import make_input_sets
from tests.helpers.plant_bug import plant

dacite = pytest.importorskip("dacite")
node_data_builder = pytest.importorskip("model_explorer.node_data_builder")
adapter_main = pytest.importorskip("model_explorer_onnx.main")

SOURCE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(8, 16)
            self.mid = nn.Linear(16, 16)
            self.out = nn.Linear(16, 4)

        def forward(self, x):
            return self.out(torch.relu(self.mid(torch.relu(self.inp(x)))))


    def make():
        torch.manual_seed(0)
        return Net().eval()
    """
)


def _adapter_graphs(path: Path) -> dict[str, set[str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphs = adapter_main.ONNXAdapter().convert(str(path), {})["graphs"]
    return {g.id: {n.id for n in g.nodes} for g in graphs}


@pytest.mark.parametrize("graph_name", ["main_graph", "renamed_graph"])
def test_node_data_keys_are_the_adapter_s_ids_and_parse_strictly(tmp_path, graph_name) -> None:
    (tmp_path / "me_net.py").write_text(SOURCE)
    factory = f"{tmp_path / 'me_net.py'}:make"
    model = load_torch_model(factory).module
    torch.save(model.state_dict(), tmp_path / "w.pt")
    clean = tmp_path / "clean.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 8),), str(clean), dynamo=False, input_names=["x"])
    proto = onnx.load(str(clean))
    proto.graph.name = graph_name
    onnx.save(proto, str(clean))
    buggy = tmp_path / "bug.onnx"
    plant(clean, buggy, "/mid/Gemm", "bias", 0.05)

    torch_model = load_torch_model(factory, weights=tmp_path / "w.pt")
    signature = load_onnx(buggy).signature
    sets = make_input_sets(signature, dims={}, n_sets=1, seed=0)
    result = localise(torch_model, buggy, sets, signature)
    assert result.first_divergence is not None and result.first_divergence.torch_module == "mid"

    written = me.write_node_data(result, tmp_path / "nd.json", pass_line=1e-4, onnx_path=buggy)
    document = json.loads((tmp_path / "nd.json").read_text())
    strict = dacite.Config(strict=True)
    parsed = {
        graph: dacite.from_dict(node_data_builder.GraphNodeData, data, config=strict)
        for graph, data in document.items()
    }
    # Model Explorer's own writer gives back the same results and thresholds (plus defaults)
    again = json.loads(node_data_builder.ModelNodeData(graphsData=parsed).to_json_string())
    for graph, data in document.items():
        assert {k: again[graph][k] for k in data} == data

    graphs = _adapter_graphs(buggy)
    assert list(document) == [graph_name] and graph_name in graphs
    results = document[graph_name]["results"]
    assert written.n_nodes == len(results) >= 3
    assert set(results) <= graphs[graph_name]
    assert results["/mid/Gemm"]["bgColor"] == me.DIVERGES_COLOR
