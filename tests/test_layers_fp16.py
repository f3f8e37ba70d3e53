"""A float16 file against its float32 original (issue 21): the reference nodes to keep in
float32 (layers.keep_float32), checked by converting again with ONNX Runtime's own
convert_float_to_float16(node_block_list=...) and comparing again; --write-fixed writes it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from parity.cli import main
from parity.layers.onnx_vs_onnx import localise_onnx
from parity.results import InputSet
from tests.helpers.precision_models import mlp, rms_mlp, to_float16


@pytest.fixture(scope="module")
def rms(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """RMS norm whose x*x is past float16's range: the CPU output agrees (ONNX Runtime
    computes in float32 there), the float16 values between ops overflow."""
    root = tmp_path_factory.mktemp("fp16_fix")
    ref = rms_mlp(root / "rms.onnx")
    f16 = to_float16(ref, root / "rms_fp16.onnx")
    out, fixed = root / "r.json", root / "fixed.onnx"
    code = main(
        ["validate", "--onnx", str(ref), "--onnx", str(f16), "--atol", "1e-1", "--rtol", "1e-1",
         "--input-sets", "1", "--layers", "--json", str(out), "--write-fixed", str(fixed)]
    )  # fmt: skip
    return {"ref": ref, "code": code, "fixed": fixed,
            "layers": json.loads(out.read_text())["layers"]}  # fmt: skip


def test_the_nodes_whose_conversion_overflows_are_kept_in_float32(rms) -> None:
    layers = rms["layers"]
    assert rms["code"] == 0  # the CPU output passes: the overflow is between ops
    assert layers["first_divergence"]["onnx_value"] == "sq"
    keep = layers["keep_float32"]
    assert keep[:3] == ["square", "mean", "add_eps"] and len(keep) <= 4
    check = layers["keep_float32_check"]
    assert check["fixed"] is True and check["first_divergence_after"] is None
    assert (check["nonfinite_values_before"], check["nonfinite_values_after"]) == (1, 0)
    assert f"block={keep!r}" in check["python"]


def test_write_fixed_writes_a_float16_file_whose_values_no_longer_overflow(rms) -> None:
    fixed = rms["fixed"]
    model = onnx.load(str(fixed))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    result = localise_onnx(rms["ref"], fixed, [InputSet(0, {"x": x})])
    assert result.first_divergence is None
    assert all(v.status != "nonfinite" for v in result.values)


def test_write_fixed_without_a_fix_keeps_the_verdict_and_says_so(tmp_path: Path, capsys) -> None:
    """Nothing to fix is not an error: the exit code is the verdict's, the JSON report is the
    comparison, and a note says why no file was written (issue 36)."""
    ref = mlp(tmp_path / "mlp.onnx")
    f16 = to_float16(ref, tmp_path / "mlp_fp16.onnx")
    report = tmp_path / "r.json"
    code = main(["validate", "--onnx", str(ref), "--onnx", str(f16), "--layers", "--atol", "1e-2",
                 "--json", str(report), "--write-fixed", str(tmp_path / "f.onnx")])  # fmt: skip
    captured = capsys.readouterr()
    data = json.loads(report.read_text())
    assert data["verdict"] in ("pass", "fail") and code == {"pass": 0, "fail": 1}[data["verdict"]]
    assert data["outputs"] and "layers" in data
    assert "--write-fixed: nothing written to" in captured.out
    assert "nothing needed fixing" in captured.out and captured.err.strip() == ""
    assert not (tmp_path / "f.onnx").exists()


def test_the_layers_page_offers_the_fixed_file_with_its_python(rms) -> None:
    from streamlit.testing.v1 import AppTest

    from parity.pipeline import RunConfig, run_validation
    from parity.tolerances import Tolerance, Tolerances

    run = run_validation(
        RunConfig(
            model=None, onnx=[str(rms["ref"]), str(rms["ref"].with_name("rms_fp16.onnx"))],
            layers=True, tolerances=Tolerances(default=Tolerance(atol=1e-1, rtol=1e-1)),
        )
    )  # fmt: skip
    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    assert any("from parity.layers.fp16 import convert" in c.value for c in at.code)
    at.button(key="layers_make_fixed").click().run()
    assert not at.exception, at.exception
    made = at.session_state["parity_fixed_fp16"][1]
    assert onnx.load_from_string(made).graph.node  # the fixed file's bytes, downloadable


def test_a_bfloat16_file_keeps_the_transposes_whose_rounding_is_born_in_float32(
    tmp_path: Path,
) -> None:
    """A bfloat16 file ONNX Runtime's CPU provider runs (only its Transposes in bfloat16:
    no MatMul, Add or Sub kernels there): rounding values near 1000 to bfloat16 is born at
    the Sub that takes 1000 away. The Sub already computes in float32, so the Transposes
    upstream are kept; converted again (retyped to bfloat16) and compared, nothing is born."""
    from tests.helpers.precision_models import offset_transposes, to_bfloat16

    ref = offset_transposes(tmp_path / "ot.onnx")
    bf16 = to_bfloat16(ref, tmp_path / "ot_bf16.onnx", op_block_list=["Add", "Sub", "MatMul"])
    out, fixed = tmp_path / "r.json", tmp_path / "fixed.onnx"
    code = main(["validate", "--onnx", str(ref), "--onnx", str(bf16), "--layers", "--atol", "1",
                 "--json", str(out), "--write-fixed", str(fixed)])  # fmt: skip
    assert code == 1  # the output fails: the rounding shows at y
    layers = json.loads(out.read_text())["layers"]
    assert layers["first_divergence"]["onnx_value"] == "s"
    assert sorted(layers["keep_float32"]) == ["tr1", "tr2"]
    check = layers["keep_float32_check"]
    assert check["fixed"] is True and check["dtype"] == "bfloat16"
    assert check["op_block_list"] == ["Add", "MatMul", "Sub"]  # what the candidate keeps
    assert "dtype='bfloat16'" in check["python"]
    model = onnx.load(str(fixed))
    assert all(t.data_type != onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    assert localise_onnx(ref, fixed, [InputSet(0, {"x": x})]).first_divergence is None
    again = localise_onnx(ref, bf16, [InputSet(0, {"x": x})])
    assert again.first_divergence is not None  # the candidate itself still diverges


def test_the_largest_jump_is_said_under_its_own_dtypes_threshold(tmp_path: Path, capsys) -> None:
    """A float16 file's values are judged at float16's threshold (0.02): the terminal says
    that one, not float32's 0.0001."""
    ref = mlp(tmp_path / "mlp.onnx")
    f16 = to_float16(ref, tmp_path / "mlp_fp16.onnx")
    main(["validate", "--onnx", str(ref), "--onnx", str(f16), "--layers", "--atol", "1e-2"])
    out = capsys.readouterr().out
    assert "under its float16 threshold 0.02)" in out, out
    assert "under the threshold 0.0001" not in out
