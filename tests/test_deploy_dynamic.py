"""Dynamic int8 files judged right (issue 63): files made by the real deploy tools -- Optimum's
`onnxruntime quantize --avx2/--avx512/--arm64` of a BERT (MatMulInteger for the weights and
for the attention's two products of activations, quantized embedding Gathers) and ONNX
Runtime's `quantize_dynamic` of a CNN (ConvInteger with BatchNorm folded, MatMulInteger) --
are their intended quantization (kind `quantization`, never `bug`: every failing output has
a quantization finding naming it), and one planted wrong scale is a `bug` named at its node.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from parity.pipeline import RunConfig, run_validation
from parity.results import ValidationRun
from tests.helpers.hf_tasks import bert_config, optimum_export, save_text_model

CNN_SOURCE = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.b2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.b1(self.c1(x)))
        x = torch.relu(self.b2(self.c2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def make():
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # statistics of a trained net: the folds differ per channel
        for bn in (net.b1, net.b2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
    return net.eval()
"""


def wrong_integer_scale(src: Path, dst: Path, node: str, factor: float = 1.5) -> Path:
    """`src` with the weight scale of one MatMulInteger / ConvInteger multiplied by `factor`
    (quantize_dynamic names it after the weight: `W_quantized` -> `W_scale`)."""
    model = onnx.load(str(src))
    target = next(n for n in model.graph.node if n.name == node)
    name = target.input[1].removesuffix("_quantized") + "_scale"
    tensor = next(t for t in model.graph.initializer if t.name == name)
    scaled = numpy_helper.to_array(tensor) * np.float32(factor)
    tensor.CopyFrom(numpy_helper.from_array(scaled, name))
    onnx.save(model, str(dst))
    return dst


def wrong_table_scale(src: Path, dst: Path, gather: str, factor: float = 1.5) -> Path:
    """`src` with the DequantizeLinear scale of one quantized embedding Gather x `factor`."""
    model = onnx.load(str(src))
    node = next(n for n in model.graph.node if n.name == gather)
    dq = next(n for n in model.graph.node if node.output[0] in n.input)
    tensor = next(t for t in model.graph.initializer if t.name == dq.input[1])
    scaled = numpy_helper.to_array(tensor) * np.float32(factor)
    tensor.CopyFrom(numpy_helper.from_array(scaled, tensor.name))
    onnx.save(model, str(dst))
    return dst


BERT = "BERT (2 layers, hidden 32, Optimum export)"
CNN = "CNN (Conv/BN/ReLU, legacy export)"


def matrix_row(run: ValidationRun, **row: str) -> None:
    """The run's row of the deploy matrix (tests.helpers.deploy_matrix: the docs' table),
    asserted right by cause."""
    from tests.helpers.deploy_matrix import record, right

    recorded = record(run, **row)
    assert right(recorded), recorded


def assert_intended(run: ValidationRun) -> None:
    """No bug said, and every failing output has a quantization finding naming it (what the
    verdict by cause asks of a clean file)."""
    assert run.quantization is not None
    kinds = [f.kind for f in run.findings]
    assert "bug" not in kinds and "diverges" not in kinds, [f.text for f in run.findings]
    failing = {c.name for c in run.outputs if not c.status.passed}
    explained = {f.output for f in run.findings if f.kind == "quantization"}
    assert failing <= explained
    assert all(w.status == "rounding" for w in run.quantization.weights)
    assert run.quantization.faithful is True


def assert_bug_at(run: ValidationRun, node: str) -> None:
    q = run.quantization
    assert q is not None
    assert [w.node for w in q.bugs] == [node]
    bugs = [f for f in run.findings if f.kind == "bug"]
    assert bugs and node in bugs[0].text
    failing = {c.name for c in run.outputs if not c.status.passed}
    assert failing <= {f.output for f in bugs}  # no failing output passed off as intended


