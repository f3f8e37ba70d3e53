"""`--repro DIR` (issue 20): a folder anyone can run with numpy, onnx and onnxruntime only.

repro.py runs in a fresh `python -I` whose imports are limited to those three (and what
they import themselves): it exits 1 on the planted bug; with the clean weights patched back
into model.onnx it exits 0. A clean run writes no folder and says so in one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from parity.api import validate
from parity.cli import main
from tests.helpers.layers_deep import PLANTED_BLOCK, DeepExport, deep_export

# what numpy, onnx and onnxruntime import themselves
ALLOWED = {
    "numpy", "onnx", "onnxruntime", "google", "ml_dtypes", "typing_extensions", "packaging",
    "flatbuffers", "sympy", "mpmath", "coloredlogs", "humanfriendly",
}  # fmt: skip

GUARD = textwrap.dedent(
    """
    import importlib.abc, runpy, sys
    ALLOWED = set(sys.argv[2].split(","))
    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top in sys.stdlib_module_names or top in ALLOWED or top.startswith("_"):
                return None
            raise ImportError(f"repro.py may not import {name}")
    sys.meta_path.insert(0, Refuse())
    sys.argv = [sys.argv[1]]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        assert "torch" not in sys.modules and "parity" not in sys.modules
    """
)


def run_repro(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-c", GUARD, str(folder / "repro.py"), ",".join(ALLOWED)],
        capture_output=True,
        text=True,
        cwd=folder.parent,
        timeout=120,
    )


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> DeepExport:
    return deep_export(tmp_path_factory.mktemp("deep"))


def test_cli_repro_runs_alone_and_agrees_once_fixed(deep, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "repro"
    assert main(["validate", "--model", str(deep.pt2), "--onnx", str(deep.onnx),
                 "--repro", str(folder)]) == 1  # fmt: skip
    assert f"repro written to {folder}" in capsys.readouterr().out
    model = onnx.load(str(folder / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node] == ["Add"]
    assert sorted(p.name for p in (folder / "test_data_set_0").iterdir()) == [
        "input_0.pb", "output_0.pb"]  # fmt: skip
    readme = (folder / "README.md").read_text()
    for word in (f"blocks.{PLANTED_BLOCK}", "node_add_", "--repro", "onnxruntime ", "torch ",
                 "parity ", "ai.onnx 20", "dynamo"):  # fmt: skip
        assert word in readme, word

    # the expected output is torch's value of the node: the clean export computes it
    import onnxruntime as ort

    expected = numpy_helper.to_array(_tensor(folder / "test_data_set_0/output_0.pb"))
    x = numpy_helper.to_array(_tensor(folder / "test_data_set_0/input_0.pb"))
    assert np.isfinite(expected).all() and expected.shape == x.shape

    done = run_repro(folder)
    assert done.returncode == 1, done.stderr
    assert "DISAGREES" in done.stdout and "worst element" in done.stdout

    clean = {t.name: t for t in onnx.load(str(deep.clean_onnx)).graph.initializer}
    for t in model.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(
            numpy_helper.to_array(clean[t.name.removesuffix("__planted")]), t.name))  # fmt: skip
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    fixed = run_repro(folder)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "agrees" in fixed.stdout
    assert ort.get_available_providers()


def test_clean_run_writes_no_repro(deep, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "repro"
    main(["validate", "--model", str(deep.pt2), "--onnx", str(deep.clean_onnx),
          "--repro", str(folder)])  # fmt: skip
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "repro" in ln]
    assert lines == ["no repro written: no op was confirmed where an error is born (clean run)"]
    assert not folder.exists()


def test_api_repro(deep, tmp_path: Path) -> None:
    folder = tmp_path / "api-repro"
    run = validate(str(deep.pt2), str(deep.onnx), repro=folder)
    assert run.layers is not None and run.layers.first_divergence.onnx_value == deep.planted_value
    assert (folder / "model.onnx").is_file() and (folder / "repro.py").is_file()
    assert "parity.validate(" in (folder / "README.md").read_text()


def _tensor(path: Path) -> onnx.TensorProto:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return t


def test_layers_page_says_the_birth_and_offers_the_repro_zip(deep) -> None:
    import io
    import zipfile

    from streamlit.testing.v1 import AppTest

    from parity.layers.repro import repro_zip
    from parity.pipeline import RunConfig, run_validation

    run = run_validation(RunConfig(model=str(deep.pt2), onnx=str(deep.onnx), layers=True))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    text = "\n".join(t.value for t in at.text)
    assert "alone still errs by" in text and "the error is born here" in text
    assert "carried: 'blocks.6.act': Gelu node" in text
    labels = [str(b.proto.label) for b in at.get("download_button")]
    assert "Download a standalone repro (.zip)" in labels, labels
    names = zipfile.ZipFile(io.BytesIO(repro_zip(run.layers, command="x", onnx_path=run.onnx)))
    assert {"repro/model.onnx", "repro/repro.py", "repro/README.md",
            "repro/test_data_set_0/input_0.pb", "repro/test_data_set_0/output_0.pb"} == set(
        names.namelist())  # fmt: skip
