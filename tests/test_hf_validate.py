"""End to end: tiny transformers models (random weights, in-code tokenizers) saved to tmp
dirs, greedy generate() captured, exported with Parity's own exporter, validated per step.

Exports are the slow part (several seconds each), so every model directory and every run is
built once per module and shared by the tests that read it.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import transformers
from onnx import TensorProto, helper

from parity.errors import ExportError
from parity.hf.steps_text import format_steps_table
from parity.hf.summary import judged_summary, masked_positions_json, steps_json
from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS, SPECIAL, make_tokenizer, save_model

pytestmark = pytest.mark.slow  # exports transformers models


def run_hf_validation(
    model: str,
    *,
    options: HfOptions | None = None,
    onnx: str | None = None,
    export_path: str | None = None,
):
    """An hf: run through the one loop (parity.hf.validate, its own orchestrator, is gone)."""
    options = options or HfOptions()
    if export_path is not None:
        options = dataclasses.replace(options, export_path=export_path)
    return run_validation(RunConfig(model=model, onnx=onnx, hf=options))


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> str:
    config = transformers.GPT2Config(
        vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64, **SPECIAL
    )
    torch.manual_seed(1)
    return save_model(transformers.GPT2LMHeadModel(config), tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def llama_run(llama_dir, tmp_path_factory):
    """Two prompts (a left-padded batch), own export, 3 steps: the module's main run."""
    export = tmp_path_factory.mktemp("llama_export") / "model.onnx"
    return run_hf_validation(
        f"hf:{llama_dir}",
        options=HfOptions(prompts=PROMPTS, max_new_tokens=3),
        export_path=str(export),
    )


def test_own_export_validates_every_step_of_a_left_padded_batch(llama_run):
    assert llama_run.verdict == "pass"
    labels = [s.label for s in llama_run.input_sets]
    assert labels == ["step 1 · prefill", "step 2 · decode", "step 3 · decode"]
    summary = judged_summary(llama_run)
    assert summary["export"]["status"] == "OK" and summary["export"]["seconds"] > 0
    assert (summary["steps_ok"], summary["steps_total"]) == (3, 3)
    assert summary["n_calls"] == 3 and summary["left_padded"] is True
    assert summary["weights"] == "trained"
    for phase in ("load", "capture", "export", "onnxruntime", "compare"):
        assert summary["timings"][phase] is not None


def test_each_step_compares_logits_and_every_present_key_value(llama_run):
    names = set(llama_run.output_names)
    assert names == {"logits"} | {f"present.{i}.{k}" for i in (0, 1) for k in ("key", "value")}
    assert len(llama_run.comparisons) == 3 * 5
    # the cache grows by one position per decode step; the prefill cache is empty
    past = [s.feeds["past_key_values.0.key"].shape[2] for s in llama_run.input_sets]
    assert past[0] == 0 and past[2] == past[1] + 1
    # torch kept only the last logits position: the ONNX logits are compared there
    logits = llama_run.comparison(0, "logits")
    assert logits.ref_shape == logits.onnx_shape == (2, 1, 96)


def test_own_export_makes_sequence_and_past_dynamic_and_names_them(llama_run):
    dims = {spec.name: spec.shape for spec in llama_run.signature.inputs}
    assert dims["input_ids"] == (2, "sequence_length")
    assert dims["past_key_values.1.value"][2] == "past_sequence_length"
    assert judged_summary(llama_run)["export"]["dynamic"] == {
        "batch": False,
        "sequence_length": True,
        "past_sequence_length": True,
    }


def test_left_padding_is_excluded_and_reported_apart(llama_run):
    masked = masked_positions_json(llama_run)
    assert masked, "a left-padded prefill must report masked positions"
    assert {m["input_set"] for m in masked} == {0, 1, 2}
    assert judged_summary(llama_run)["masked"]["n_elements"] == sum(m["n_masked"] for m in masked)
    table = format_steps_table(llama_run)
    assert "padding" in table and "never attended" in table


def test_steps_table_has_one_row_per_step_and_the_summary(llama_run):
    table = format_steps_table(llama_run)
    rows = [line for line in table.splitlines() if line[:1].isdigit()]
    assert [r.split()[1] for r in rows] == ["prefill", "decode", "decode"]
    assert all(" pass " in r for r in rows)
    assert "export:    OK" in table and "steps OK:  3/3" in table


