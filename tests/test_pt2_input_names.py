"""A .pt2 is fed by name whatever the ONNX input order (issue 11).

The pair: a random 2-layer BERT whose forward takes (input_ids, token_type_ids,
attention_mask), saved with torch.export.save, against Optimum's ONNX export of the same
weights, ordered (input_ids, attention_mask, token_type_ids). token_type_ids are random 0/1 and
the attention mask is ones: fed by position, the two would be swapped and the pair fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from parity.cli import main
from parity.load.torch_model import load_torch_model
from parity.pipeline import RunConfig, run_validation
from parity.run.input_binding import BY_NAME, BY_POSITION, NO_NAMES, bind_inputs
from tests.helpers.hf_tasks import bert_config, optimum_export

pytest.importorskip("optimum.exporters.onnx")
transformers = pytest.importorskip("transformers")

SIZES = ("--dim", "batch_size=2", "--dim", "sequence_length=16")
RANGES = {"input_ids": (0, 96), "token_type_ids": (0, 2)}


class Reordered(torch.nn.Module):
    """BERT behind a forward whose arguments are ordered unlike Optimum's ONNX inputs."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, token_type_ids, attention_mask):
        out = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        return {"last_hidden_state": out.last_hidden_state}  # what Optimum exports


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pt2_names")
    torch.manual_seed(0)
    bert = transformers.BertModel(bert_config()).eval()
    bert.save_pretrained(root / "bert")
    onnx_path = optimum_export(str(root / "bert"), root / "onnx", "feature-extraction")
    ids = torch.randint(0, 96, (2, 16))
    with torch.no_grad():
        auto = {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}
        program = torch.export.export(
            Reordered(bert).eval(),
            (ids, torch.zeros_like(ids), torch.ones_like(ids)),
            dynamic_shapes=(auto, auto, auto),
            strict=False,
        )
    pt2 = root / "bert.pt2"
    torch.export.save(program, pt2)
    return pt2, onnx_path


def test_the_pt2_knows_its_positional_names_and_the_onnx_orders_them_otherwise(pair) -> None:
    import onnx

    pt2, onnx_path = pair
    model = load_torch_model(str(pt2))
    assert model.positional_names == ("input_ids", "token_type_ids", "attention_mask")
    inputs = [i.name for i in onnx.load(str(onnx_path)).graph.input]
    assert inputs == ["input_ids", "attention_mask", "token_type_ids"]


def test_a_pt2_is_fed_by_name_against_optimums_input_order(pair) -> None:
    pt2, onnx_path = pair
    run = run_validation(
        RunConfig(model=str(pt2), onnx=str(onnx_path), int_ranges=RANGES, n_input_sets=2)
    )
    assert run.verdict == "pass", [(c.name, c.stats.max_abs) for c in run.comparisons]
    assert run.provenance.inputs_by == BY_NAME
    worst = max(c.stats.max_abs for c in run.comparisons)
    assert worst < 1e-4


def test_fed_by_position_the_same_pair_fails(pair) -> None:
    """The control: the binding is what makes the pair pass (a swap is visible)."""
    pt2, onnx_path = pair
    model = load_torch_model(str(pt2))
    feeds = {"input_ids": 1, "attention_mask": 2, "token_type_ids": 3}
    named = bind_inputs(feeds, keyword=model.parameter_names, positional=model.positional_names)
    assert named.args == (1, 3, 2) and named.by == BY_NAME
    blind = bind_inputs(feeds)
    assert blind.args == (1, 2, 3) and (blind.by, blind.note) == (BY_POSITION, NO_NAMES)


def test_cli_says_when_inputs_went_by_position(tmp_path, capsys) -> None:
    """A forward(*xs) has no input names: by position, and the terminal and JSON say so."""
    (tmp_path / "star.py").write_text(
        "import torch\n"
        "class Star(torch.nn.Module):\n"
        "    def forward(self, *xs):\n"
        "        return xs[0] - 2 * xs[1]\n"
        "def make():\n"
        "    return Star()\n"
    )
    x = torch.randn(2, 3)

    class Star(torch.nn.Module):
        def forward(self, a, b):
            return a - 2 * b

    onnx_path = tmp_path / "star.onnx"
    torch.onnx.export(Star(), (x, x), str(onnx_path), input_names=["a", "b"], dynamo=False)
    report = tmp_path / "report.json"
    spec = f"{tmp_path / 'star.py'}:make"
    code = main(["validate", "--model", spec, "--onnx", str(onnx_path), "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"inputs fed by position ({NO_NAMES})" in out
    data = json.loads(report.read_text())
    assert data["input_matching"] == {"by": BY_POSITION, "note": NO_NAMES}


def test_cli_json_says_by_name(pair, tmp_path, capsys) -> None:
    pt2, onnx_path = pair
    report = tmp_path / "report.json"
    args = ["--int-range", "input_ids=0:96", "--int-range", "token_type_ids=0:2", *SIZES]
    code = main(
        ["validate", "--model", str(pt2), "--onnx", str(onnx_path), *args, "--json", str(report)]
    )
    assert code == 0, capsys.readouterr().out
    assert "inputs fed by position" not in capsys.readouterr().out
    assert json.loads(report.read_text())["input_matching"] == {"by": BY_NAME, "note": ""}
