"""--layers on hf: runs: the captured generate() calls (prefill and each decode step with its
KV cache) replayed through the torch model's hooked modules, every step's intermediate values
compared with ONNX Runtime's, on Optimum's legacy export and on Parity's own dynamo export.

A tiny Llama (2 layers, random weights) is exported once per module by each exporter; the
planted bug triples layer 1's MLP down_proj weight in the ONNX initializer feeding it."""

from __future__ import annotations

import html as html_lib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from parity.layers.result import LayerStatus, Outcome
from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS

pytestmark = pytest.mark.slow  # exports transformers models

BUGGED_MODULE = "model.layers.1.mlp.down_proj"
STEPS = 3


def _run(model_dir: str, onnx_path: str | None, *, export_path: str | None = None, **kw):
    options = HfOptions(prompts=PROMPTS, max_new_tokens=STEPS, export_path=export_path)
    return run_validation(
        RunConfig(model=f"hf:{model_dir}", onnx=onnx_path, hf=options, layers=True, **kw)
    )


LEGACY_SCOPE = "/model/layers.1/mlp/down_proj/"  # Optimum's node names
DYNAMO_SCOPE = "'model.model.layers.1.mlp.down_proj'"  # Parity's wrapper holds it as .model


def _triple_down_proj(src: Path, dst: Path) -> str:
    """Copy `src` with the weight of layer 1's MLP down_proj MatMul tripled; returns the
    initializer's name (anonymous in Optimum's export: onnx::MatMul_NNN)."""
    model = onnx.load(str(src))
    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}

    def in_scope(node: onnx.NodeProto) -> bool:
        meta = {p.key: p.value for p in node.metadata_props}
        scopes = meta.get("pkg.torch.onnx.name_scopes", "")
        return node.name.startswith(LEGACY_SCOPE) or DYNAMO_SCOPE in scopes

    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm") or not in_scope(node):
            continue
        for name in node.input:
            feeder = producers.get(name)
            if feeder is not None and feeder.op_type == "Transpose":
                name = feeder.input[0]
            if name in inits:
                tensor = inits[name]
                tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * 3, name))
                onnx.save(model, str(dst))
                return name
    raise AssertionError("no MatMul weight found in layer 1's MLP down_proj")


@pytest.fixture(scope="module")
def optimum_file(llama_dir, tmp_path_factory) -> Path:
    from optimum.exporters import onnx as exporters  # the dev extra installs optimum-onnx

    out = tmp_path_factory.mktemp("optimum_layers")
    exporters.main_export(llama_dir, output=out, task="text-generation-with-past")
    return out / "model.onnx"


@pytest.fixture(scope="module")
def own_run(llama_dir, tmp_path_factory):
    """Parity's own export, validated with --layers in the same run."""
    path = tmp_path_factory.mktemp("own_layers") / "model.onnx"
    return _run(llama_dir, None, export_path=str(path))


def _assert_clean(run) -> None:
    layers = run.layers
    assert run.verdict == "pass"
    assert layers.matched > 0
    assert {v.input_set for v in layers.values} == set(range(STEPS))
    assert layers.first_divergence is None
    assert {v.status for v in layers.values} == {LayerStatus.PASS.value}
    assert any(v.torch_module == BUGGED_MODULE for v in layers.values)


def _assert_names_the_bug(run) -> None:
    layers = run.layers
    assert run.verdict == "fail"
    first = layers.first_divergence
    assert first is not None and first.torch_module == BUGGED_MODULE
    assert first.input_set == 0  # the prefill: the first step
    assert layers.confirmation_of(first).outcome == Outcome.BORN
    # every step names the same module, each confirmed on its own exact inputs
    assert [(v.input_set, v.torch_module) for v in layers.firsts] == [
        (s, BUGGED_MODULE) for s in range(STEPS)
    ]
    assert all(layers.confirmation_of(v).outcome == Outcome.BORN for v in layers.firsts)
    # what follows it inherits the error: carried, not a second birth
    later = [v for v in layers.for_set(0) if v.order > first.order]
    assert later and all(v.status == LayerStatus.CARRIED.value for v in later)
    block = json.loads(json.dumps(layers.to_json()))
    assert block["first_divergence"]["torch_module"] == BUGGED_MODULE
    assert block["first_divergence"]["confirmation"] == "born"
    assert [f["input_set"] for f in block["first_divergence_by_input_set"]] == [0, 1, 2]


def test_optimum_clean_export_compares_every_step_and_flags_nothing(llama_dir, optimum_file):
    run = _run(llama_dir, str(optimum_file))
    _assert_clean(run)
    assert run.layers.matching == "module boundaries"
    value = next(v for v in run.layers.values if v.torch_module == BUGGED_MODULE)
    assert value.onnx_node == "/model/layers.1/mlp/down_proj/MatMul"