def test_optimum_named_file_given_with_onnx_validates_unseen_steps(llama_run, llama_dir, tmp_path):
    # An "Optimum" file: Optimum's names, its graph inputs in another order, exported
    # earlier from other calls; validated on new prompts and more steps than it saw.
    model = onnx.load(llama_run.onnx)
    inputs = list(model.graph.input)
    del model.graph.input[:]
    model.graph.input.extend(inputs[::-1])
    path = tmp_path / "optimum.onnx"
    onnx.save(model, path)
    run = run_hf_validation(
        f"hf:{llama_dir}",
        options=HfOptions(prompts=("the sun is", "it rains , what"), max_new_tokens=4),
        onnx=str(path),
    )
    assert run.verdict == "pass"
    assert judged_summary(run)["export"]["status"].startswith("not run")
    assert len(run.input_sets) == 4


def test_decode_only_bug_fails_decode_steps_and_the_run_says_which(llama_run, llama_dir, tmp_path):
    path = tmp_path / "off_by_one.onnx"
    _shift_positions_when_cache_is_not_empty(llama_run.onnx, path)
    run = run_hf_validation(
        f"hf:{llama_dir}", options=HfOptions(prompts=PROMPTS, max_new_tokens=3), onnx=str(path)
    )
    assert run.verdict == "fail"
    steps = {s["label"]: s["ok"] for s in steps_json(run)}
    assert steps == {"step 1 · prefill": True, "step 2 · decode": False, "step 3 · decode": False}
    summary = judged_summary(run)
    assert summary["failed_steps"] == ["step 2 · decode", "step 3 · decode"]
    assert not run.comparison(1, "logits").status.passed
    table = format_steps_table(run)
    assert "steps OK:  1/3 — failing: step 2 · decode, step 3 · decode" in table


def _shift_positions_when_cache_is_not_empty(src: str, dst: Path) -> None:
    """position_ids + (past length > 0): a bug only the cache path (decode) exercises."""
    model = onnx.load(src)
    graph = model.graph
    for node in graph.node:
        node.input[:] = ["position_ids_bug" if n == "position_ids" else n for n in node.input]
    zero = helper.make_tensor("bug_zero", TensorProto.INT64, [1], [0])
    graph.initializer.append(zero)
    nodes = [
        helper.make_node("Shape", ["past_key_values.0.key"], ["bug_past_len"], start=2, end=3),
        helper.make_node("Greater", ["bug_past_len", "bug_zero"], ["bug_has_past"]),
        helper.make_node("Cast", ["bug_has_past"], ["bug_shift"], to=TensorProto.INT64),
        helper.make_node("Add", ["position_ids", "bug_shift"], ["position_ids_bug"]),
    ]
    for i, node in enumerate(nodes):
        graph.node.insert(i, node)
    onnx.save(model, dst)


def test_second_family_gpt2_validates_a_single_prompt(gpt2_dir, tmp_path):
    run = run_hf_validation(
        f"hf:{gpt2_dir}",
        options=HfOptions(prompts=("hello world the",), max_new_tokens=2),
        export_path=str(tmp_path / "gpt2.onnx"),
    )
    assert run.verdict == "pass"
    summary = judged_summary(run)
    assert summary["model_type"] == "gpt2" and summary["left_padded"] is False
    assert [s["phase"] for s in steps_json(run)] == ["prefill", "decode"]
    assert masked_positions_json(run) == []


def test_cli_random_weights_with_one_layer_override_exports_and_passes(llama_dir, tmp_path):
    import json

    from parity.cli import main

    export, report = tmp_path / "one_layer.onnx", tmp_path / "report.json"
    argv = ["validate", "--model", f"hf:{llama_dir}", "--prompt", PROMPTS[0]]
    argv += ["--max-new-tokens", "2", "--random-weights", "--config-override"]
    argv += ["num_hidden_layers=1", "--export-path", str(export), "--json", str(report)]
    assert main(argv) == 0
    data = json.loads(report.read_text())
    assert {o["name"] for o in data["outputs"]} == {"logits", "present.0.key", "present.0.value"}
    summary = data["summary"]
    assert summary["weights"] == "random"
    assert summary["config_overrides"] == {"num_hidden_layers": 1}
    assert summary["export"]["status"] == "OK" and summary["export"]["path"] == str(export)
    assert export.is_file()