# ----------------------------------------------------------------------------- a BERT


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 2-layer random BERT exported by Optimum and quantized by `optimum-cli onnxruntime
    quantize --avx2` (as users run it), and by ORTQuantizer for --avx512 / --arm64."""
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    root = tmp_path_factory.mktemp("dynamic_bert")
    torch.manual_seed(0)
    import transformers

    model = transformers.BertModel(bert_config())
    with torch.no_grad():  # trained-like norms: their int8 gamma and beta are real roundings
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    directory = save_text_model(model, root / "bert")
    exported = optimum_export(directory, root / "onnx", "feature-extraction")
    cli = [sys.executable, "-m", "optimum.commands.optimum_cli", "onnxruntime", "quantize"]
    subprocess.run(
        [*cli, "--onnx_model", str(exported.parent), "--avx2", "-o", str(root / "avx2")],
        check=True,
        capture_output=True,
    )
    files = {"avx2": root / "avx2" / "model_quantized.onnx"}
    for arch in ("avx512", "arm64"):
        config = getattr(AutoQuantizationConfig, arch)(is_static=False, per_channel=False)
        quantizer = ORTQuantizer.from_pretrained(exported.parent)
        quantizer.quantize(config, root / arch)
        files[arch] = root / arch / "model_quantized.onnx"
    config = AutoQuantizationConfig.avx2(is_static=False, per_channel=True)
    ORTQuantizer.from_pretrained(exported.parent).quantize(config, root / "per_channel")
    files["per_channel"] = root / "per_channel" / "model_quantized.onnx"
    return {"dir": directory, "files": files, "root": root}


def _bert_run(bert: dict, path: Path, **extra) -> ValidationRun:
    return run_validation(RunConfig(model=f"hf:{bert['dir']}", onnx=str(path), **extra))


@pytest.mark.slow  # the BERT's export and quantization: ~40 s once
def test_optimum_avx2_bert_is_its_int8_weights_and_rounded_activations(bert) -> None:
    """48 MatMulIntegers in all-MiniLM (here 16): the weights' and the attention's products
    of two activations, plus quantized embedding Gathers: all part of the intended account."""
    path = bert["files"]["avx2"]
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("MatMulInteger") == 16 and ops.count("DequantizeLinear") == 3
    run = _bert_run(bert, path)
    assert_intended(run)
    q = run.quantization
    assert {w.op for w in q.weights} == {"MatMulInteger", "Gather"}
    matrix_row(run, tool="optimum-cli onnxruntime quantize", option="--avx2", architecture=BERT)
    tables = {w.parameter for w in q.weights if w.op == "Gather"}
    assert "embeddings.word_embeddings.weight" in tables
    assert any("products of two activations" in n or "product(s) of two" in n for n in q.notes)
    assert q.activations == "uint8 per tensor" and q.activations_simulated
    (out,) = q.outputs
    assert out.quant_max_abs is not None and out.quant_max_abs > 1e-3  # int8 costs something


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["avx512", "arm64", "per_channel"])
def test_optimum_other_targets_are_intended_too(bert, arch) -> None:
    run = _bert_run(bert, bert["files"][arch])
    assert_intended(run)
    option = "--avx2, per channel" if arch == "per_channel" else f"--{arch}"
    matrix_row(run, tool="Optimum ORTQuantizer", option=option, architecture=BERT)


@pytest.mark.slow  # the BERT's export and quantization: ~40 s once
def test_a_wrong_scale_in_one_bert_matmul_is_a_bug_at_that_node(bert) -> None:
    node = "/encoder/layer.1/intermediate/dense/MatMul_quant"
    bad = wrong_integer_scale(bert["files"]["avx2"], bert["root"] / "bad_matmul.onnx", node)
    run = _bert_run(bert, bad)
    assert_bug_at(run, node)
    matrix_row(
        run,
        tool="optimum-cli onnxruntime quantize",
        option="--avx2",
        architecture=BERT,
        planted_at=node,
    )
    (wrong,) = run.quantization.bugs
    assert wrong.parameter == "encoder.layer.1.intermediate.dense.weight"
    assert "scale is 1.5" in wrong.defect


@pytest.mark.slow  # the BERT's export and quantization: ~40 s once
def test_a_wrong_embedding_table_scale_is_a_bug_at_its_gather(bert) -> None:
    gather = "/embeddings/position_embeddings/Gather"
    bad = wrong_table_scale(bert["files"]["avx2"], bert["root"] / "bad_table.onnx", gather)
    run = _bert_run(bert, bad)
    assert_bug_at(run, gather)
    matrix_row(
        run,
        tool="optimum-cli onnxruntime quantize",
        option="--avx2 (embedding table)",
        architecture=BERT,
        planted_at=gather,
    )
    assert run.quantization.bugs[0].parameter == "embeddings.position_embeddings.weight"


@pytest.mark.slow  # the BERT's export and quantization: ~40 s once
def test_layers_noise_floor_and_findings_tell_one_story(bert) -> None:
    """--layers and --noise-floor on the avx2 file: DynamicQuantizeLinear's uint8 values are
    not comparable (with why), the float each one rounds is what is compared; the noise floor
    is the int8 rounding measured (its scales are made at run time), and within it."""
    from parity.judge.noise_floor import is_rounding

    run = _bert_run(bert, bert["files"]["avx2"], layers=True, noise_floor=True)
    noises = [c.noise for c in run.outputs]
    assert noises and all(n is not None and n.precision == "int8" for n in noises)
    assert all(is_rounding(n) and "measured" in n.emulated for n in noises)
    values = run.layers.values
    assert values
    assert not [
        v for v in values if "DynamicQuantizeLinear" in v.onnx_op and v.status == "diverges"
    ]
    for v in values:
        if v.onnx_value.endswith("_quantized"):
            assert v.status == "not_comparable" and "uint8" in (v.reason or "")
    compared = {v.onnx_value for v in values if v.status != "not_comparable"}
    assert "/encoder/layer.0/attention/self/Reshape_3_output_0" in compared
    assert_intended(run)
    # its torch side computes what the file means: nothing diverges (the quantized Gathers
    # did against torch's float embeddings), as the findings say
    assert run.layers.first_divergence is None
    assert any("the file's own int8 weights" in n for n in run.layers.notes)


@pytest.mark.slow
def test_a_float_bias_bug_in_a_dynamic_file_is_located_by_the_layers(bert) -> None:
    from tests.helpers.plant_bug import plant

    bad = bert["root"] / "bias.onnx"
    plant(bert["files"]["avx2"], bad, "/encoder/layer.1/output/dense/Add", "bias", 0.5)
    run = _bert_run(bert, bad, layers=True)
    assert all(w.status == "rounding" for w in run.quantization.weights)
    first = run.layers.first_divergence
    assert first is not None and first.onnx_node == "/encoder/layer.1/output/dense/Add"
    bugs = [f for f in run.findings if f.kind == "bug" and f.output == "last_hidden_state"]
    assert bugs and "/encoder/layer.1/output/dense/Add" in bugs[0].text
    matrix_row(
        run,
        tool="optimum-cli onnxruntime quantize",
        option="--avx2 (float bias)",
        architecture=BERT,
        planted_at="/encoder/layer.1/output/dense/Add",
    )


# ----------------------------------------------------------------------------- a CNN


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A Conv/BN/ReLU net (legacy export: BatchNorm folded into the convs) quantized by
    quantize_dynamic: default (ConvInteger + MatMulInteger) and MatMul only."""
    from onnxruntime.quantization import quantize_dynamic

    root = tmp_path_factory.mktemp("dynamic_cnn")
    source = root / "cnn.py"
    source.write_text(CNN_SOURCE)
    namespace: dict = {}
    exec(compile(CNN_SOURCE, str(source), "exec"), namespace)
    raw = root / "cnn.onnx"
    torch.onnx.export(
        namespace["make"](),
        (torch.randn(2, 3, 16, 16),),
        str(raw),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}},
        dynamo=False,
    )
    default, matmul = root / "cnn_dynamic.onnx", root / "cnn_matmul.onnx"
    quantize_dynamic(str(raw), str(default))
    quantize_dynamic(str(raw), str(matmul), op_types_to_quantize=["MatMul"])
    return {"model": f"{source}:make", "default": default, "matmul": matmul, "root": root}


