"""The verdict by cause (`--judge cause`, `validate(judge="cause")`): a clean int8 file whose
outputs fail 1e-5 exits 0 (the difference is what its quantization costs, measured), a real
bug exits 1 whatever the tolerance (a tolerance loose enough to pass it is said to hide it),
and the default judge keeps the tolerance's rule. Real exports and a real quantizer: a small
MLP exported by torch.onnx (legacy), int8 by ONNX Runtime's quantize_dynamic, a bias moved by
0.05 in one Gemm."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from parity import validate
from parity.cli import main
from parity.results import FindingKind
from tests.helpers.deploy_matrix import record, right
from tests.helpers.plant_bug import plant

HIDDEN = "a bug the tolerance hides"


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make() -> torch.nn.Module:
    """The factory the CLI cases load (`tests/test_judge_cause.py:make`)."""
    return Mlp().eval()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("cause")
    clean = folder / "mlp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            make(), (torch.randn(4, 16),), str(clean), dynamo=False, input_names=["x"],
            output_names=["y"], dynamic_axes={"x": {0: "b"}},
        )  # fmt: skip
        quantize_dynamic(
            str(clean), str(folder / "int8.onnx"), op_types_to_quantize=["MatMul", "Gemm"],
            weight_type=QuantType.QInt8,
        )  # fmt: skip
    bug = folder / "bug.onnx"
    plant(clean, bug, "/net/net.2/Gemm", "bias", 0.05)
    return {"clean": clean, "int8": folder / "int8.onnx", "bug": bug}


def test_a_clean_int8_file_fails_the_tolerance_and_passes_by_cause(files) -> None:
    by_tolerance = validate(make(), files["int8"])
    assert by_tolerance.verdict == "fail"  # int8 weights move y far beyond 1e-5
    run = validate(make(), files["int8"], judge="cause")
    assert run.verdict == "pass" and run.tolerance_verdict == "fail"
    row = record(run, tool="ORT quantize_dynamic", option="MatMul/Gemm, QInt8",
                 architecture="MLP (legacy export)")  # fmt: skip
    assert right(row), row
    kinds = {f.kind for f in run.findings}
    assert FindingKind.BUG not in kinds and FindingKind.QUANTIZATION in kinds
    assert any(f.kind is FindingKind.QUANTIZATION and f.output == "y" for f in run.findings)


def test_a_bug_fails_by_cause_and_a_loose_tolerance_is_said_to_hide_it(files) -> None:
    run = validate(make(), files["bug"], judge="cause")
    assert run.verdict == "fail"
    row = record(run, tool="torch.onnx (legacy)", option="float32",
                 architecture="MLP (legacy export)", planted_at="y")  # fmt: skip
    assert right(row), row
    loose = validate(make(), files["bug"], atol=1.0, judge="cause")
    assert loose.tolerance_verdict == "pass"  # 0.05 is within atol 1
    assert loose.verdict == "fail"
    hidden = [f for f in loose.findings if f.kind is FindingKind.BUG]
    assert hidden and hidden[0].output == "y" and HIDDEN in hidden[0].text
    # the default judge keeps the tolerance's rule, and still says what the floor showed
    said = validate(make(), files["bug"], atol=1.0, noise_floor=True)
    assert said.verdict == "pass"
    assert any(HIDDEN in f.text for f in said.findings if f.kind is FindingKind.BUG)


def test_a_clean_float32_file_passes_by_cause_at_any_tolerance(files) -> None:
    run = validate(make(), files["clean"], atol=0.0, rtol=0.0, judge="cause")
    # exact on some CPUs, rounding on others: either way no bug, and the verdict passes
    assert run.verdict == "pass", [f.text for f in run.findings]
    assert not [f for f in run.findings if f.kind is FindingKind.BUG]


def test_a_run_is_judged_again_by_cause_from_what_it_measured(files) -> None:
    run = validate(make(), files["int8"], noise_floor=True)
    assert run.verdict == "fail"
    assert run.rejudge(judge="cause").verdict == "pass"
    assert run.rejudge(judge="cause").rejudge(atol=1e-9).verdict == "pass"
    with pytest.raises(ValueError, match="'tolerance' or 'cause'"):
        run.rejudge(judge="strict")


def test_the_cli_exits_by_cause_and_the_json_says_both_verdicts(
    files, tmp_path: Path, capsys
) -> None:
    model = f"{Path(__file__).resolve()}:make"
    report = tmp_path / "r.json"
    argv = ["validate", "--model", model, "--onnx", str(files["int8"]), "--json", str(report)]
    assert main(argv) == 1
    capsys.readouterr()
    assert main([*argv, "--judge", "cause"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("PASS by cause:") and "quantization" in last, last
    data = json.loads(report.read_text())
    assert (data["judge"], data["verdict"], data["tolerance_verdict"]) == ("cause", "pass", "fail")
    bug = ["validate", "--model", model, "--onnx", str(files["bug"]), "--judge", "cause"]
    assert main([*bug, "--atol", "1"]) == 1
    out = capsys.readouterr().out
    assert "\nFAIL by cause: a bug (y)" in out and HIDDEN in out
    assert "--suggest" not in out  # no tolerance is offered for a bug


def test_a_saved_run_keeps_its_judge(files, tmp_path: Path) -> None:
    from parity.reports.saved_run import load_run

    run = validate(make(), files["int8"], judge="cause")
    opened = load_run(run.save(tmp_path / "r.parity.npz"))
    assert opened.judge == "cause" and opened.verdict == "pass"


def test_an_unknown_judge_is_one_line_naming_the_keyword(files) -> None:
    from parity.errors import UsageError

    with pytest.raises(UsageError, match="judge"):
        validate(make(), files["clean"], judge="strict")


def test_a_set_tolerance_says_what_it_forgives_in_the_terminal_and_json(
    files, tmp_path: Path, capsys
) -> None:
    model = f"{Path(__file__).resolve()}:make"
    report = tmp_path / "r.json"
    argv = ["validate", "--model", model, "--onnx", str(files["bug"]), "--atol", "0.1"]
    assert main([*argv, "--noise-floor", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "What the tolerances forgive:" in out and "float32 rounding" in out
    (entry,) = json.loads(report.read_text())["tolerance_forgives"]
    assert entry["output"] == "y" and entry["atol"] == 0.1 and entry["precision"] == "float32"
    assert entry["times"] == pytest.approx(0.1 / entry["floor"])
    assert entry["times"] > 1000  # 0.1 is thousands of times float32 rounding here


def test_the_tolerances_page_says_a_bug_its_slider_hides(files) -> None:
    from streamlit.testing.v1 import AppTest

    from parity.tolerances import Tolerances

    run = validate(make(), files["bug"], noise_floor=True)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = Tolerances()
    at.switch_page("pages/tolerances.py").run()
    assert not at.exception and not [e for e in at.error if HIDDEN in e.value]
    at.select_slider(key="tol_atol").set_value(1.0).run()
    assert not at.exception
    assert [e for e in at.error if HIDDEN in e.value]  # passes the slider, said as a bug
    assert any("float32 rounding" in c.value and "passes an error" in c.value for c in at.caption)
