"""--layers on ONNX Runtime GenAI builder files (issue 63). The builder spells modules its
own way (`/model/layers.1/attn/qkv_proj/MatMul`, `layers.2/final_norm_layernorm`), packs
q/k/v where transformers computes them apart (Qwen2, Llama) and splits Phi-3's packed
gate_up_proj into gate_proj and up_proj MatMuls: each is compared with torch's values put
the file's way. A clean fp32 file says no bug and no birth; a weight scaled in layer 1 is
named there (it was blamed on layer 0: q_proj taken as folded into input_layernorm). The
int4 Phi-3's split gate/up weights are matched to their halves of torch's gate_up_proj.
The builder runs in a venv of its own (tests.helpers.genai)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.deploy_matrix import record, right
from tests.helpers.genai import build, genai_python
from tests.helpers.genai_models import make_causal_dir
from tests.helpers.hf_models import PROMPTS
from tests.helpers.plant_bug import plant

pytestmark = pytest.mark.slow  # a venv made once, three builds

FAMILIES = ("qwen2", "phi3")
BUG = {  # the node whose weight is scaled, and the torch module it must be named at
    "qwen2": (
        "/model/layers.1/attn/qkv_proj/MatMul",
        "model.layers.1.self_attn.q_proj+k_proj+v_proj",
    ),
    "phi3": ("/model/layers.1/mlp/up_proj/MatMul", "model.layers.1.mlp.gate_up_proj"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    python, why = genai_python()
    if python is None:
        pytest.skip(f"the GenAI builder's venv could not be made: {why}")
    root = tmp_path_factory.mktemp("genai_layers")
    made: dict[str, Path] = {}
    for family in FAMILIES:
        directory = make_causal_dir(root / family, family)
        made[family] = Path(directory)
        clean = build(python, directory, root / f"{family}_fp32", "fp32", root / "cache")
        made[f"{family}_fp32"] = clean
        node, _ = BUG[family]
        made[f"{family}_bug"] = clean.parent / "bug.onnx"
        plant(clean, made[f"{family}_bug"], node, "scale", 0.05)
    made["phi3_int4"] = build(python, str(made["phi3"]), root / "phi3_int4", "int4", root / "cache")
    return made


def _run(directory: Path, onnx: Path, *, layers: bool = True):
    # one prompt: here the question is where a bug is born (the prompts as one batch, padded
    # on the right as ONNX Runtime GenAI pads one, are tests/test_genai_files.py's)
    options = HfOptions(prompts=PROMPTS[:1], max_new_tokens=2)
    return run_validation(
        RunConfig(model=f"hf:{directory}", onnx=str(onnx), hf=options, layers=layers)
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_a_clean_genai_file_says_no_bug_and_no_birth(files, family) -> None:
    run = _run(files[family], files[f"{family}_fp32"])
    assert run.verdict == "pass", [f.text for f in run.findings]
    row = record(run, tool="GenAI builder", option="-p fp32", architecture=family)
    assert right(row), row
    layers = run.layers
    assert layers is not None and layers.first_divergence is None
    assert not layers.confirmations
    assert "bug" not in {f.kind for f in run.findings}
    modules = {v.torch_module for v in layers.values}
    # the attention and the final norm are compared, in the file's packing or splitting
    assert {"model.layers.1.self_attn.o_proj", "model.norm", "lm_head"} <= modules
    if family == "qwen2":
        assert "model.layers.0.self_attn.q_proj+k_proj+v_proj" in modules
    else:  # torch packs qkv itself; the file splits gate_up
        assert {"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj"} <= modules


@pytest.mark.parametrize("family", FAMILIES)
def test_a_weight_scaled_in_layer_1_is_named_at_layer_1(files, family) -> None:
    run = _run(files[family], files[f"{family}_bug"])
    first = run.layers.first_divergence
    node, module = BUG[family]
    assert first is not None and first.torch_module == module
    # the module's value (Qwen2's: the packed bias Add after the MatMul) holds the bug
    assert first.onnx_node.rpartition("/")[0] == node.rpartition("/")[0]
    confirmed = run.layers.confirmation_of(first)
    assert confirmed is not None and confirmed.outcome == "born"
    assert not any("layers.0" in (c.torch_module or "") for c in run.layers.confirmations)
    row = record(run, tool="GenAI builder", option="-p fp32", architecture=family,
                 planted_at=module)  # fmt: skip
    assert right(row), row


def test_an_int4_phi3_s_split_gate_up_weights_are_halves_of_torch_s(files) -> None:
    run = _run(files["phi3"], files["phi3_int4"], layers=False)
    q = run.quantization
    assert q is not None and q.width == "int4"
    halves = {
        w.node: w.parameter
        for w in q.weights
        if "/mlp/gate_proj/" in w.node or "/mlp/up_proj/" in w.node
    }
    assert (
        halves["/model/layers.1/mlp/gate_proj/MatMul_Q4"]
        == "model.layers.1.mlp.gate_up_proj.weight[0:128]"
    )
    assert (
        halves["/model/layers.1/mlp/up_proj/MatMul_Q4"]
        == "model.layers.1.mlp.gate_up_proj.weight[128:256]"
    )
    assert all(w.status == "rounding" for w in q.weights)
    assert "bug" not in {f.kind for f in run.findings}, [f.text for f in run.findings]