def test_own_export_without_export_path_is_removed_when_the_run_ends(llama_dir):
    # Before: every hf: run without --export-path left its export in a temp folder (GBs
    # per run for a real LLM).
    run = run_hf_validation(f"hf:{llama_dir}", options=HfOptions(max_new_tokens=1))
    assert run.verdict == "pass"
    assert judged_summary(run)["export"]["status"] == "OK"
    assert not Path(run.onnx).parent.exists()


def test_export_that_fails_raises_export_error_with_the_exporters_cause(
    llama_dir, monkeypatch, tmp_path
):
    # Force it: the MLP gains a term through torch.linalg.svdvals, which runs in eager
    # torch but has no ONNX translation, so torch.onnx.export really fails.
    from transformers.models.llama import modeling_llama

    original = modeling_llama.LlamaMLP.forward

    def forward(self, x):
        y = original(self, x)
        return y + 0 * torch.linalg.svdvals(y).sum()

    monkeypatch.setattr(modeling_llama.LlamaMLP, "forward", forward)
    with pytest.raises(ExportError) as info:
        run_hf_validation(
            f"hf:{llama_dir}",
            options=HfOptions(max_new_tokens=1),
            export_path=str(tmp_path / "never.onnx"),
        )
    error = info.value
    assert str(error).startswith("export: FAILED")
    assert "svd" in str(error)
    assert error.summary["export"]["status"] == "FAILED"
    assert error.seconds is not None and "svd" in error.cause
    assert "\n" not in str(error)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> str:
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
    directory = tmp_path_factory.mktemp("bert")
    transformers.BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def test_encoder_feature_extraction_goes_through_the_same_spec(bert_dir, tmp_path):
    run = run_hf_validation(
        f"hf:{bert_dir}", options=HfOptions(prompts=PROMPTS), export_path=str(tmp_path / "b.onnx")
    )
    assert run.verdict == "pass"
    assert [s.label for s in run.input_sets] == ["step 1 · forward"]
    assert set(run.output_names) == {"last_hidden_state", "pooler_output"}
    assert "token_type_ids" in run.input_sets[0].feeds
    summary = judged_summary(run)
    assert summary["kind"] == "encoder" and summary["padding"] == "right"
    # the short prompt's padded rows are reported apart, not judged
    assert [m["output"] for m in masked_positions_json(run)] == ["last_hidden_state"]
    assert "one forward each, no generate()" in format_steps_table(run)
    assert "(BertModel, task feature-extraction from config.architectures)" in (
        format_steps_table(run)
    )
    assert (summary["task"], summary["class_chosen_by"]) == (
        "feature-extraction",
        "config.architectures",
    )


def test_missing_directory_is_a_one_line_model_load_error(tmp_path):
    from parity.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="no such directory"):
        run_hf_validation(f"hf:{tmp_path / 'nope'}")


def test_unknown_config_override_is_a_usage_error(llama_dir):
    from parity.errors import UsageError

    with pytest.raises(UsageError, match="no field 'num_layerz'"):
        run_hf_validation(f"hf:{llama_dir}", options=HfOptions(config_overrides={"num_layerz": 1}))


def test_tokenizer_is_required_for_prompts(llama_dir, tmp_path):
    from parity.errors import ModelLoadError

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(Path(llama_dir) / "config.json", bare / "config.json")
    with pytest.raises(ModelLoadError, match="tokenizer"):
        run_hf_validation(f"hf:{bare}", options=HfOptions(random_weights=True))


