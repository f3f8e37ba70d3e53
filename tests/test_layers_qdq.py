"""A QDQ int8 file against its float32 original (issue 21): every quantized tensor's SQNR
before and after its Q/DQ pair, the tensor whose quantization loses the most named as the
first divergence, and nodes_to_exclude suggested and checked without re-calibrating.
Quantized in the test with onnxruntime.quantization.quantize_static."""

from __future__ import annotations

import json
import logging

import pytest

from parity.cli import main
from tests.precision_models import conv_net, output_sqnr_db, quantize_qdq


@pytest.fixture(scope="module", params=[False, True], ids=["conv", "conv+relu"])
def quantized(request, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("qdq")
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    ref = conv_net(root / "net.onnx", relu_after_third=request.param)
    qdq = quantize_qdq(ref, root / "net_qdq.onnx")
    out = root / "r.json"
    code = main(
        ["validate", "--onnx", str(ref), "--onnx", str(qdq), "--layers", "--input-sets", "2",
         "--json", str(out)]
    )  # fmt: skip
    return {"ref": ref, "qdq": qdq, "root": root, "code": code, "layers": json.loads(
        out.read_text())["layers"], "tensor": "r3" if request.param else "c3"}  # fmt: skip


def test_every_quantized_tensor_has_its_sqnr_before_and_after_its_pair(quantized) -> None:
    layers = quantized["layers"]
    assert quantized["code"] == 1  # the outputs fail at the default tolerance
    rows = layers["quantized"]
    tensors = {r["tensor"] for r in rows}
    assert {"r1", "r2", quantized["tensor"]} <= tensors
    assert {r["input_set"] for r in rows} == {0, 1}
    assert all(r["sqnr_db_after"] is not None for r in rows)
    assert all(v["sqnr_db"] is not None for v in layers["values"])


def test_the_outlier_conv_activation_is_the_first_divergence(quantized) -> None:
    first = quantized["layers"]["first_divergence"]
    assert first["onnx_value"] == quantized["tensor"]


def test_the_suggested_exclusion_is_checked_and_requantizing_with_it_gains_6_db(
    quantized,
) -> None:
    layers = quantized["layers"]
    exclude = layers["exclude_from_quantization"]
    assert "conv3" in exclude and "conv4" in exclude  # producer and consumer
    check = layers["exclusion_check"]
    assert check["sqnr_db_after"] - check["sqnr_db_before"] >= 6
    again = quantize_qdq(quantized["ref"], quantized["root"] / "again.onnx", exclude=exclude)
    before = output_sqnr_db(quantized["ref"], quantized["qdq"])
    assert output_sqnr_db(quantized["ref"], again) - before >= 6
