"""What the provider really computed a float16 file in (issue 21): read from the graph
ONNX Runtime made, said in the candidate's notes and on the Overview by the verdict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from streamlit.testing.v1 import AppTest

from parity.dashboard.text import md_text
from parity.load.provider_precision import precision_notes, provider_precision
from parity.pipeline import RunConfig, run_validation
from parity.tolerances import Tolerance, Tolerances
from tests.helpers.precision_models import rms_mlp, to_float16

APP = str(Path(__file__).resolve().parents[1] / "app.py")
CPU = "CPUExecutionProvider"


@pytest.fixture(scope="module")
def rms_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rms")
    ref = rms_mlp(root / "rms.onnx")
    return ref, to_float16(ref, root / "rms_fp16.onnx")


def test_float16_rms_norm_overflows_in_float16_but_the_cpu_ran_it_in_float32(rms_pair):
    """The premise: x*x of this file's values is past float16's range, yet the CPU run of
    its float16 file agrees with float32 (ONNX Runtime cast the ops to float32)."""
    ref, f16 = rms_pair
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    run = lambda p: ort.InferenceSession(str(p), providers=[CPU]).run(None, {"x": x})[0]  # noqa: E731
    h = x @ numpy_helper.to_array(onnx.load(str(ref)).graph.initializer[0])
    with np.errstate(over="ignore"):
        assert not np.isfinite(h.astype(np.float16) * h.astype(np.float16)).all()
    assert np.abs(run(f16) - run(ref)).max() < 2e-2
    found = provider_precision(f16, CPU)
    assert found is not None and found.dtype == "float16"
    assert found.total == 7 and found.in_float32 == 7  # MatMul, Mul, ReduceMean, ... all
    assert found.note.startswith("ONNX Runtime ran 7 of 7 float16 nodes in float32 on CPU")
    assert found.note.endswith("a GPU run may differ")


def test_nodes_with_a_float16_kernel_on_cpu_are_not_counted(tmp_path: Path) -> None:
    """Transpose (and Relu, inlined by ONNX Runtime as Max) run in float16 on CPU; only
    the MatMul is cast: the count comes from ONNX Runtime's graph, not from the op list."""
    w = numpy_helper.from_array(np.ones((2, 2), np.float16), "w")
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], name="tr", perm=[1, 0]),
        helper.make_node("Relu", ["t"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 2])],
        [w],
    )
    path = tmp_path / "mixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    found = provider_precision(path, CPU)
    assert found is not None and (found.in_float32, found.total) == (1, 3)


def test_a_float32_file_gets_no_note(rms_pair) -> None:
    assert provider_precision(rms_pair[0], CPU) is None


@pytest.fixture(scope="module")
def fp16_run(rms_pair):
    ref, f16 = rms_pair
    config = RunConfig(
        model=None, onnx=[str(ref), str(f16)],
        tolerances=Tolerances(default=Tolerance(atol=1e-2, rtol=1e-2)),
    )  # fmt: skip
    return run_validation(config)


def test_the_candidate_notes_say_it_and_the_overview_shows_it_by_the_verdict(fp16_run) -> None:
    (info,) = fp16_run.infos
    (note,) = precision_notes(info.notes)
    assert "7 of 7 float16 nodes in float32 on CPU" in note
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["parity_run"] = fp16_run
    at.session_state["parity_tolerances"] = fp16_run.tolerances
    at.switch_page("pages/overview.py").run()
    assert not at.exception, at.exception
    assert any(md_text(note) in c.value for c in at.caption)
