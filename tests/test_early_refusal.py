"""Refusals before loading (parity.run.early_check): every name or axis a flag gives is
checked against the ONNX signature before torch and the model load. The model is a Python
factory file that leaves a marker file when it is imported: a refusal that comes first never
creates it. Real legacy export, real CLI."""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from parity import UsageError, validate
from parity.cli import main

FACTORY = """
from pathlib import Path

Path({marker!r}).write_text("imported")

import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv1d(4, 8, 3, padding=1), torch.nn.ReLU()).eval()
"""


@pytest.fixture()
def files(tmp_path: Path) -> tuple[str, Path, Path]:
    marker = tmp_path / "imported.txt"
    factory = tmp_path / "net.py"
    factory.write_text(textwrap.dedent(FACTORY.format(marker=str(marker))))
    torch.manual_seed(0)  # the factory's model, weights and all
    model = torch.nn.Sequential(torch.nn.Conv1d(4, 8, 3, padding=1), torch.nn.ReLU()).eval()
    onnx_path = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 4, 16),), str(onnx_path), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b", 2: "t"}})  # fmt: skip
    return f"{factory}:make", onnx_path, marker


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tol", "yy=1e-3"], "tolerance for unknown output(s) 'yy'; the outputs are: 'y'"),
        (["--dim", "bb=4"], "no symbolic dim 'bb'"),
        (["--dim", "x:0=4"], "that axis is the symbolic dim 'b'"),
        (["--int-range", "xx=0:5"], "no input 'xx'"),
    ],
)
def test_a_typo_is_refused_before_the_model_is_imported(files, flags, said, capsys) -> None:
    spec, onnx_path, marker = files
    assert main(["validate", "--model", spec, "--onnx", str(onnx_path), *flags]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert not marker.exists()  # the factory never ran


def test_a_tolerances_files_typo_is_refused_before_the_model_too(files, tmp_path, capsys):
    spec, onnx_path, marker = files
    tolerances = tmp_path / "tol.json"
    tolerances.write_text(json.dumps({"outputs": {"why": {"atol": 1e-3}}}))
    args = ["validate", "--model", spec, "--onnx", str(onnx_path), "--tolerances", str(tolerances)]
    assert main(args) == 2
    assert "unknown output(s) 'why'" in capsys.readouterr().err
    assert not marker.exists()
    with pytest.raises(UsageError, match="unknown output"):  # the API asks the same check
        validate(spec, onnx_path, tolerances={"why": 1e-3})
    assert not marker.exists()
    # and a right name runs: the factory is imported then
    assert main(["validate", "--model", spec, "--onnx", str(onnx_path), "--tol", "y=1e-3"]) == 0
    assert marker.exists()
