"""ONNX Runtime GenAI's model builder files on `hf:` runs (issue 56): the fp32 and int4
Llama folders (`genai_config.json`, `model.onnx` + external data; no position_ids, past
`past_key_values.N.key` [batch, kv_heads, past, head_dim]) are fed per generate() step and
generate on their own; the clean fp32 file validates prompt by prompt, and serves the
prompts as one batch padded on the right as ONNX Runtime GenAI pads one (one padded on the
left it cannot: issue 60), the int4 file is attributed to its int4 weights (the file
against torch with them: float32 noise, its int8-per-block inputs included), tokens
compared. The builder runs in a venv of its own (tests.helpers.genai)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import transformers

from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.deploy_matrix import record, right
from tests.helpers.genai import build, genai_python
from tests.helpers.hf_models import PROMPTS, make_llama_dir
from tests.helpers.plant_bug import wrong_scale

pytestmark = pytest.mark.slow  # a venv made once, two builds
QKV_1 = "/model/layers.1/attn/qkv_proj/MatMul_Q4"
KV_HEADS, HEAD = 2, 16  # make_llama_dir(hidden=64): 4 heads of 16, 2 key/value heads


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


def plain_shifts(model_dir: str, onnx_path: str, tokens: np.ndarray, side: str) -> list[float]:
    """Per prompt, max |batch - alone| of the file's own last logits over the steps: plain
    ONNX Runtime, the prompts padded on `side` (ONNX Runtime GenAI pads on the right: its
    PadInputs), each row's last real position read at prefill, present fed back as past, the
    mask grown by one, fed `tokens`. Independent of Parity."""
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    ids = [list(tokenizer(p)["input_ids"]) for p in PROMPTS]

    def run(rows: list[list[int]], fed: np.ndarray, side: str) -> np.ndarray:
        width = max(map(len, rows))
        pad = [[0] * (width - len(r)) for r in rows]
        ids_ = [r + p if side == "right" else p + r for r, p in zip(rows, pad, strict=True)]
        mask = [[1] * len(r) + [0] * len(p) if side == "right" else [0] * len(p) + [1] * len(r)
                for r, p in zip(rows, pad, strict=True)]  # fmt: skip
        feeds = {"input_ids": np.array(ids_), "attention_mask": np.array(mask)}
        for i in session.get_inputs():
            if i.name.startswith("past_key_values."):
                feeds[i.name] = np.zeros((len(rows), KV_HEADS, 0, HEAD), np.float32)
        out = []
        for step in range(fed.shape[1]):
            got = dict(zip(names, session.run(names, feeds), strict=True))
            last = [np.flatnonzero(m)[-1] if step == 0 else -1 for m in feeds["attention_mask"]]
            out.append(got["logits"][np.arange(len(rows)), last])
            grown = np.concatenate([feeds["attention_mask"], np.ones((len(rows), 1), np.int64)], 1)
            feeds = {"input_ids": fed[:, step : step + 1], "attention_mask": grown} | {
                n.replace("present.", "past_key_values."): v
                for n, v in got.items()
                if n.startswith("present.")
            }
        return np.stack(out, axis=1)

    batch = run(ids, tokens, side)
    alone = [run([r], tokens[k : k + 1], side)[0] for k, r in enumerate(ids)]
    return [float(np.abs(batch[k] - alone[k]).max()) for k in range(len(ids))]


def test_a_clean_genai_fp32_llama_validates_step_by_step_and_free_running(genai) -> None:
    run = _run(genai, "fp32")
    # each prompt alone passes every step; the prompts as one batch padded on the right, as
    # ONNX Runtime GenAI pads one (its GroupQueryAttention takes padding there only), give
    # each what it gives alone: the run passes, by tolerance and by cause, and says that a
    # batch padded on the left (generate()'s) is one it cannot serve (issue 60)
    tokens = np.array([p.torch_tokens for p in run.generation.prompts])
    on_right, on_left = (
        plain_shifts(genai["dir"], str(genai["fp32"]), tokens, side) for side in ("right", "left")
    )
    assert max(on_right) < 1e-5 and on_left[0] < 1e-5 < 1e-2 < on_left[1]  # the premise
    assert all(c.status.passed for c in run.outputs)
    assert run.verdict == "pass" and run.failing == ()
    assert not any(f.kind in ("limitation", "bug") for f in run.findings)
    padded = run.generation.padded_batch
    assert padded.side == "right" and padded.title == "Right-padded batch" and padded.kind is None
    first, second = padded.prompts
    assert first.padding == 0 and second.padding > 0
    assert first.batch_passed and second.batch_passed and second.shift < 1e-5
    assert padded.text.startswith("Run as one right-padded batch, as ONNX Runtime GenAI pads one")
    assert padded.text.endswith(
        "It cannot serve a batch padded on the left, as generate() pads one: its "
        "GroupQueryAttention reads the attention mask as right padding."
    )
    row = record(run, tool="GenAI builder", option="-p fp32", architecture="llama")
    assert right(row), row
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
    # the right-padded batch is judged against the file alone: its int4 error does not count
    padded = run.generation.padded_batch
    assert "limitation" not in kinds and padded.kind is None
    assert all(p.batch_passed for p in padded.prompts)


def test_a_wrong_scale_in_one_genai_layer_is_a_bug_at_that_node(genai) -> None:
    run = _run(genai, "bad")
    q = run.quantization
    assert q is not None
    (bad,) = q.bugs
    assert bad.node == QKV_1 and "layers.1.self_attn.q_proj.weight" in bad.parameter
    assert "scale is 0.5" in bad.defect
    bugs = [f.text for f in run.findings if f.kind == "bug"]
    assert bugs and QKV_1 in bugs[0]
