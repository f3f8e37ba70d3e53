"""Encoder-decoder models (T5, BART, Whisper) validated step by step against Optimum exports.

Each family: a 2-layer d_model-32 random-weight model saved in a tmp dir, exported once per
module by Optimum (all four files), the unmerged layout being the same folder without the
merged decoder. Greedy generate() is captured (encoder + 3 decoder calls) and every call is
run on the file that computes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from parity.errors import InputError, UsageError
from parity.hf.steps_text import format_steps_table
from parity.hf.summary import judged_summary, steps_json
from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS
from tests.helpers.hf_seq2seq_models import (
    FAMILIES,
    FRAMES,
    MEL_BINS,
    export_optimum,
    make_seq2seq_dir,
    unmerged_copy,
)

pytestmark = pytest.mark.slow  # exports transformers models

LABELS = ["encoder", "decoder step 0", "decoder step 1", "decoder step 2"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, tuple[str, Path]]:
    """family -> (model dir, Optimum export folder), made once for the module."""
    made = {}
    for family in FAMILIES:
        model_dir = make_seq2seq_dir(family, tmp_path_factory.mktemp(family))
        folder = export_optimum(family, model_dir, tmp_path_factory.mktemp(f"{family}_onnx"))
        made[family] = (model_dir, folder)
    return made


def validate(model_dir: str, onnx_path: Path | str, **config) -> object:
    options = config.pop("hf", None) or HfOptions(prompts=PROMPTS, max_new_tokens=3)
    return run_validation(
        RunConfig(model=f"hf:{model_dir}", onnx=str(onnx_path), hf=options, **config)
    )


def _names(run, label: str) -> set[str]:
    index = next(s.index for s in run.input_sets if s.label == label)
    return {c.name for c in run.comparisons if c.input_set == index}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["merged", "unmerged"])
def test_optimum_folder_validates_every_generation_step(exports, family, layout, tmp_path):
    model_dir, folder = exports[family]
    if layout == "unmerged":
        folder = unmerged_copy(folder, tmp_path / "unmerged")
    run = validate(model_dir, folder)
    assert run.verdict == "pass", format_steps_table(run)
    assert [s.label for s in run.input_sets] == LABELS
    assert [s["ok"] for s in steps_json(run)] == [True] * 4
    summary = judged_summary(run)
    assert (summary["steps_ok"], summary["steps_total"]) == (4, 4)
    assert summary["n_encoder"] == 1 and summary["n_prefill"] == 1 and summary["n_decode"] == 2
    files = {f["file"]: f["steps"] for f in summary["files"]}
    if layout == "merged":
        assert files == {"decoder_model_merged.onnx": LABELS[1:], "encoder_model.onnx": LABELS[:1]}
    else:
        assert files == {
            "decoder_with_past_model.onnx": LABELS[2:],
            "decoder_model.onnx": LABELS[1:2],
            "encoder_model.onnx": LABELS[:1],
        }
    assert summary["not_validated"] == []
    layers = range(2)
    cross = {f"present.{i}.encoder.{k}" for i in layers for k in ("key", "value")}
    own = {f"present.{i}.decoder.{k}" for i in layers for k in ("key", "value")}
    assert _names(run, "encoder") == {"last_hidden_state"}
    # step 0 computes the cross-attention keys/values; later steps read them from the past
    assert _names(run, "decoder step 0") == {"logits"} | own | cross
    assert _names(run, "decoder step 2") == {"logits"} | own
    # every decoder call ran on real past: step k's past holds k positions
    assert [s.past_length for s in run.generation.steps] == [0, 0, 1, 2]
    table = format_steps_table(run)
    assert "decoder step 2" in table and "encoder_model.onnx" in table


def test_text_encoder_padding_is_excluded_where_nothing_attends(exports):
    model_dir, folder = exports["t5"]
    run = validate(model_dir, folder)
    assert judged_summary(run)["padding"] == "right"
    excluded = {(c.input_set, c.name): c.n_excluded for c in run.comparisons if c.n_excluded}
    pad = 10 - 2  # "hello world" is 2 tokens in a batch padded to 10
    assert excluded[(0, "last_hidden_state")] == pad * 32
    assert excluded[(1, "present.0.encoder.key")] == pad * 4 * 8  # heads x head_dim
    assert not any(name.startswith("present.0.decoder") for _, name in excluded)


def test_encoder_file_alone_validates_the_encoder_without_generating(exports):
    model_dir, folder = exports["bart"]
    run = validate(model_dir, folder / "encoder_model.onnx")
    assert run.verdict == "pass"
    assert [s.label for s in run.input_sets] == ["encoder"]
    summary = judged_summary(run)
    assert summary["n_calls"] == 1 and summary["max_new_tokens"] is None


def test_a_file_takes_its_role_from_its_signature_not_its_name(exports, tmp_path):
    model_dir, folder = exports["t5"]
    renamed = tmp_path / "step.onnx"
    renamed.write_bytes((folder / "decoder_with_past_model.onnx").read_bytes())
    run = validate(model_dir, renamed)
    assert run.verdict == "pass"
    assert [s.label for s in run.input_sets] == LABELS[2:]
    assert judged_summary(run)["not_validated"] == LABELS[:2]


def _nudge_decoder_weight(src: Path, dst: Path) -> str:
    """Scale the largest 2-D float initializer of a decoder by 1.01: a planted export bug."""
    model = onnx.load(str(src))
    tensors = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    target = max((t for t in tensors if len(t.dims) == 2), key=lambda t: int(np.prod(t.dims)))
    nudged = numpy_helper.to_array(target) * np.float32(1.01)
    target.CopyFrom(numpy_helper.from_array(nudged, target.name))
    onnx.save(model, str(dst))
    return target.name


@pytest.mark.parametrize("family", FAMILIES)
def test_a_nudged_decoder_weight_fails_exactly_the_steps_that_file_runs(exports, family, tmp_path):
    model_dir, folder = exports[family]
    bugged = unmerged_copy(folder, tmp_path / "bugged")
    _nudge_decoder_weight(
        bugged / "decoder_with_past_model.onnx", bugged / "decoder_with_past_model.onnx"
    )
    run = validate(model_dir, bugged)
    assert run.verdict == "fail"
    assert [s["ok"] for s in steps_json(run)] == [True, True, False, False]
    assert judged_summary(run)["failed_steps"] == LABELS[2:]


def test_a_nudged_merged_decoder_fails_every_decoder_step_not_the_encoder(exports, tmp_path):
    model_dir, folder = exports["t5"]
    bugged = tmp_path / "bugged"
    bugged.mkdir()
    (bugged / "encoder_model.onnx").write_bytes((folder / "encoder_model.onnx").read_bytes())
    _nudge_decoder_weight(
        folder / "decoder_model_merged.onnx", bugged / "decoder_model_merged.onnx"
    )
    run = validate(model_dir, bugged)
    assert [s["ok"] for s in steps_json(run)] == [True, False, False, False]


def test_whisper_features_are_seeded_and_given_features_are_used(exports, tmp_path):
    model_dir, folder = exports["whisper"]
    first = validate(model_dir, folder / "encoder_model.onnx", seed=3)
    again = validate(model_dir, folder / "encoder_model.onnx", seed=3)
    features = first.input_sets[0].feeds["input_features"]
    assert features.shape == (2, MEL_BINS, FRAMES)
    assert np.array_equal(features, again.input_sets[0].feeds["input_features"])
    given = np.random.default_rng(7).uniform(-1, 1, (1, MEL_BINS, FRAMES)).astype(np.float32)
    np.savez(tmp_path / "audio.npz", input_features=given)
    run = validate(model_dir, folder, input_files=(str(tmp_path / "audio.npz"),))
    assert run.verdict == "pass"
    assert np.array_equal(run.input_sets[0].feeds["input_features"], given)
    assert [s.label for s in run.input_sets] == LABELS
    assert "audio.npz" in judged_summary(run)["inputs"]


def test_bad_requests_are_one_line_usage_errors(exports, tmp_path):
    model_dir, folder = exports["t5"]
    with pytest.raises(UsageError, match="optimum-cli export onnx"):
        run_validation(RunConfig(model=f"hf:{model_dir}", onnx=None, hf=HfOptions()))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="none of them is there"):
        validate(model_dir, tmp_path / "empty")
    np.savez(tmp_path / "ids.npz", input_ids=np.zeros((1, 3), np.int64))
    with pytest.raises(InputError, match="applies to audio models"):
        validate(model_dir, folder, input_files=(str(tmp_path / "ids.npz"),))


def test_cli_validates_a_folder_and_names_the_failing_steps(exports, tmp_path, capsys):
    from parity.cli import main

    model_dir, folder = exports["bart"]
    report = tmp_path / "report.json"
    argv = ["validate", "--model", f"hf:{model_dir}", "--onnx", str(folder)]
    argv += ["--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--json", str(report)]
    assert main(argv) == 0
    data = json.loads(report.read_text())
    assert [s["label"] for s in data["steps"]] == LABELS
    assert data["summary"]["kind"] == "encoder_decoder"
    capsys.readouterr()
    bugged = unmerged_copy(folder, tmp_path / "bugged")
    _nudge_decoder_weight(bugged / "decoder_model.onnx", bugged / "decoder_model.onnx")
    argv[4] = str(bugged)
    assert main(argv) == 1
    assert "failing: decoder step 0\n" in capsys.readouterr().out
    assert json.loads(report.read_text())["summary"]["failed_steps"] == ["decoder step 0"]