def test_optimum_planted_mlp_bug_is_born_in_that_layers_mlp(llama_dir, optimum_file, tmp_path):
    bug = tmp_path / "bug.onnx"
    _triple_down_proj(optimum_file, bug)
    run = _run(llama_dir, str(bug))
    _assert_names_the_bug(run)


def test_own_export_clean_flags_nothing(own_run):
    _assert_clean(own_run)
    assert own_run.layers.matching == "module boundaries"
    # the wrapper's scopes are spelled as transformers' own module paths
    assert all(not (v.torch_module or "").startswith("model.model.") for v in own_run.layers.values)


def test_own_export_planted_mlp_bug_is_born_in_that_layers_mlp(llama_dir, own_run, tmp_path):
    bug = tmp_path / "bug.onnx"
    _triple_down_proj(Path(own_run.onnx), bug)
    run = _run(llama_dir, str(bug))
    _assert_names_the_bug(run)


def test_cli_writes_the_steps_first_divergences_and_a_repro(
    llama_dir, optimum_file, tmp_path, capsys
):
    from parity.cli import main

    bug = tmp_path / "bug.onnx"
    _triple_down_proj(optimum_file, bug)
    report, repro = tmp_path / "report.json", tmp_path / "repro"
    argv = ["validate", "--model", f"hf:{llama_dir}", "--onnx", str(bug), "--layers"]
    argv += ["--prompt", PROMPTS[0], "--max-new-tokens", "2", "--json", str(report)]
    html, saved = tmp_path / "report.html", tmp_path / "run.parity"
    argv += ["--html", str(html), "--save-run", str(saved)]
    assert main([*argv, "--repro", str(repro)]) == 1
    out = capsys.readouterr().out
    assert "first divergence per input set:" in out
    assert f"step 2 · decode: '{BUGGED_MODULE}'" in out
    data = json.loads(report.read_text())
    assert data["layers"]["first_divergence"]["torch_module"] == BUGGED_MODULE
    page = html.read_text()
    assert BUGGED_MODULE in page
    # the HTML report lists each step's first divergence as the terminal does
    assert "First divergence per input set:" in page
    assert html_lib.escape(f"step 2 · decode: '{BUGGED_MODULE}'") in page
    from parity.reports.saved_run import load_run

    reopened = load_run(saved).layers
    assert reopened.first_divergence.torch_module == BUGGED_MODULE
    assert [v.input_set for v in reopened.firsts] == [0, 1]
    cut = onnx.load(str(repro / "model.onnx"))
    assert [n.op_type for n in cut.graph.node][-1] == "MatMul"  # down_proj, and what feeds it
    expected = numpy_helper.to_array(
        onnx.load_tensor(str(repro / "test_data_set_0" / "output_0.pb"))
    )
    assert np.isfinite(expected).all()


def test_encoder_own_and_optimum_exports_compare_the_same_modules(tmp_path):
    """A one-forward model (BERT, feature extraction): Parity's dynamo export (its wrapper's
    `model.` scope dropped) and Optimum's legacy export both pair with BertModel's modules."""
    import torch
    import transformers
    from optimum.exporters import onnx as exporters

    from tests.helpers.hf_models import make_tokenizer

    tokenizer = make_tokenizer(
        specials=("[PAD]", "[UNK]", "[CLS]", "[SEP]"),
        decoder=False,
        input_names=("input_ids", "token_type_ids", "attention_mask"),
    )
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(2)
    directory = tmp_path / "bert"
    transformers.BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    exporters.main_export(str(directory), output=tmp_path / "optimum", task="feature-extraction")
    options = HfOptions(prompts=PROMPTS, export_path=str(tmp_path / "own.onnx"))
    modules = []
    for onnx_path in (None, str(tmp_path / "optimum" / "model.onnx")):
        run = run_validation(
            RunConfig(model=f"hf:{directory}", onnx=onnx_path, hf=options, layers=True)
        )
        assert run.verdict == "pass" and run.layers.matched > 0
        assert run.layers.first_divergence is None
        modules.append({v.torch_module for v in run.layers.values})
    shared = modules[0] & modules[1]
    assert "encoder.layer.1.output.dense" in shared


def test_merged_decoder_compares_both_branches_and_names_the_bug(llama_dir, optimum_file, tmp_path):
    """A merged decoder (one If on use_cache_branch, made by Optimum's merge_decoders): the
    prefill runs the no-cache branch, the decode steps the cache branch; each branch is
    compared as a graph of its own and both name the planted MLP weight."""
    from optimum.onnx import merge_decoders

    bug = tmp_path / "bug.onnx"
    _triple_down_proj(optimum_file, bug)
    merged = tmp_path / "decoder_model_merged.onnx"
    merge_decoders(str(bug), str(bug), save_path=str(merged))
    assert "use_cache_branch" in {i.name for i in onnx.load(str(merged)).graph.input}
    run = _run(llama_dir, str(merged))
    _assert_names_the_bug(run)
    assert "merged decoder" in run.layers.notes[0]
