"""A QDQ int8 file against its float32 original (issue 21): every quantized tensor's SQNR
before and after its Q/DQ pair, the tensor whose quantization loses the most named as the
first divergence, and nodes_to_exclude suggested and checked without re-calibrating.
Quantized in the test with onnxruntime.quantization.quantize_static."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from parity.cli import main
from tests.helpers.precision_models import conv_net, output_sqnr_db, quantize_qdq


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


def test_the_suggestion_is_shown_in_the_terminal_html_and_layers_page(
    quantized, tmp_path, capsys
) -> None:
    from streamlit.testing.v1 import AppTest

    from parity.pipeline import RunConfig, run_validation

    html = tmp_path / "r.html"
    main(["validate", "--onnx", str(quantized["ref"]), "--onnx", str(quantized["qdq"]),
          "--layers", "--html", str(html)])  # fmt: skip
    out = capsys.readouterr().out
    assert "keep in float (quantize_static nodes_to_exclude): conv3" in out
    assert "nodes_to_exclude=[" in html.read_text()
    run = run_validation(
        RunConfig(model=None, onnx=[str(quantized["ref"]), str(quantized["qdq"])], layers=True)
    )
    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    assert any("What to keep in higher precision" in m.value for m in at.markdown)
    assert any("nodes_to_exclude=" in c.value for c in at.code)
