"""ONNX Runtime GenAI's model builder files on `hf:` runs (issue 56): the fp32 and int4
Llama folders (`genai_config.json`, `model.onnx` + external data; no position_ids, past
`past_key_values.N.key` [batch, kv_heads, past, head_dim]) are fed per generate() step and
generate on their own; the clean fp32 file validates prompt by prompt (a left-padded batch
it cannot serve: issue 60), the int4 file is attributed to its int4 weights (the file
against torch with them: float32 noise, its int8-per-block inputs included), tokens
compared. The builder runs in a venv of its own (tests.helpers.genai)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.genai import build, genai_python
from tests.helpers.hf_models import PROMPTS, make_llama_dir
from tests.helpers.plant_bug import wrong_scale

pytestmark = pytest.mark.slow  # a venv made once, two builds
QKV_1 = "/model/layers.1/attn/qkv_proj/MatMul_Q4"


@pytest.fixture(scope="module")
def genai(tmp_path_factory: pytest.TempPathFactory) -> dict:
    python, why = genai_python()
    if python is None:
        pytest.skip(f"the GenAI builder's venv could not be made: {why}")
    root = tmp_path_factory.mktemp("genai")
    # hidden 64, 4 heads: GroupQueryAttention wants a head size that is a multiple of 16
    directory = make_llama_dir(root / "llama", hidden=64)
    files = {p: build(python, directory, root / p, p, root / "cache") for p in ("fp32", "int4")}
    bad = wrong_scale(files["int4"], root / "int4_bad.onnx", QKV_1, factor=0.5)
    return {"dir": directory, **files, "bad": bad}


def _run(genai: dict, precision: str):
    options = HfOptions(prompts=PROMPTS, max_new_tokens=4)
    config = RunConfig(model=f"hf:{genai['dir']}", onnx=str(genai[precision]), hf=options)
    return run_validation(config)  # ORT's default-domain ops opened (parity.load.onnx_model)


def test_the_builder_writes_what_ort_genai_runs(genai) -> None:
    folder = Path(genai["int4"]).parent
    assert (folder / "genai_config.json").is_file() and (folder / "model.onnx.data").is_file()


def test_a_clean_genai_fp32_llama_validates_step_by_step_and_free_running(genai) -> None:
    run = _run(genai, "fp32")
    # each prompt alone passes every step; a left-padded batch does not (issue 60): its
    # GroupQueryAttention takes a right-padded mask (tests/test_hf_padded_batch.py)
    assert all(c.status.passed for c in run.outputs)
    assert run.verdict == "fail" and run.failing == ("logits",)
    (found,) = run.findings
    assert found.kind == "limitation" and "GroupQueryAttention reads the attention" in found.text
    first, second = run.generation.padded_batch.prompts
    assert first.padding == 0 and first.batch_passed and not second.batch_passed
    assert "position_ids" not in run.signature.input_names
    assert {"present.0.key", "present.1.value", "logits"} <= set(run.output_names)
    prompts = run.generation.prompts
    assert len(prompts) == len(PROMPTS)  # each prompt alone: no left padding to misplace
    assert all(p.onnx_tokens == p.torch_tokens for p in prompts)


def test_a_genai_int4_llama_is_its_int4_weights_with_tokens_compared(genai) -> None:
    run = _run(genai, "int4")
    q = run.quantization
    assert q is not None and q.width == "int4"
    assert all(w.status == "rounding" for w in q.weights)
    # q/k/v packed into one qkv_proj: the three torch weights concatenated along N
    packed = [w for w in q.weights if "qkv_proj" in w.node]
    assert packed and all(w.parameter.count(" + ") == 2 for w in packed)
    assert q.activations == "int8 per block" and q.faithful is True
    assert q.tokens is not None and q.tokens.onnx_agree == q.tokens.greedy_total > 0
    kinds = {f.kind for f in run.findings}
    assert "bug" not in kinds and "quantization" in kinds
    # the batch is judged against the file alone: its int4 error does not hide the padding
    assert "limitation" in kinds and run.generation.padded_batch.prompts[1].shift > 1e-2


def test_a_wrong_scale_in_one_genai_layer_is_a_bug_at_that_node(genai) -> None:
    run = _run(genai, "bad")
    q = run.quantization
    assert q is not None
    (bad,) = q.bugs
    assert bad.node == QKV_1 and "layers.1.self_attn.q_proj.weight" in bad.parameter
    assert "scale is 0.5" in bad.defect
    bugs = [f.text for f in run.findings if f.kind == "bug"]
    assert bugs and QKV_1 in bugs[0]
