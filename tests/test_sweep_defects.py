"""`parity sweep` defects of issue 23: a NUL byte in a pair's argument is one line (exit 2)."""

from __future__ import annotations

import json

import pytest

from parity.cli import main
from tests.sweep_zoo import copy_tiny

GOOD = ["--model", "models.py:make_tiny", "--onnx", "tiny.onnx"]


@pytest.mark.parametrize(
    "extra",
    [["--html", "a\0b.html"], ["--html=a\0b.html"], ["--atol", "1\0"], ["--save-run", "\0"]],
)
def test_a_nul_byte_in_a_pair_argument_is_one_line_exit_2(
    extra, tmp_path, model_zoo, tiny_artifacts, capsys
):
    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    manifest = zoo / "manifest.json"
    pairs = [{"name": "a", "args": [*GOOD, *extra]}]
    manifest.write_text(json.dumps({"schema": "parity.sweep/1", "pairs": pairs}))
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("parity: error: "), err
    assert "holds a NUL byte" in err and "pairs[0].args" in err
    assert not out.exists()