def test_quantize_dynamic_default_cnn_reads_its_conv_integer_weights(cnn) -> None:
    ops = {n.op_type for n in onnx.load(str(cnn["default"])).graph.node}
    assert {"ConvInteger", "MatMulInteger"} <= ops and "BatchNormalization" not in ops
    run = run_validation(RunConfig(model=cnn["model"], onnx=str(cnn["default"])))
    assert_intended(run)
    matrix_row(run, tool="ORT quantize_dynamic", option="default (ConvInteger)", architecture=CNN)
    weights = {w.node: w for w in run.quantization.weights}
    assert weights["/c1/Conv_quant"].op == "ConvInteger"
    assert weights["/c1/Conv_quant"].parameter == "c1.weight"
    assert weights["/c2/Conv_quant"].max_steps <= 0.51  # a rounding of the folded weight


def test_quantize_dynamic_matmul_only_cnn(cnn) -> None:
    run = run_validation(RunConfig(model=cnn["model"], onnx=str(cnn["matmul"])))
    assert_intended(run)
    matrix_row(
        run, tool="ORT quantize_dynamic", option="op_types_to_quantize=[MatMul]", architecture=CNN
    )
    assert {w.op for w in run.quantization.weights} == {"MatMulInteger"}


def test_a_conv_integer_scale_times_1_5_is_a_bug_at_that_node(cnn) -> None:
    bad = wrong_integer_scale(cnn["default"], cnn["root"] / "bad.onnx", "/c2/Conv_quant")
    run = run_validation(RunConfig(model=cnn["model"], onnx=str(bad)))
    assert_bug_at(run, "/c2/Conv_quant")
    matrix_row(
        run,
        tool="ORT quantize_dynamic",
        option="default (ConvInteger)",
        architecture=CNN,
        planted_at="/c2/Conv_quant",
    )
    (wrong,) = run.quantization.bugs
    assert wrong.parameter == "c2.weight" and "scale is 1.5" in wrong.defect
    # --noise-floor never calls the wrong weight's cost the int8 rounding
    noisy = run_validation(RunConfig(model=cnn["model"], onnx=str(bad), noise_floor=True))
    assert not any(c.noise is not None and "measured" in c.noise.emulated for c in noisy.outputs)
    # the reference computes with the file's own (wrong) weights: the file agrees with it
    assert run.quantization.faithful is True


