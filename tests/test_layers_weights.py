"""The extra-outputs graph never holds a second copy of the weights: external weights stay in
their files, and big inline weights are moved once to a temp folder as external data (so the
graph handed to ONNX Runtime per batch is small, far from protobuf's 2 GB)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from parity.layers.extra_outputs import ExtraOutputs
from parity.load.sessions import open_session
from parity.results import InputSet


def _two_matmuls(rng: np.random.Generator) -> onnx.ModelProto:
    w1 = rng.standard_normal((64, 128)).astype(np.float32)
    w2 = rng.standard_normal((128, 16)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W1"], ["h"], name="/l1/MatMul"),
            helper.make_node("Relu", ["h"], ["r"], name="/act/Relu"),
            helper.make_node("MatMul", ["r", "W2"], ["y"], name="/l2/MatMul"),
        ],
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])],
        initializer=[numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))
    model.graph.output.extend([onnx.ValueInfoProto(name="h"), onnx.ValueInfoProto(name="r")])
    session = open_session(model.SerializeToString())
    return dict(zip(["y", "h", "r"], session.run(["y", "h", "r"], {"x": x}), strict=True))


def _check(runner: ExtraOutputs, expected: dict[str, np.ndarray], x: np.ndarray) -> None:
    with runner.session(["h", "r"]) as session:
        got = runner.run(session, ["h", "r"], InputSet(0, {"x": x}))
    for name in ("h", "r"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)
    # the graph kept and serialised per batch holds no weight bytes
    assert all(not t.raw_data for t in runner.proto.graph.initializer)
    assert len(runner.proto.SerializeToString()) < 4096


def test_inline_weights_move_to_a_temp_folder_removed_with_the_runner(tmp_path: Path) -> None:
    path = tmp_path / "inline.onnx"
    onnx.save(_two_matmuls(np.random.default_rng(0)), str(path))
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    expected = _expected(path, x)
    runner = ExtraOutputs(
        path, provider="CPUExecutionProvider", opt_level="all", externalize_over=0
    )
    folder = runner.weights_dir
    assert folder != path.parent and (folder / "weights.bin").stat().st_size >= 64 * 128 * 4
    _check(runner, expected, x)
    del runner
    gc.collect()
    assert not folder.exists()


def test_small_inline_weights_stay_in_the_model(tmp_path: Path) -> None:
    path = tmp_path / "inline.onnx"
    onnx.save(_two_matmuls(np.random.default_rng(0)), str(path))
    runner = ExtraOutputs(path, provider="CPUExecutionProvider", opt_level="all")
    assert runner.weights_dir == path.parent
    assert all(t.raw_data for t in runner.proto.graph.initializer)


def test_external_weights_stay_in_their_files(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "external.onnx"
    onnx.save(
        _two_matmuls(np.random.default_rng(0)),
        str(path),
        save_as_external_data=True,
        location="external.bin",
        size_threshold=0,
    )
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    runner = ExtraOutputs(path, provider="CPUExecutionProvider", opt_level="disable")
    assert runner.weights_dir == folder
    _check(runner, _expected(path, x), x)
