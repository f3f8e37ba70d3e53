"""One verdict vocabulary (parity.verdict): runs, candidates, the CLI's exit codes, the JSON
report and sweeps give `Verdict` / `ExitCode` members, which still read as "pass"/0 etc."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import onnx
import pytest
import torch
from onnx import numpy_helper

from parity.cli import build_parser, main
from parity.cli.run import _validate
from parity.sweep.execute import PairResult
from parity.sweep.summary import counts, exit_code, result_dict, result_from_dict
from parity.verdict import ExitCode, Verdict


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(model.pt2, the export, the export with one bias nudged): a real legacy export."""
    root = tmp_path_factory.mktemp("verdict")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).eval()
    x = torch.randn(2, 4)
    pt2, good, bad = root / "m.pt2", root / "m.onnx", root / "bad.onnx"
    torch.export.save(torch.export.export(model, (x,)), str(pt2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(good), dynamo=False, input_names=["x"])
    proto = onnx.load(str(good))
    bias = next(i for i in proto.graph.initializer if "bias" in i.name)
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 0.5, bias.name))
    onnx.save(proto, str(bad))
    return pt2, good, bad


def test_members_read_as_the_strings_and_ints_they_replace() -> None:
    assert [str(v) for v in Verdict] == ["pass", "fail", "error"]
    assert Verdict.PASS == "pass" and json.dumps({"v": Verdict.ERROR}) == '{"v": "error"}'
    assert [int(c) for c in ExitCode] == [0, 1, 2]
    for verdict in Verdict:
        assert verdict.exit_code.verdict is verdict
    assert ExitCode(1) is ExitCode.FAIL and Verdict.FAIL.exit_code == 1


def test_runs_candidates_and_the_cli_give_the_enums(tiny, tmp_path: Path) -> None:
    pt2, good, bad = tiny
    for onnx_path, verdict in ((good, Verdict.PASS), (bad, Verdict.FAIL)):
        args = ["validate", "--model", str(pt2), "--onnx", str(onnx_path)]
        run = _validate(build_parser().parse_args(args))
        assert run.verdict is verdict and run.candidate(0).verdict is verdict
        report = tmp_path / f"{verdict}.json"
        code = main([*args, "--json", str(report)])
        assert code is verdict.exit_code
        assert json.loads(report.read_text())["verdict"] == str(verdict)
    code = main(["validate", "--model", str(pt2), "--onnx", str(tmp_path / "absent.onnx")])
    assert code is ExitCode.ERROR


def _pair(name: str, verdict: Verdict) -> PairResult:
    code = None if verdict is Verdict.ERROR else verdict.exit_code
    return PairResult(name, verdict, code, 0.0, None, (), None, key=name)


def test_sweep_results_summary_and_exit_code_use_the_enums(tmp_path: Path, capsys) -> None:
    results = [_pair("a", Verdict.PASS), _pair("b", Verdict.FAIL)]
    assert exit_code(results, 2) is ExitCode.FAIL
    assert exit_code(results, 3) is ExitCode.ERROR  # a pair never ran
    assert exit_code(results[:1], 1) is ExitCode.PASS
    assert counts([*results, _pair("c", Verdict.ERROR)]) == {"pass": 1, "fail": 1, "error": 1}
    again = result_from_dict(json.loads(json.dumps(result_dict(results[1]))), key="b")
    assert again.verdict is Verdict.FAIL
    with pytest.raises(ValueError, match="verdict 'maybe'"):
        result_from_dict({**result_dict(results[0]), "verdict": "maybe"})
    missing = tmp_path / "nope.json"
    assert main(["sweep", str(missing), "--out", str(tmp_path / "out")]) is ExitCode.ERROR
    assert "cannot read manifest" in capsys.readouterr().err