def test_a_difference_within_rounding_flips_is_intended_and_a_bias_bug_is_not(cnn) -> None:
    """At a zero tolerance the file's float32 noise against the reference that rounds as it
    does fails: the reference's own move when each rounding is nudged by a thousandth of a
    step is measured, and a difference within it is the rounding (a value on a boundary may
    round either way in ONNX Runtime's kernels); a float bias off by 0.1 is far beyond it."""
    from parity.tolerances import Tolerance, Tolerances

    exact = Tolerances(default=Tolerance(atol=0.0, rtol=0.0))
    run = run_validation(RunConfig(model=cnn["model"], onnx=str(cnn["default"]), tolerances=exact))
    (y,) = run.quantization.outputs
    assert y.export_passed is False and y.flip_max_abs is not None
    assert y.export_max_abs <= y.flip_max_abs
    assert {f.kind for f in run.findings if f.output == "y"} == {"quantization"}
    assert "rounding boundary" in next(f.text for f in run.findings if f.output == "y")

    from tests.helpers.plant_bug import plant

    bad = cnn["root"] / "bias.onnx"
    plant(cnn["default"], bad, "/fc/Gemm_Add", "bias", 0.1)
    run = run_validation(RunConfig(model=cnn["model"], onnx=str(bad)))
    (y,) = run.quantization.outputs
    assert y.export_passed is False and y.export_max_abs > y.flip_max_abs
    assert all(w.status == "rounding" for w in run.quantization.weights)
    assert [f.kind for f in run.findings if f.output == "y"] == ["bug"]


