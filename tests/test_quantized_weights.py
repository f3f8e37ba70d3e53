"""Quantized weights judged for what they are (issue 56): an int4 file made by ONNX Runtime's
MatMulNBitsQuantizer is attributed to its int4 weights (the file against torch with its own
dequantized weights is float32 noise; what the weights cost is SQNR and, for a causal LM,
tokens), never "a bug in the export"; a planted wrong scale in one layer is a bug named at
that node. An MLP (legacy export) and a tiny random-weight Llama (Optimum's export, run as
hf:)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import onnx
import pytest
import torch

from parity.cli import main
from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS, make_llama_dir
from tests.helpers.plant_bug import wrong_scale

MLP_SOURCE = """
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 64)
        self.fc3 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def make():
    torch.manual_seed(0)
    return MLP().eval()
"""


def quantize_int4(src: Path, dst: Path) -> Path:
    """MatMulNBitsQuantizer, symmetric, blocks of 32 along K (as users run it)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger().setLevel(logging.ERROR)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=32, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return dst


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("int4_mlp")
    source = root / "mlp.py"
    source.write_text(MLP_SOURCE)
    namespace: dict = {}
    exec(compile(MLP_SOURCE, str(source), "exec"), namespace)
    raw = root / "mlp.onnx"
    torch.onnx.export(
        namespace["make"](),
        (torch.randn(2, 3, 64),),
        str(raw),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "b", 1: "t"}},
        dynamo=False,
    )
    int4 = quantize_int4(raw, root / "mlp_int4.onnx")
    bad = wrong_scale(int4, root / "mlp_bad.onnx", "/fc2/MatMul_Q4")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    dynamic = root / "mlp_int8_dynamic.onnx"
    quantize_dynamic(str(raw), str(dynamic), weight_type=QuantType.QInt8)
    return {
        "model": f"{source}:make",
        "raw": raw,
        "int4": int4,
        "bad": bad,
        "dynamic": dynamic,
        "root": root,
    }


def _report(model: str, onnx_path: Path, out: Path, *extra: str) -> dict:
    code = main(
        ["validate", "--model", model, "--onnx", str(onnx_path), "--json", str(out), *extra]
    )
    data = json.loads(out.read_text())
    data["code"] = code
    return data


def test_an_int4_mlp_is_its_int4_weights_not_a_bug(mlp) -> None:
    report = _report(mlp["model"], mlp["int4"], mlp["root"] / "r.json", "--layers")
    assert report["code"] == 1  # int4 is not float32: the outputs fail the default tolerance
    q = report["quantization"]
    assert q["bits"] == "int4"
    assert {w["parameter"] for w in q["weights"]} == {"fc1.weight", "fc2.weight", "fc3.weight"}
    assert all(w["status"] == "rounding" and w["max_steps"] <= 1.01 for w in q["weights"])
    (y,) = q["outputs"]
    assert y["export_passed"] is True and y["export_max_abs"] < 1e-5
    assert 10 < y["sqnr_db"] < 40  # int4 costs something, and not everything
    kinds = [f["kind"] for f in report["findings"]]
    assert "bug" not in kinds and "diverges" not in kinds
    assert "quantization" in kinds
    texts = " ".join(f["text"] for f in report["findings"])
    assert "int4 weights" in texts and "a bug in the export" not in texts.replace(
        "not a bug in the export", ""
    )


def test_a_wrong_scale_in_one_layer_is_a_bug_at_that_node(mlp) -> None:
    report = _report(mlp["model"], mlp["bad"], mlp["root"] / "bad.json")
    weights = {w["node"]: w for w in report["quantization"]["weights"]}
    bad = weights["/fc2/MatMul_Q4"]
    assert bad["status"] == "bug" and bad["bad_blocks"] > 0
    assert "scale is 2" in bad["defect"]
    assert all(w["status"] == "rounding" for n, w in weights.items() if n != "/fc2/MatMul_Q4")
    bugs = [f for f in report["findings"] if f["kind"] == "bug"]
    assert bugs and "/fc2/MatMul_Q4" in bugs[0]["text"] and "fc2.weight" in bugs[0]["text"]
    assert "/fc1/MatMul_Q4" not in " ".join(f["text"] for f in bugs)


def test_dynamic_int8_is_its_weights_and_its_rounded_activations(mlp) -> None:
    """quantize_dynamic's MatMulInteger: the reference rounds each op's input as
    DynamicQuantizeLinear does, so the file against it is float32 noise again."""
    run = run_validation(RunConfig(model=mlp["model"], onnx=str(mlp["dynamic"])))
    q = run.quantization
    assert q is not None and q.width == "int8"
    assert {w.op for w in q.weights} == {"MatMulInteger"}
    assert all(w.status == "rounding" for w in q.weights) and q.faithful is True
    kinds = {f.kind for f in run.findings}
    assert "quantization" in kinds and not kinds & {"bug", "rounding", "diverges"}


def test_against_the_raw_export_the_reference_file_takes_the_int4_weights(mlp) -> None:
    """ONNX against ONNX (no torch model): the raw export is the reference, its MatMul
    weights are swapped for the int4 file's own; a wrong scale is a bug at its node."""
    clean = run_validation(RunConfig(model=None, onnx=[str(mlp["raw"]), str(mlp["int4"])]))
    q = clean.quantization
    assert q is not None and q.reference == "the reference file" and q.faithful is True
    assert all(w.status == "rounding" for w in q.weights)
    kinds = {f.kind for f in clean.findings}
    assert "quantization" in kinds and not kinds & {"bug", "rounding", "diverges"}
    assert "against the reference file with" in " ".join(f.text for f in clean.findings)
    bad = run_validation(RunConfig(model=None, onnx=[str(mlp["raw"]), str(mlp["bad"])]))
    assert [w.node for w in bad.quantization.bugs] == ["/fc2/MatMul_Q4"]
    # dynamic int8 rounds its activations, which a reference file cannot: never a bug
    dynamic = run_validation(RunConfig(model=None, onnx=[str(mlp["raw"]), str(mlp["dynamic"])]))
    assert dynamic.quantization.activations_simulated is False
    kinds = {f.kind for f in dynamic.findings}
    assert "quantization" in kinds and "bug" not in kinds


