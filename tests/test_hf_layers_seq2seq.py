"""--layers on one file of an encoder-decoder export (T5, Optimum): the encoder file on the
encoder call, a decoder file on its decoder steps (self- and cross-attention caches rebuilt
from the captured past); a folder or a merged decoder says why nothing was compared."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from parity.layers.result import LayerStatus, Outcome
from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS
from tests.helpers.hf_seq2seq_models import export_optimum, make_seq2seq_dir

pytestmark = pytest.mark.slow  # exports transformers models

WO = "/decoder/block.1/layer.2/DenseReluDense/wo/MatMul"  # Optimum's name of that MatMul


@pytest.fixture(scope="module")
def t5(tmp_path_factory) -> tuple[str, Path]:
    model_dir = make_seq2seq_dir("t5", tmp_path_factory.mktemp("t5"))
    return model_dir, export_optimum("t5", model_dir, tmp_path_factory.mktemp("t5_onnx"))


def _run(model_dir: str, onnx_path: Path):
    options = HfOptions(prompts=PROMPTS, max_new_tokens=3)
    return run_validation(
        RunConfig(model=f"hf:{model_dir}", onnx=str(onnx_path), hf=options, layers=True)
    )


def test_encoder_file_compares_the_encoders_modules(t5):
    model_dir, folder = t5
    run = _run(model_dir, folder / "encoder_model.onnx")
    layers = run.layers
    assert run.verdict == "pass" and layers.matched > 0
    assert layers.first_divergence is None
    assert {v.status for v in layers.values} == {LayerStatus.PASS.value}
    assert "block.1.layer.1.DenseReluDense.wo" in {v.torch_module for v in layers.values}


def test_decoder_with_past_bug_is_born_in_that_blocks_feed_forward(t5, tmp_path):
    model_dir, folder = t5
    model = onnx.load(str(folder / "decoder_with_past_model.onnx"))
    node = next(n for n in model.graph.node if n.name == WO)
    weight = next(t for t in model.graph.initializer if t.name in node.input)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 3, weight.name))
    bug = tmp_path / "decoder_with_past_model.onnx"
    onnx.save(model, str(bug))
    run = _run(model_dir, bug)
    layers = run.layers
    assert run.verdict == "fail"
    steps = sorted(s.index for s in run.input_sets)  # decoder steps 1 and 2
    assert len(steps) == 2
    first = layers.first_divergence
    assert first.torch_module == "decoder.block.1.layer.2.DenseReluDense.wo"
    assert layers.confirmation_of(first).outcome == Outcome.BORN
    assert [v.input_set for v in layers.firsts] == steps
    assert {v.torch_module for v in layers.firsts} == {first.torch_module}


def test_merged_decoder_compares_each_branch_and_names_the_bug_on_every_step(t5, tmp_path):
    """Optimum's merged decoder: one If on use_cache_branch. Each branch is compared as a
    graph of its own, on the steps that run it (step 0: no cache; later steps: the cache);
    the planted weight is shared by both branches, so every step names it."""
    model_dir, folder = t5
    clean = _run(model_dir, folder / "decoder_model_merged.onnx")
    assert clean.verdict == "pass" and clean.layers.first_divergence is None
    assert {v.status for v in clean.layers.values} == {LayerStatus.PASS.value}
    steps = sorted(s.index for s in clean.input_sets)
    assert len(steps) == 3 and {v.input_set for v in clean.layers.values} == set(steps)
    assert "merged decoder" in clean.layers.notes[0]

    model = onnx.load(str(folder / "decoder_model_merged.onnx"))
    branch = model.graph.node[0].attribute[0].g
    node = next(n for n in branch.node if n.name == WO)
    weight = next(t for t in model.graph.initializer if t.name in node.input)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 3, weight.name))
    bug = tmp_path / "decoder_model_merged.onnx"
    onnx.save(model, str(bug))
    layers = _run(model_dir, bug).layers
    first = layers.first_divergence
    assert first.torch_module == "decoder.block.1.layer.2.DenseReluDense.wo"
    assert first.input_set == steps[0]  # decoder step 0: the no-cache branch
    assert layers.confirmation_of(first).outcome == Outcome.BORN
    assert [(v.input_set, v.torch_module) for v in layers.firsts] == [
        (s, first.torch_module) for s in steps
    ]
    assert layers.repro is not None and layers.repro.value.input_set == steps[0]


def test_a_folder_says_which_file_to_give(t5):
    model_dir, folder = t5
    whole = _run(model_dir, folder).layers
    assert whole.matched == 0 and "give one of them with --onnx" in whole.notes[0]
