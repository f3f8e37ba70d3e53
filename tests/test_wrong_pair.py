"""A model run against another model's ONNX file is called a likely wrong pair, in words,
in the terminal, the JSON report and the dashboard, which keeps the last good run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.cli import main
from parity.labels import wrong_pair_note
from parity.pipeline import RunConfig, run_validation
from parity.reports.report import report_dict
from parity.show.format import format_run
from tests.helpers.wrong_pair import write_wrong_pair

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    return write_wrong_pair(tmp_path_factory.mktemp("wrong-pair"))


def test_a_wrong_pair_is_named_in_the_terminal_and_the_json(pair, tmp_path, capsys):
    pt2, onnx = pair
    run = run_validation(RunConfig(model=str(pt2), onnx=str(onnx)))
    note = wrong_pair_note(run)
    assert note is not None and note.startswith("likely a wrong pair")
    assert "logits, probs" in note
    assert "Likely a wrong pair" in format_run(run)
    data = report_dict(run)
    assert data["likely_wrong_pair"] is True and data["wrong_pair_note"] == note

    report = tmp_path / "r.json"
    assert main(["validate", "--model", str(pt2), "--onnx", str(onnx), "--json", str(report)]) == 1
    assert "Likely a wrong pair" in capsys.readouterr().out
    assert json.loads(report.read_text())["likely_wrong_pair"] is True


def test_a_right_pair_with_failing_values_is_not_called_a_wrong_pair():
    run = run_validation(RunConfig(model="demo:broken", onnx=None))
    assert run.verdict == "fail"
    assert wrong_pair_note(run) is None
    assert report_dict(run)["likely_wrong_pair"] is False
    assert "wrong pair" not in format_run(run)


def test_the_dashboard_says_so_and_keeps_the_last_good_run(pair):
    pt2, onnx = pair
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.button(key="demo_cnn").click().run()
    good = at.session_state["parity_run"]
    at.radio(key="model_source").set_value("Path on this machine").run()
    at.text_input(key="model_path").set_value(str(pt2)).run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").set_value(str(onnx)).run()
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    assert at.session_state["parity_run"] is good  # still the current run
    warning = "\n".join(w.value for w in at.warning)
    assert "**Likely a wrong pair**" in warning
    at.button(key="open_wrong_pair").click().run()
    assert not at.exception
    current = at.session_state["parity_run"]
    assert current is not good and current.model == str(pt2)
    assert any("Likely a wrong pair" in w.value for w in at.warning)  # said on the verdict too