def _optimised(src: Path, dst: Path) -> Path:
    """The file as ONNX Runtime's session optimiser saves it (extended: MatMulInteger fused
    into DynamicQuantizeMatMul / MatMulIntegerToFloat)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    return dst


def test_ort_optimised_cnn_dynamic_quantize_matmul_is_one_story(cnn) -> None:
    path = _optimised(cnn["default"], cnn["root"] / "optimised.onnx")
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert "DynamicQuantizeMatMul" in ops and "MatMulInteger" not in ops
    run = run_validation(RunConfig(model=cnn["model"], onnx=str(path)))
    assert_intended(run)
    matrix_row(run, tool="ORT session optimiser", option="DynamicQuantizeMatMul", architecture=CNN)
    assert {w.op for w in run.quantization.weights} == {"ConvInteger", "DynamicQuantizeMatMul"}


@pytest.mark.slow
def test_ort_optimised_bert_products_are_intended(bert) -> None:
    """The avx2 BERT through ONNX Runtime's optimiser: its products of two activations become
    DynamicQuantizeMatMul / MatMulIntegerToFloat; the same account holds."""
    path = _optimised(bert["files"]["avx2"], bert["root"] / "optimised.onnx")
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "DynamicQuantizeMatMul" in ops and "MatMulIntegerToFloat" in ops
    run = _bert_run(bert, path)
    assert_intended(run)
    matrix_row(run, tool="ORT session optimiser", option="--avx2 file, extended", architecture=BERT)


@pytest.fixture(scope="module")
def fused_int8(bert) -> Path:
    """A fused BERT (ONNX Runtime's transformers optimizer) quantized by quantize_dynamic:
    QEmbedLayerNormalization (int8 tables, gamma, beta), QAttention (packed q/k/v int8)."""
    from onnxruntime.quantization import quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    root = bert["root"]
    raw = root / "onnx" / "model.onnx"
    fused = optimize_model(str(raw), model_type="bert", num_heads=4, hidden_size=32, opt_level=1)
    fused.save_model_to_file(str(root / "fused.onnx"))
    int8 = root / "fused_int8.onnx"
    quantize_dynamic(
        str(root / "fused.onnx"),
        str(int8),
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    return int8


@pytest.mark.slow
def test_a_fused_bert_int8_copy_tells_one_story(bert, fused_int8) -> None:
    """Once "int8 weights: intended" and "not int8 rounding ... bug" in the same run: its
    QAttention and QEmbedLayerNormalization are read back too, so all of it is intended."""
    ops = {n.op_type for n in onnx.load(str(fused_int8)).graph.node}
    assert {"QAttention", "QEmbedLayerNormalization"} <= ops
    run = _bert_run(bert, fused_int8)
    assert_intended(run)
    matrix_row(
        run,
        tool="ORT optimizer + quantize_dynamic",
        option="QAttention, QEmbedLayerNormalization",
        architecture=BERT,
    )
    q = run.quantization
    assert not q.unsimulated
    params = {w.parameter for w in q.weights}
    assert "embeddings.LayerNorm.bias" in params
    assert (
        "encoder.layer.1.attention.self.query.weight + encoder.layer.1.attention.self.key"
        ".weight + encoder.layer.1.attention.self.value.weight" in params
    )


@pytest.mark.slow
def test_a_wrong_qattention_scale_is_a_bug_at_that_node(bert, fused_int8) -> None:
    model = onnx.load(str(fused_int8))
    node = next(n for n in model.graph.node if n.name == "Attention_1_quant")
    tensor = next(t for t in model.graph.initializer if t.name == node.input[4])
    tensor.CopyFrom(
        numpy_helper.from_array(numpy_helper.to_array(tensor) * np.float32(1.5), tensor.name)
    )
    bad = bert["root"] / "fused_bad.onnx"
    onnx.save(model, str(bad))
    run = _bert_run(bert, bad)
    assert_bug_at(run, "Attention_1_quant")
    matrix_row(
        run,
        tool="ORT optimizer + quantize_dynamic",
        option="QAttention",
        architecture=BERT,
        planted_at="Attention_1_quant",
    )
    assert "scale is 1.5" in run.quantization.bugs[0].defect


def test_a_dynamo_exported_cnn_is_matched_by_its_values(cnn) -> None:
    """The dynamo exporter (BatchNorm folded too; quantize_dynamic's nodes keep no scope):
    each ConvInteger is matched to its Conv by value, fold and all."""
    import warnings

    from onnxruntime.quantization import quantize_dynamic

    namespace: dict = {}
    exec(compile(CNN_SOURCE, "cnn.py", "exec"), namespace)
    raw, quantized = cnn["root"] / "dynamo.onnx", cnn["root"] / "dynamo_dynamic.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            namespace["make"](), (torch.randn(2, 3, 16, 16),), dynamo=True, verbose=False
        )
    program.save(str(raw))
    quantize_dynamic(str(raw), str(quantized))
    run = run_validation(RunConfig(model=cnn["model"], onnx=str(quantized)))
    assert_intended(run)
    matrix_row(
        run,
        tool="ORT quantize_dynamic",
        option="default (ConvInteger)",
        architecture="CNN (Conv/BN/ReLU, dynamo export)",
    )
    convs = [w for w in run.quantization.weights if w.op == "ConvInteger"]
    assert sorted(w.parameter for w in convs) == ["c1.weight", "c2.weight"]
