"""A file exported in training mode is said from the file alone, on every run; and a first
divergence at an op that only moves data, with unmatched nodes feeding it, names those nodes
by op and places the error among them.

The model is a real Hugging Face BERT (tiny config, eager attention, hidden dropout 0,
attention dropout 0.1) exported by the legacy exporter with
`training=torch.onnx.TrainingMode.TRAINING`: its two attention-probability Dropouts train
(the five hidden ones have ratio 0 and drop nothing). ONNX Runtime's default optimiser
removes them, so the run passes at the default level and fails at "disable"; the attention
dropout is functional, so --layers first sees the error at the attention's output Reshape.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from parity.pipeline import run_validation
from parity.results import FindingKind
from parity.run.config import RunConfig
from parity.show.findings import run_findings

NAMES = ["input_ids", "attention_mask", "token_type_ids"]  # BertModel.forward's order


@pytest.fixture(scope="module")
def bert_in_train_mode(tmp_path_factory) -> tuple[str, str]:
    import torch
    import transformers

    from tests.helpers.hf_tasks import bert_config, save_text_model

    directory = tmp_path_factory.mktemp("bert_train")
    config = bert_config(
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.1, attn_implementation="eager"
    )
    torch.manual_seed(2)
    model = transformers.BertModel(config)
    save_text_model(model, directory)
    model.train()
    feeds = {n: torch.ones(2, 8, dtype=torch.long) for n in NAMES}
    onnx_path = str(directory / "bert_train.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (),
            onnx_path,
            kwargs=feeds,
            input_names=NAMES,
            output_names=["last_hidden_state", "pooler_output"],
            dynamo=False,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in NAMES},
        )
    return str(directory), onnx_path


def _train_mode(run) -> list[str]:
    return [
        f.text for f in run_findings(run) if f.kind is FindingKind.BUG and "training mode" in f.text
    ]


def test_train_mode_is_a_bug_at_every_level_and_layers_name_the_nodes(bert_in_train_mode):
    directory, onnx_path = bert_in_train_mode
    disabled = run_validation(
        RunConfig(model=f"hf:{directory}", onnx=onnx_path, ort_opt_level="disable", layers=True)
    )
    assert disabled.verdict == "fail"
    said = _train_mode(disabled)
    assert len(said) == 1 and "2 Dropout node(s) have training_mode true" in said[0], said
    assert run_findings(disabled)[0].text == said[0]  # the cause comes first

    # the first divergence is the attention's output Reshape; it only moves data, so the
    # error is placed among the unmatched nodes feeding it, listed by op (the Dropout too)
    first = disabled.layers.first_divergence
    assert first.onnx_op in {"Reshape", "Transpose"} and first.moves_data
    assert dict(first.feeding).get("Dropout") == 1
    where = next(f.text for f in run_findings(disabled) if "starts to diverge" in f.text)
    assert "among the" in where and "1 Dropout" in where and "only moves data" in where
    assert f"at its {first.onnx_op} node" not in where

    from parity.show.grid_figure import verdict_grid

    title = verdict_grid(disabled).layout.title.text
    assert title.startswith("captured calls × outputs"), title  # an encoder: no generate()
    from parity.show.format import format_verdict

    assert "× 1 captured call" in format_verdict(disabled), format_verdict(disabled)  # not step

    default = run_validation(RunConfig(model=f"hf:{directory}", onnx=onnx_path))
    assert default.verdict == "pass"  # ONNX Runtime's optimiser removed the Dropouts
    assert _train_mode(default) == said


def test_batch_norm_in_training_mode_is_counted_and_an_eval_export_is_not(tmp_path: Path):
    import torch

    from parity.load.onnx_model import load_onnx

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    x = torch.randn(2, 3, 8, 8)
    counts = {}
    for mode in ("TRAINING", "EVAL"):
        path = tmp_path / f"{mode}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                net,
                (x,),
                str(path),
                dynamo=False,
                training=getattr(torch.onnx.TrainingMode, mode),
                do_constant_folding=False,
            )
        counts[mode] = load_onnx(path).training
    assert counts == {"TRAINING": (("BatchNormalization", 1),), "EVAL": ()}

    # a BatchNorm in training mode fails at ONNX Runtime's default level too: the words never
    # say that the optimiser removes it (only its Dropouts go)
    from parity import validate

    run = validate(net.eval(), str(tmp_path / "TRAINING.onnx"), inputs={"input.1": x})
    assert run.verdict == "fail"
    [said] = [f.text for f in run_findings(run) if "training mode" in f.text]
    assert "BatchNormalization" in said and "Dropout" not in said, said
    assert "at every level" in said, said


def test_a_dropout_fed_by_its_ratio_constants_alone_names_no_unmatched_nodes(tmp_path: Path):
    """The first divergence at a training Dropout whose only other inputs are its ratio and
    training_mode Constants: no node "feeds it" (the words never count the Constants)."""
    import torch

    from parity import validate
    from parity.layers.birth_words import birth_sentence

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(16, 32)
            self.drop = torch.nn.Dropout(0.3)
            self.b = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.b(self.drop(self.a(x)))

    torch.manual_seed(0)
    net = Net().train()
    path = tmp_path / "drop.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (torch.randn(2, 16),), str(path), dynamo=False, input_names=["x"],
            training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
        )  # fmt: skip
    run = validate(net.eval(), str(path), ort_opt_level="disable", layers=True)
    first = run.layers.first_divergence
    assert (first.onnx_op, first.torch_module, first.feeding) == ("Dropout", "drop", ())
    said = birth_sentence(run.layers)
    assert said is not None and "the error is born here" in said
    assert "unmatched node" not in said, said
