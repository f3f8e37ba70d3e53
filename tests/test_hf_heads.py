"""hf:DIR is validated with the head it was made for (issue 11): Optimum exports of tiny
random BERTs with a task head, the model class chosen from config.architectures, from the
ONNX outputs when the config does not say, or from --task."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from parity.cli import main
from parity.errors import ModelLoadError, UsageError
from parity.hf.heads import choose_model_class
from parity.hf.summary import judged_summary
from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS
from tests.helpers.hf_tasks import bert_config, optimum_export, save_text_model

pytest.importorskip("optimum.exporters.onnx")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow  # exports transformers models

HEADS = {
    "text-classification": ("BertForSequenceClassification", ["logits"]),
    "token-classification": ("BertForTokenClassification", ["logits"]),
    "question-answering": ("BertForQuestionAnswering", ["start_logits", "end_logits"]),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[str, Path]]:
    """task -> (model directory, Optimum's model.onnx for that task)."""
    made = {}
    for i, (task, (cls_name, _)) in enumerate(HEADS.items()):
        root = tmp_path_factory.mktemp(task)
        torch.manual_seed(i)
        labels = 2 if task == "question-answering" else 3  # QA: start and end
        model = getattr(transformers, cls_name)(bert_config(num_labels=labels))
        directory = save_text_model(model, root / "model")
        made[task] = (directory, optimum_export(directory, root / "onnx", task))
    return made


def _run(directory: str, onnx: Path, **options):
    hf = HfOptions(prompts=PROMPTS, **options)
    return run_validation(RunConfig(model=f"hf:{directory}", onnx=str(onnx), hf=hf))


@pytest.mark.parametrize("task", list(HEADS))
def test_a_head_directory_is_validated_with_its_head(exported, task) -> None:
    directory, onnx = exported[task]
    run = _run(directory, onnx)
    assert run.verdict == "pass", [(c.name, c.status, c.message) for c in run.comparisons]
    cls_name, outputs = HEADS[task]
    assert list(run.output_names) == outputs
    summary = judged_summary(run)
    assert summary["architecture"] == cls_name
    assert (summary["task"], summary["class_chosen_by"]) == (task, "config.architectures")


def test_without_architectures_the_onnx_outputs_choose_the_class(exported, tmp_path) -> None:
    directory, onnx = exported["question-answering"]
    bare = Path(shutil.copytree(directory, tmp_path / "bare"))
    config = json.loads((bare / "config.json").read_text())
    del config["architectures"]
    (bare / "config.json").write_text(json.dumps(config))
    run = _run(str(bare), onnx)
    assert run.verdict == "pass"
    summary = judged_summary(run)
    assert (summary["task"], summary["class_chosen_by"]) == ("question-answering", "ONNX outputs")
    assert summary["architecture"] == "BertForQuestionAnswering"


def test_task_overrides_and_the_cli_says_which_class(exported, tmp_path, capsys) -> None:
    directory, onnx = exported["text-classification"]
    report = tmp_path / "r.json"
    args = ["validate", "--model", f"hf:{directory}", "--onnx", str(onnx), "--json", str(report)]
    assert main([*args, "--task", "sequence-classification"]) == 0  # Optimum's old name
    out = capsys.readouterr().out
    assert "(BertForSequenceClassification, task text-classification from --task)" in out
    assert json.loads(report.read_text())["summary"]["class_chosen_by"] == "--task"
    # the bare model has no logits: the override is what ran (its last_hidden_state takes
    # the ONNX logits' place by order, and no shape fits: a wrong pair, said)
    assert main([*args, "--task", "feature-extraction"]) == 1
    out = capsys.readouterr().out
    assert "(BertModel, task feature-extraction from --task)" in out
    assert "logits SHAPE" in out and "Likely a wrong pair" in out


def test_a_task_the_model_has_no_class_for_is_one_line(exported, capsys) -> None:
    directory, onnx = exported["text-classification"]
    args = ["validate", "--model", f"hf:{directory}", "--onnx", str(onnx)]
    assert main([*args, "--task", "object-detection"]) == 2
    err = capsys.readouterr().err
    assert "has no AutoModelForObjectDetection class" in err and len(err.splitlines()) == 1
    assert main([*args, "--task", "summarise"]) == 2
    assert "not a task hf: validates" in capsys.readouterr().err


def test_choice_rules_without_a_model() -> None:
    gpt2 = transformers.GPT2Config(architectures=["GPT2LMHeadModel"])
    assert choose_model_class(gpt2).task == "text-generation"
    assert choose_model_class(transformers.GPT2Config()).chosen_by == "model type"
    vit = transformers.ViTConfig(architectures=["ViTForImageClassification"])
    assert choose_model_class(vit).auto_class == "AutoModelForImageClassification"
    t5 = transformers.T5Config(architectures=["T5ForConditionalGeneration"])
    assert choose_model_class(t5).kind == "seq2seq"
    pretraining = transformers.BertConfig(architectures=["BertForPreTraining"])
    assert choose_model_class(pretraining).task == "feature-extraction"  # its base model
    segformer = transformers.SegformerConfig(architectures=["SegformerForSemanticSegmentation"])
    assert choose_model_class(segformer).task == "semantic-segmentation"
    bare_bert = transformers.BertConfig()
    logits2 = {"logits": 2}
    assert choose_model_class(bare_bert, onnx_outputs=logits2).task == "text-classification"
    custom = transformers.BertConfig(architectures=["MyBertForTokenClassification"])
    assert choose_model_class(custom).task == "token-classification"  # by its suffix
    with pytest.raises(UsageError):
        choose_model_class(vit, task="no-such-task")
    with pytest.raises(ModelLoadError):
        choose_model_class(vit, task="question-answering")


def test_given_inputs_do_not_apply_to_a_model_that_generates(llama_dir, tmp_path, capsys) -> None:
    """One-forward models take --inputs; a causal LM's inputs are its generate() calls."""
    import numpy as np

    directory = llama_dir
    feeds = tmp_path / "ids.npz"
    np.savez(feeds, input_ids=np.zeros((1, 4), dtype=np.int64))
    assert main(["validate", "--model", f"hf:{directory}", "--inputs", str(feeds)]) == 2
    err = capsys.readouterr().err
    assert "--inputs does not apply to a model that generates" in err