def test_captured_prefill_matches_a_fresh_torch_forward(llama_run, llama_dir):
    # The cache is copied at capture: later decode steps must not have changed step 1.
    auto = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(llama_dir, use_kernels=False).eval()
    feeds = llama_run.input_sets[0].feeds
    with torch.no_grad():
        out = model(
            input_ids=torch.from_numpy(feeds["input_ids"]),
            attention_mask=torch.from_numpy(feeds["attention_mask"]),
            position_ids=torch.from_numpy(feeds["position_ids"]),
            use_cache=True,
        )
    fresh = out.past_key_values.layers[1].keys.numpy()
    np.testing.assert_allclose(llama_run.ref_outputs[0].arrays["present.1.key"], fresh, atol=1e-6)
    np.testing.assert_allclose(
        llama_run.ref_outputs[0].arrays["logits"], out.logits[:, -1:].numpy(), atol=1e-6
    )


def test_cli_validates_hf_dir_against_a_given_onnx_and_writes_the_summary(
    llama_run, llama_dir, tmp_path, capsys
):
    import json

    from parity.cli import main

    report = tmp_path / "report.json"
    argv = ["validate", "--model", f"hf:{llama_dir}", "--onnx", llama_run.onnx]
    argv += ["--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--max-new-tokens", "2"]
    assert main([*argv, "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["summary"]["steps_ok"] == data["summary"]["steps_total"] == 2
    assert [s["label"] for s in data["input_sets"]] == ["step 1 · prefill", "step 2 · decode"]

    bug = tmp_path / "bug.onnx"
    _shift_positions_when_cache_is_not_empty(llama_run.onnx, bug)
    argv[4] = str(bug)
    assert main(argv) == 1
    assert "step 2 · decode" in capsys.readouterr().out


def test_real_optimum_export_validates(llama_dir, tmp_path):
    from optimum.exporters import onnx as exporters  # the dev extra installs optimum-onnx

    out = tmp_path / "optimum"
    exporters.main_export(llama_dir, output=out, task="text-generation-with-past")
    run = run_hf_validation(
        f"hf:{llama_dir}",
        options=HfOptions(prompts=PROMPTS, max_new_tokens=3),
        onnx=str(out / "model.onnx"),
    )
    assert run.verdict == "pass"
    assert run.signature.input_names[:3] == ("input_ids", "attention_mask", "position_ids")
    assert [s["ok"] for s in steps_json(run)] == [True, True, True]


def test_views_and_saved_runs_show_what_the_verdict_judged_padding_excluded(llama_run, tmp_path):
    # Before: the verdict excluded padding but the kept arrays were unmasked, so Inspect and
    # the HTML report showed a worst element at a padding position (0.257 for a present
    # key/value whose stats said 7.45e-8). Now the masks travel with the run, saved or not.
    from parity.reports.saved_run import load_run, save_run
    from parity.show import reductions as ins

    reopened = load_run(save_run(llama_run, tmp_path / "llm.parity.npz"))
    excluded = [c for c in llama_run.comparisons if c.n_excluded]
    assert excluded, "a left-padded batch must exclude padding"
    padding_was_worst = 0
    for run in (llama_run, reopened):
        for c in excluded:
            pos = [s.index for s in run.input_sets].index(c.input_set)
            ref = run.ref_outputs[pos].arrays[c.name]
            onnx = run.onnx_outputs[pos].arrays[c.name]
            mask = np.broadcast_to(run.exclusion(c.input_set, c.name), ref.shape)
            assert int(mask.sum()) == c.n_excluded
            worst = ins.worst_elements(ref, onnx, k=5, exclude=run.exclusion(c.input_set, c.name))
            assert worst.rows[0].abs_error == c.stats.max_abs  # the verdict's worst, exactly
            assert worst.rows[0].index == c.stats.worst_index
            assert not any(mask[w.index] for w in worst.rows)
            assert worst.n_excluded == c.n_excluded
            hist = ins.error_histogram(ref, onnx, exclude=run.exclusion(c.input_set, c.name))
            assert hist.n_total == c.n_judged and (hist.max_abs or 0.0) == c.stats.max_abs
            spec = ins.default_slice(ref.shape, at=c.stats.worst_index)
            view = ins.slice_view(ref, onnx, spec, exclude=run.exclusion(c.input_set, c.name))
            assert np.isnan(view.values).sum() == ins.take_slice(mask, spec).sum()
            unmasked = ins.worst_elements(ref, onnx, k=1).rows[0]
            padding_was_worst += bool(mask[unmasked.index])
    assert padding_was_worst, "some unmasked view must have shown a padding position as worst"
