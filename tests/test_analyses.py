"""Issue 52: the optional analyses are stages of the one loop behind one interface
(parity.analyses). The fronts set RunConfig fields only; an analysis asked for is never
silently absent; its note survives a save and is said among the findings."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from parity import validate
from parity.analyses.order import ANALYSES, wanted_analyses
from parity.cli import main
from parity.reports.saved_run import load_run, save_run
from parity.run.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
FRONTS = [
    ROOT / "core" / "api.py",
    *(ROOT / "core" / "cli").glob("*.py"),
    *(ROOT / "pages").glob("*.py"),
]


class FloatConstant(torch.nn.Module):
    """Multiplies by a float32 constant made in forward: the model cannot run in float64."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) @ torch.ones(3, 3)


class Float32Only(FloatConstant):
    """Refuses any input but float32, as a model checking its dtype does: no float64 run."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"expected float32 input, got {x.dtype}")
        return super().forward(x)


def make_float_constant() -> torch.nn.Module:
    torch.manual_seed(0)
    return FloatConstant().eval()


def make_float32_only() -> torch.nn.Module:
    torch.manual_seed(0)
    return Float32Only().eval()


def _exported(
    model: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory
) -> tuple[torch.nn.Module, Path]:
    """`model` and its legacy export with a dynamic batch."""
    path = tmp_path_factory.mktemp("analyses") / "m.onnx"
    torch.onnx.export(
        model, (torch.randn(2, 4),), str(path), dynamo=False, input_names=["x"],
        output_names=["y"], dynamic_axes={"x": {0: "b"}},
    )  # fmt: skip
    return model, path


@pytest.fixture(scope="module")
def float_constant(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return _exported(make_float_constant(), tmp_path_factory)


@pytest.fixture(scope="module")
def no_float64(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return _exported(make_float32_only(), tmp_path_factory)


def test_the_analyses_run_in_order_each_when_its_setting_asks() -> None:
    names = [cls.name for cls in ANALYSES]
    assert names == [
        "training_mode", "frozen", "noise_floor", "approximation", "layers", "quantization",
        "stages", "suggest", "repro",
    ]  # fmt: skip
    plain = RunConfig(model=None, onnx=("a.onnx", "b.onnx"))
    # on by default: they act only where a file trains or has weight-only quantized ops
    assert [a.name for a in wanted_analyses(plain)] == ["training_mode", "quantization"]
    off = RunConfig(model=None, onnx=("a.onnx", "b.onnx"), quantized_reference=False)
    assert [a.name for a in wanted_analyses(off)] == ["training_mode"]
    asked = RunConfig(model="demo:broken", onnx=None, noise_floor=True, suggest=True, repro="r")
    assert [a.name for a in wanted_analyses(asked)] == [
        "training_mode", "frozen", "noise_floor", "approximation", "layers", "quantization",
        "suggest", "repro",
    ]  # fmt: skip


def test_the_fronts_import_no_analysis() -> None:
    """The API, the CLI and the pages set RunConfig fields and render the run."""
    offenders = []
    for path in FRONTS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("parity.analyses")]
    assert offenders == []


def test_a_noise_floor_that_cannot_be_measured_says_why(no_float64, tmp_path: Path) -> None:
    model, path = no_float64
    run = validate(model, str(path), noise_floor=True)
    assert all(c.noise is None for c in run.outputs)
    (note,) = [n for n in run.analyses if n.analysis == "noise_floor"]
    assert not note.done and "float64" in note.text
    said = [f.text for f in run.findings if "--noise-floor" in f.text]
    assert said and "Asked for but not done" in said[0] and "float64" in said[0]
    back = load_run(save_run(run, tmp_path / "r.parity.npz"))
    assert back.analyses == run.analyses


def test_a_model_that_makes_float32_tensors_gets_its_floor_by_promotion(float_constant) -> None:
    """`.double()` alone raises (a float32 constant made in forward); every op promoted to
    float64 measures the floor, and the noise block and the finding say how."""
    model, path = float_constant
    run = validate(model, str(path), noise_floor=True, atol=1e-12, rtol=0.0)
    assert all(c.noise is not None for c in run.outputs), [c.notes for c in run.outputs]
    assert all("promoted to float64" in c.noise.emulated for c in run.outputs)
    assert not [n for n in run.analyses if n.analysis == "noise_floor"]
    said = " ".join(f.text for f in run.findings)
    assert "promoted to float64" in said and "not done" not in said


def test_the_json_report_lists_the_analyses(no_float64, tmp_path: Path, capsys) -> None:
    _, path = no_float64
    out = tmp_path / "r.json"
    spec = f"{Path(__file__).resolve()}:make_float32_only"
    code = main(["validate", "--model", spec, "--onnx", str(path), "--noise-floor",
                 "--json", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr()
    report = json.loads(out.read_text())
    assert [a["analysis"] for a in report["analyses"]] == ["noise_floor"]
    assert report["analyses"][0]["done"] is False


def test_suggest_says_its_fresh_sets_before_they_run_off_a_terminal(capsys) -> None:
    """--suggest is a RunConfig field; its stage announces the cost even when stderr is a
    file (progress is not)."""
    assert main(["validate", "--model", "demo:broken", "--suggest"]) == 1
    err = capsys.readouterr().err
    assert "Checking the suggested tolerances on 4 fresh input sets" in err
