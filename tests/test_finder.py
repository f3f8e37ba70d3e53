"""An analysis's findings found by its result's name (parity.show.finder): a toy analysis
registered here, in the test, with no edit to parity.show.findings, speaks for a failing
candidate on every front (run findings, the JSON report, the terminal, a reopened saved run);
the finders' order is their rank, whatever module a caller imported first. So do a toy
analysis of the whole run (a run finder placed by its rank, its words) and toy evidence
against torch's float model (asked before the noise floor's)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from parity import validate
from parity.cli.output import format_text
from parity.files.derived_json import Form, register
from parity.reports.saved_run import load_run, save_run
from parity.results import AnalysisNote, Finding, FindingKind, OutputComparison, ValidationRun
from parity.results.by_name import analysis_result
from parity.show.finder import asked_as, evidence, finds, finds_in_run, numeric_failures
from tests.helpers.plant_bug import export_with_bias_bug


@analysis_result("toy_intended")
@dataclass(frozen=True)
class ToyResult:
    """What a toy analysis judged: the outputs it accounts for."""

    outputs: tuple[str, ...] = ()
    word: str = "toy"


@finds("toy_intended", rank=1000)
def toy_findings(run: ValidationRun, candidate: int, limit: int | None) -> list[Finding]:
    result = run.candidates[0].results["toy_intended"]
    assert isinstance(result, ToyResult)
    return [
        Finding(
            FindingKind.APPROXIMATION, f"{name}: the {result.word} explains it.", name, candidate
        )
        for name in list(numeric_failures(run))[:limit]
        if name in result.outputs
    ]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.c2 = torch.nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c2(torch.relu(self.c1(x)))


@pytest.fixture(scope="module")
def bug_run(tmp_path_factory: pytest.TempPathFactory) -> ValidationRun:
    torch.manual_seed(0)
    model = Net().eval()
    _, bug = export_with_bias_bug(model, tmp_path_factory.mktemp("finder"))
    run = validate(model, bug)
    assert not run.passed  # the planted bias fails the default tolerance
    return run


TEXT = "activations: the toy explains it."


def test_a_registered_finder_speaks_on_every_front(bug_run: ValidationRun, tmp_path: Path) -> None:
    assert TEXT not in [f.text for f in bug_run.findings]  # no toy result: not asked
    run = bug_run.with_results("toy_intended", {0: ToyResult(outputs=("activations",))})
    assert TEXT in [f.text for f in run.findings]
    # it speaks instead of --layers and --noise-floor: no "not measured" hint beside it
    assert not any(f.kind is FindingKind.UNMEASURED for f in run.findings)
    assert TEXT in [f["text"] for f in run.to_json()["findings"]]
    assert f"  - {TEXT}" in format_text(run)
    reopened = load_run(save_run(run, tmp_path / "toy.parity.npz"))
    assert reopened.candidates[0].results["toy_intended"] == ToyResult(outputs=("activations",))
    assert [f.text for f in reopened.findings] == [f.text for f in run.findings]


def test_a_result_that_judged_no_output_leaves_the_candidate_to_the_layers(
    bug_run: ValidationRun,
) -> None:
    run = bug_run.with_results("toy_intended", {0: ToyResult()})
    assert run.findings == bug_run.findings


def test_a_rank_and_a_name_are_one_finders() -> None:
    def other(run: ValidationRun, candidate: int, limit: int | None) -> list[Finding]:
        return []

    with pytest.raises(ValueError, match="already has its finder"):
        finds("another_toy", rank=1000)(other)
    with pytest.raises(ValueError, match="already has its finder"):
        finds("toy_intended", rank=1001)(other)


@pytest.mark.parametrize("first", ["", "import parity.show.approximation_findings\n"])
def test_the_order_is_the_ranks_whatever_was_imported_first(first: str) -> None:
    """A caller that imports only the findings (a saved run reopened by `parity report`), or
    the approximation's finder first, gets every finder in the same order."""
    code = (
        f"{first}import parity.show.findings\n"
        "from parity.show.finder import registered\n"
        "print([f.name for f in registered()])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['quantization', 'approximation']"


@analysis_result("toy_of_the_run", per_run=True)  # not `always`: other tests' reports stay
@dataclass(frozen=True)
class ToyRunResult:
    """A toy analysis of the whole run, written as a list (as the frozen search's is)."""

    seen: tuple[str, ...] = ()


register(ToyRunResult, Form(unwrap="seen"))
asked_as("toy_of_the_run", "--toy")


@finds_in_run("toy_of_the_run", rank=650)
def toy_run_findings(run: ValidationRun) -> list[Finding]:
    found = run.result("toy_of_the_run", ToyRunResult)
    seen = found.seen if found is not None else ()
    return [Finding(FindingKind.STATIC_AXIS, f"The toy saw {s}.") for s in seen]


def test_an_analysis_of_the_whole_run_needs_no_edit_either(
    bug_run: ValidationRun, tmp_path: Path
) -> None:
    """A result of the whole run written as a list, its run finder placed by its rank (after
    the frozen search's, before near ties and what was not measured) and its words: in the
    findings, the JSON, the terminal and a reopened run, with no edit to the codec, the
    report or the findings."""
    assert "toy_of_the_run" not in bug_run.to_json()
    run = bug_run.with_result("toy_of_the_run", ToyRunResult(("a tie",)))
    texts = [f.text for f in run.findings]
    assert "The toy saw a tie." in texts
    unmeasured = [t for t in texts if t.startswith("Not measured")]
    assert unmeasured and texts.index("The toy saw a tie.") < texts.index(unmeasured[0])
    assert run.to_json()["toy_of_the_run"] == ["a tie"]
    assert "  - The toy saw a tie." in format_text(run)
    reopened = load_run(save_run(run, tmp_path / "toy_run.parity.npz"))
    assert reopened.results["toy_of_the_run"] == ToyRunResult(("a tie",))
    assert [f.text for f in reopened.findings] == texts
    # asked for and not done: said with its own words
    noted = replace(run, analyses=(AnalysisNote("toy_of_the_run", "no toys here", False),))
    assert "Asked for but not done (--toy): no toys here." in [f.text for f in noted.findings]


@dataclass(frozen=True)
class ToyEvidence:
    """What a toy measurement against torch's float model saw: the outputs it explains."""

    outputs: tuple[str, ...] = ()


analysis_result("toy_evidence")(ToyEvidence)


def _toy_judge(
    run: ValidationRun, candidate: int, name: str, rows: list[OutputComparison]
) -> Finding | None:
    held = run.candidates[0].result("toy_evidence", ToyEvidence)
    if held is None or name not in held.outputs:
        return None
    return Finding(FindingKind.ROUNDING, f"{name}: the toy evidence explains it.", name, candidate)


evidence("toy_evidence", rank=5, judge=_toy_judge)


def test_registered_evidence_speaks_for_an_output_before_the_noise_floor(
    bug_run: ValidationRun,
) -> None:
    """Evidence against torch's float model is asked in rank order: the toy's (rank 5)
    speaks for the output before the noise floor's (20), with no edit to the findings."""
    run = bug_run.with_results("toy_evidence", {0: ToyEvidence(("activations",))})
    said = [f for f in run.findings if f.output == "activations"]
    assert said[0].text == "activations: the toy evidence explains it."
    assert "activations: the toy evidence explains it." not in [f.text for f in bug_run.findings]