def test_the_quantization_survives_a_saved_run_and_can_be_turned_off(mlp, tmp_path) -> None:
    from parity.reports.saved_run import load_run

    run = run_validation(RunConfig(model=mlp["model"], onnx=str(mlp["bad"])))
    saved = run.save(tmp_path / "run.parity")
    again = load_run(saved)
    assert again.quantization == run.quantization
    assert [f.text for f in again.findings] == [f.text for f in run.findings]
    off = run_validation(
        RunConfig(model=mlp["model"], onnx=str(mlp["int4"]), quantized_reference=False)
    )
    assert off.quantization is None and "quantization" not in {f.kind for f in off.findings}


@pytest.fixture(scope="module")
def llama_int4(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A random-weight Llama (hidden 64: two blocks of 32 per row) exported by Optimum as
    users do, then quantized to int4; one copy with layer 1's q_proj scales doubled."""
    from optimum.exporters.onnx import main_export

    root = tmp_path_factory.mktemp("int4_llama")
    directory = make_llama_dir(root / "llama", hidden=64)
    main_export(
        directory,
        output=str(root / "optimum"),
        task="text-generation-with-past",
        no_post_process=True,
        do_validation=False,
    )
    int4 = quantize_int4(root / "optimum" / "model.onnx", root / "llama_int4.onnx")
    bad = wrong_scale(int4, root / "llama_bad.onnx", "/model/layers.1/self_attn/q_proj/MatMul_Q4")
    return {"dir": directory, "int4": int4, "bad": bad}


def _hf_run(model_dir: str, onnx_path: Path):
    options = HfOptions(prompts=PROMPTS, max_new_tokens=4)
    return run_validation(RunConfig(model=f"hf:{model_dir}", onnx=str(onnx_path), hf=options))


@pytest.mark.slow  # Optimum's export of a Llama
def test_an_int4_llama_is_its_weights_with_tokens_compared(llama_int4) -> None:
    run = _hf_run(llama_int4["dir"], llama_int4["int4"])
    q = run.quantization
    assert q is not None and len(q.weights) == 15  # 7 per layer and lm_head
    assert all(w.status == "rounding" for w in q.weights)
    assert {w.parameter for w in q.weights} >= {
        "lm_head.weight",
        "model.layers.1.mlp.down_proj.weight",
    }
    assert q.faithful is True
    logits = next(o for o in q.outputs if o.name == "logits")
    assert logits.export_max_abs is not None and logits.export_max_abs < 1e-4
    assert logits.sqnr_db is not None and logits.sqnr_db > 5
    tokens = q.tokens
    assert tokens is not None and tokens.greedy_total == 4 * len(PROMPTS)
    assert tokens.onnx_agree == tokens.greedy_total  # ONNX computes what its weights say
    assert tokens.top1_agreement is not None and tokens.kl_mean is not None
    kinds = {f.kind for f in run.findings}
    assert "bug" not in kinds and "quantization" in kinds
    assert any("tokens" in f.text for f in run.findings if f.kind == "quantization")


@pytest.mark.slow
def test_a_planted_scale_in_one_llama_layer_is_a_bug_at_that_node(llama_int4) -> None:
    run = _hf_run(llama_int4["dir"], llama_int4["bad"])
    q = run.quantization
    assert q is not None
    (bad,) = q.bugs
    assert bad.node == "/model/layers.1/self_attn/q_proj/MatMul_Q4"
    assert bad.parameter == "model.layers.1.self_attn.q_proj.weight"
    bugs = [f.text for f in run.findings if f.kind == "bug"]
    assert bugs and bad.node in bugs[0]


def test_asymmetric_8bit_zero_points_are_read_and_a_shifted_one_is_a_bug(mlp) -> None:
    """is_symmetric=False writes zero points (one uint8 per block at 8 bits): the weights
    are a rounding; a zero point moved by 3 in one node is a bug there, and said as such."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(mlp["raw"])), block_size=32, is_symmetric=False, bits=8
    )
    quantizer.process()
    good = mlp["root"] / "mlp_asym8.onnx"
    quantizer.model.save_model_to_file(str(good), use_external_data_format=False)
    run = run_validation(RunConfig(model=mlp["model"], onnx=str(good)))
    assert run.quantization is not None and run.quantization.width == "int8"
    assert all(w.status == "rounding" for w in run.quantization.weights)
    model = onnx.load(str(good))
    node = next(n for n in model.graph.node if n.name == "/fc3/MatMul_Q8")
    for tensor in model.graph.initializer:
        if tensor.name == node.input[3]:
            shifted = onnx.numpy_helper.to_array(tensor).astype("int32") + 3
            tensor.CopyFrom(onnx.numpy_helper.from_array(shifted.astype("uint8"), tensor.name))
    bad = mlp["root"] / "mlp_asym8_bad.onnx"
    onnx.save(model, str(bad))
    (wrong,) = run_validation(RunConfig(model=mlp["model"], onnx=str(bad))).quantization.bugs
    assert wrong.node == "/fc3/MatMul_Q8" and "zero point is off by -3" in wrong.defect
