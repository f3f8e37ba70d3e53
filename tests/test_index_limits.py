"""Issue 53: ranges from the graph. An integer input that feeds a Gather on a constant table
(an embedding of 29 rows) is generated inside the table, said in the input set's label, for
legacy and dynamo exports; ids the user gives past it make torch's IndexError name the input
and --int-range."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from parity import validate
from parity.errors import ModelRunError
from parity.load.index_limits import index_limits


class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(29, 8)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids))


def make_tagger() -> torch.nn.Module:
    torch.manual_seed(0)
    return Tagger().eval()


@pytest.fixture(scope="module", params=[False, True], ids=["legacy", "dynamo"])
def export(request, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ids") / "tagger.onnx"
    ids = torch.randint(0, 29, (2, 7))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if request.param:
            b, t = torch.export.Dim("b"), torch.export.Dim("t")
            torch.onnx.export(make_tagger(), (ids,), str(path), dynamo=True,
                              input_names=["ids"], output_names=["y"],
                              dynamic_shapes={"ids": {0: b, 1: t}})  # fmt: skip
        else:
            torch.onnx.export(make_tagger(), (ids,), str(path), dynamo=False,
                              input_names=["ids"], output_names=["y"],
                              dynamic_axes={"ids": {0: "b", 1: "t"}})  # fmt: skip
    return path


def test_the_graph_gives_the_table_size(export: Path) -> None:
    (limit,) = index_limits(onnx.load(str(export)))
    assert (limit.name, limit.size) == ("ids", 29)


def test_generated_ids_stay_inside_the_table_and_the_label_says_so(export: Path) -> None:
    run = validate(make_tagger(), str(export))
    assert run.passed
    for s in run.input_sets:
        assert int(s.feeds["ids"].max()) < 29
        assert "ids in [0, 29)" in s.label and "rows of the Gather" in s.label


def test_ids_past_the_table_name_the_input_and_the_flag(export: Path) -> None:
    ids = np.full((1, 4), 50, dtype=np.int64)
    with pytest.raises(ModelRunError) as caught:
        validate(make_tagger(), str(export), inputs={"ids": ids})
    said = caught.value.message
    assert "IndexError" in said and "ids holds [50, 50]" in said and "--int-range ids=" in said
