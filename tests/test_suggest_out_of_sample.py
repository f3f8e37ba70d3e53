"""Suggested tolerances hold out of sample and never pass a bug (parity.analyses.fresh_check): each
is fitted on the run's input sets, then checked on as many fresh ones (another seed, larger
sizes) through the same pipeline before it is shown; an output with a bug finding gets none.
Real torch, real ONNX Runtime, a legacy export of a small conv net ending in a softmax, and a
planted bias bug that --layers confirms."""

from __future__ import annotations

import html
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from parity import validate
from parity.cli import main
from parity.judge.suggest import suggest_noise_tolerances, suggestion_lines
from parity.reports.saved_run import load_run
from tests.helpers.plant_bug import export_with_bias_bug

FACTORY = """
import torch


class SoftmaxNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv1d(4, 16, 3, padding=1)
        self.c2 = torch.nn.Conv1d(16, 32, 3, padding=1)

    def forward(self, x):
        return torch.softmax(self.c2(torch.relu(self.c1(x))) * 4, dim=1)


def make():
    torch.manual_seed(0)
    return SoftmaxNet().eval()
"""


@dataclass(frozen=True)
class Files:
    factory: str  # FILE.py:make
    model: torch.nn.Module
    clean: Path
    bug: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    tmp = tmp_path_factory.mktemp("suggest")
    path = tmp / "net.py"
    path.write_text(textwrap.dedent(FACTORY))
    scope: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)  # the same model, in the test
    model = scope["make"]()
    clean, bug = export_with_bias_bug(model, tmp)
    return Files(f"{path}:make", model, clean, bug)


def _fitted_shapes(run) -> set[str]:
    return {"x".join(map(str, s.feeds["x"].shape)) for s in run.input_sets}


def test_a_noise_floor_suggestion_on_a_clean_file_passes_fresh_seeds_and_sizes(files: Files):
    run = validate(files.model, files.clean, noise_floor=True, input_sets=2, atol=1e-9,
                   suggest=True)  # fmt: skip
    s = run.suggested_tolerances
    assert s is not None and s.basis == "rounding" and s.fitted_on == 2
    assert set(s.outputs) == {"activations"} and not s.withheld
    assert len(s.checked_on) >= 2  # at least as many fresh sets as it was fitted on
    for said in s.checked_on:  # another seed, sizes the run never used
        assert said.startswith("seed 1000, set ")
        assert said.split("x ", 1)[1] not in _fitted_shapes(run)
    # never looser than needed, never tighter than what the fit alone gave
    fit_only = suggest_noise_tolerances(run).atols["activations"]
    assert s.outputs["activations"].atol >= fit_only
    # and it holds on yet another seed and sizes, made by the user
    again = validate(files.model, files.clean, input_sets=4, seed=7,
                     dims={"b": 3, "t": 40}, tolerances=s.outputs)  # fmt: skip
    assert again.passed, [c.stats.max_abs for c in again.outputs]


def test_no_tolerance_is_suggested_for_a_bug_the_layers_confirm(files: Files, tmp_path: Path):
    run = validate(files.model, files.bug, noise_floor=True, layers=True, input_sets=2,
                   suggest=True)  # fmt: skip
    assert [f.kind for f in run.findings if f.output == "activations"] == ["bug"]
    s = run.suggested_tolerances
    assert s is not None and s.outputs == {}
    assert "a bug" in s.withheld["activations"]
    lines = suggestion_lines(s)
    assert any(line.startswith("activations: none suggested: a bug") for line in lines)
    assert not any("--tol" in line for line in lines)
    report = run.to_json()["suggested_tolerances"]
    assert report["outputs"] == {} and report["basis"] == "rounding"
    assert report["checked_on"] == []
    assert _nothing_suggested(run)  # every output withheld as a bug: none suggested, said


def test_an_observed_suggestion_says_it_has_no_rounding_measurement(files: Files) -> None:
    run = validate(files.model, files.clean, input_sets=2, atol=1e-9, suggest=True)
    s = run.suggested_tolerances
    assert s.basis == "observed" and "activations" in s.outputs and len(s.checked_on) >= 2
    head = suggestion_lines(s)[0]
    assert "float rounding" in head and "--noise-floor" in head
    assert not _nothing_suggested(run)


def test_suggest_alone_gives_no_flag_that_passes_a_planted_bias_bug(files: Files, capsys) -> None:
    """Issue 53: no --noise-floor, no --layers: the fresh sets measure the floor themselves
    (the cost said first) and the bias + 0.01 output gets no tolerance, with the reason."""
    code = main(["validate", "--model", files.factory, "--onnx", str(files.bug),
                 "--suggest", "--input-sets", "2"])  # fmt: skip
    assert code == 1
    captured = capsys.readouterr()
    assert "torch in float64 on each too" in captured.err
    assert "--tol activations" not in captured.out
    assert "activations: none suggested:" in captured.out and "not rounding" in captured.out


def test_given_inputs_cannot_be_checked_so_nothing_is_suggested(files: Files) -> None:
    x = torch.randn(2, 4, 32)
    run = validate(files.model, files.clean, inputs={"x": x}, atol=1e-9, suggest=True)
    s = run.suggested_tolerances
    assert s.outputs == {}
    assert s.withheld["activations"].startswith("not checked on fresh inputs: the run's inputs")
    assert _nothing_suggested(run)


def _nothing_suggested(run) -> bool:
    """--suggest said it suggested nothing (a finding; the withheld lines say why per output)."""
    notes = [n for n in run.analyses if n.analysis == "suggest" and not n.done]
    said = [f.text for f in run.findings if f.text.startswith("Asked for but not done (--suggest)")]
    assert len(notes) == len(said) <= 1, (notes, said)
    if said:
        assert "no tolerance is suggested for any output" in said[0], said
    return bool(said)


def test_the_cli_json_terminal_and_saved_run_carry_the_same_suggestion(
    files: Files, tmp_path: Path, capsys
) -> None:
    report, saved = tmp_path / "r.json", tmp_path / "run.parity.npz"
    page = tmp_path / "r.html"
    code = main(["validate", "--model", files.factory, "--onnx", str(files.clean),
                 "--noise-floor", "--suggest", "--atol", "1e-9", "--input-sets", "2",
                 "--json", str(report), "--save-run", str(saved), "--html", str(page)])  # fmt: skip
    assert code == 1  # at atol 1e-9 the clean file fails: the suggestion does not change that
    out = capsys.readouterr().out
    data = json.loads(report.read_text())
    suggested = data["suggested_tolerances"]
    assert set(suggested) >= {"outputs", "basis", "checked_on"}
    assert suggested["basis"] == "rounding" and len(suggested["checked_on"]) >= 2
    atol = suggested["outputs"]["activations"]["atol"]
    assert f"--tol activations={atol:g}:0" in out
    shown = html.unescape(page.read_text())
    for said in suggested["checked_on"]:
        assert said in out and said in shown
    assert f"--tol activations={atol:g}:0" in shown
    for finding in data["findings"]:  # the same findings everywhere
        assert finding["text"] in out and finding["text"] in shown
    assert load_run(saved).to_json()["suggested_tolerances"] == suggested
    # the suggestion as a tolerances file: the clean file passes with it
    tolerances = tmp_path / "tol.json"
    tolerances.write_text(json.dumps({"outputs": suggested["outputs"]}))
    code = main(["validate", "--model", files.factory, "--onnx", str(files.clean),
                 "--tolerances", str(tolerances), "--input-sets", "3", "--seed", "5"])  # fmt: skip
    assert code == 0
