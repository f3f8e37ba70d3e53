"""`--model-explorer FILE.json`: refused without a layers comparison, with one line and exit 2."""

from __future__ import annotations

from parity.cli import main
from parity.verdict import ExitCode


def test_model_explorer_without_layers_is_a_usage_error_before_the_run(tmp_path, capsys):
    out = tmp_path / "nodes.json"
    assert main(["validate", "--model", "demo:cnn", "--model-explorer", str(out)]) == ExitCode.ERROR
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "parity: error: --model-explorer needs --layers (it colours the compared layers)"
    assert not out.exists()


def test_a_saved_run_without_layers_has_no_node_data_to_write(tmp_path, capsys):
    saved, out = tmp_path / "cnn.parity.npz", tmp_path / "nodes.json"
    assert main(["validate", "--model", "demo:cnn", "--save-run", str(saved)]) == 0
    capsys.readouterr()
    assert main(["report", str(saved), "--model-explorer", str(out)]) == ExitCode.ERROR
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "this run was made without --layers" in line
    assert not out.exists()
