"""One ONNX Runtime session factory: every session Parity runs is built by
`parity.load.sessions.open_session`, which decides SessionOptions in one place."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity.load.sessions import ORT_OPT_LEVELS, open_session

CORE = Path(__file__).resolve().parents[1] / "core"
FACTORY = CORE / "load" / "sessions.py"
# repro.py writes a standalone script for users: the call there is text, not Parity's session
GENERATED_TEXT = {CORE / "layers" / "repro.py"}


def test_no_module_outside_the_factory_builds_a_session() -> None:
    pattern = re.compile(r"\bInferenceSession\s*\(|\bSessionOptions\s*\(")
    offenders = [
        f"{path.relative_to(CORE)}:{n}"
        for path in sorted(CORE.rglob("*.py"))
        if path != FACTORY and path not in GENERATED_TEXT
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
    assert pattern.search(FACTORY.read_text())


def _matmul_model(weight: np.ndarray) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", weight.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", weight.shape[1]])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        "mm",
        [x],
        [y],
        initializer=[numpy_helper.from_array(weight, name="W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("opt_level", ORT_OPT_LEVELS)
def test_a_file_runs_at_every_opt_level(tmp_path: Path, opt_level: str) -> None:
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = tmp_path / "m.onnx"
    onnx.save(_matmul_model(w), str(path))
    x = np.ones((2, 3), np.float32)
    (got,) = open_session(path, opt_level=opt_level).run(None, {"x": x})
    np.testing.assert_array_equal(got, x @ w)


def test_bytes_read_their_external_weights_from_the_folder_given(tmp_path: Path) -> None:
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    path = tmp_path / "ext.onnx"
    onnx.save(
        _matmul_model(w),
        str(path),
        save_as_external_data=True,
        location="ext.bin",
        size_threshold=0,
    )
    graph_only = onnx.load(str(path), load_external_data=False).SerializeToString()
    assert len(graph_only) < w.nbytes  # the weights are not in the bytes handed over
    x = np.ones((1, 64), np.float32)
    session = open_session(graph_only, external_folder=tmp_path, cpu_arena=False)
    (got,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got, x @ w, rtol=1e-5)
    with pytest.raises(Exception, match="(?i)external|ext.bin|no such file"):
        open_session(graph_only)  # bytes have no folder of their own


def test_the_optimised_graph_is_written_where_asked(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_matmul_model(np.eye(3, dtype=np.float32)), str(path))
    written = tmp_path / "ran.onnx"
    open_session(path, opt_level="disable", optimized_path=written, intra_op_threads=1)
    assert [n.op_type for n in onnx.load(str(written)).graph.node] == ["MatMul"]


def test_an_unknown_opt_level_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_matmul_model(np.eye(2, dtype=np.float32)), str(path))
    with pytest.raises(ValueError, match="fastest"):
        open_session(path, opt_level="fastest")


def test_the_crash_probe_runs_once_per_content_provider_and_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard writes a file anew for each run: the forked probe (real fork, real ONNX
    Runtime) runs once per content x provider x level, wherever the bytes lie."""
    from parity.load import sessions

    probes: list[tuple[str, str]] = []
    real = sessions._probe

    def counted(path: str, provider: str, opt_level: str) -> str | None:
        probes.append((Path(path).parent.name, opt_level))
        return real(path, provider, opt_level)

    monkeypatch.setattr(sessions, "_probe", counted)
    model = _matmul_model(np.eye(3, dtype=np.float32))
    model.doc_string = str(tmp_path)  # content no earlier test of this process probed
    first, second = tmp_path / "run1" / "m.onnx", tmp_path / "run2" / "upload.onnx"
    for path in (first, second):
        path.parent.mkdir()
        onnx.save(model, str(path))
    cpu = "CPUExecutionProvider"
    for path in (first, first, second):
        assert sessions.crash_of(path, provider=cpu, opt_level="all") is None
    assert probes == [("run1", "all")]
    assert sessions.opening_level(second, provider=cpu, opt_level="all") == ("all", None)
    assert sessions.crash_of(second, provider=cpu, opt_level="disable") is None
    assert probes == [("run1", "all"), ("run2", "disable")]
    model.doc_string += " changed"  # new content at a path already probed: probed again
    onnx.save(model, str(first))
    assert sessions.crash_of(first, provider=cpu, opt_level="all") is None
    assert probes == [("run1", "all"), ("run2", "disable"), ("run1", "all")]
