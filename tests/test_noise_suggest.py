"""The "k x rounding noise" tolerance (issue 20): with --noise-floor, Parity suggests per
output atol = k x torch's own float32 error, checks it by re-judging the run, and says when
an output still fails under it (a bug, not rounding). Real exports: a clean dynamo export and
the same file with one bias nudged; the CLI in-process, its printed flags fed back to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parity.cli import main
from parity.judge.suggest import (
    NOISE_MULTIPLES,
    noise_suggestion_lines,
    round_up_2sig,
    suggest_noise_tolerances,
)
from parity.pipeline import RunConfig, run_validation
from parity.tolerances import Tolerance, Tolerances
from tests.helpers.planted_blocks import PlantedExport, planted_export


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> PlantedExport:
    return planted_export(tmp_path_factory.mktemp("noise_suggest"))


def _run(files: PlantedExport, onnx: Path, **kw):
    return run_validation(
        RunConfig(model=str(files.pt2), onnx=str(onnx), n_input_sets=2, noise_floor=True, **kw)
    )


def test_round_up_2sig_never_rounds_down() -> None:
    assert round_up_2sig(9.62e-8) == 9.7e-8
    assert round_up_2sig(9.96e-8) == 1e-7
    assert round_up_2sig(4.2e-5) == 4.2e-5
    assert round_up_2sig(0.0) == 0.0
    for v in (1.01e-7, 3.333e-6, 9.999e-3, 7.77):
        assert round_up_2sig(v) >= v and float(f"{round_up_2sig(v):.1e}") == round_up_2sig(v)


def test_a_clean_export_passes_at_k_times_rounding_noise_and_k_is_the_smallest(blocks) -> None:
    strict = Tolerances(default=Tolerance(atol=1e-9))
    run = _run(blocks, blocks.clean_onnx, tolerances=strict)  # fails at a strict tolerance
    assert not run.passed
    s = suggest_noise_tolerances(run)
    assert s.passed and s.still_failing == ()
    assert s.k in NOISE_MULTIPLES
    torch_error = max(c.noise.torch_error for c in run.comparisons)
    (tol,) = s.tolerances.outputs.values()
    assert tol.rtol == 0 and s.k * torch_error <= tol.atol <= 1.1 * s.k * torch_error
    assert run.rejudge(s.tolerances).passed  # checked: the run passes with what is shown
    for smaller in [k for k in NOISE_MULTIPLES if k < s.k]:  # no smaller k offered would do
        assert not suggest_noise_tolerances(run, k=smaller).passed
    head, *rest = noise_suggestion_lines(s)
    assert head.startswith(f"Suggested tolerance: {s.k:g}× rounding noise")
    assert head.endswith("checked: the run passes with it")
    assert rest[0].startswith(f"y: atol {tol.atol:g}, rtol 0 ({s.k:g}× ") and "passes" in rest[0]


def test_a_planted_bug_keeps_failing_under_it_and_the_words_say_why(blocks) -> None:
    run = _run(blocks, blocks.onnx)
    s = suggest_noise_tolerances(run)
    assert not s.passed and s.still_failing == ("y",)
    for k in NOISE_MULTIPLES:  # no k offered makes it pass
        assert not run.rejudge(suggest_noise_tolerances(run, k=k).tolerances).passed
    lines = noise_suggestion_lines(s)
    assert lines[0].endswith("checked: y still fails with it")
    (line,) = [x for x in lines if x.startswith("y: ")]
    assert "still fails: not rounding: " in line and "a bug that no rounding tolerance" in line


def test_cli_prints_the_checked_suggestion_and_its_flags_pass(blocks, capsys) -> None:
    """--suggest: fitted on the run's sets, checked on fresh ones (parity.analyses.fresh_check),
    printed with its flags; the planted bug gets none; --noise-floor alone prints a hint."""
    args = ["validate", "--model", str(blocks.pt2), "--onnx", str(blocks.clean_onnx)]
    assert main([*args, "--atol", "1e-9", "--noise-floor", "--suggest"]) == 1
    text = capsys.readouterr().out
    said = re.search(
        r"Suggested tolerances \(\d+× the measured rounding noise, rtol 0\), "
        r"fitted on (\d+) input sets?, checked on (\d+) fresh input sets?",
        text,
    )
    assert said, text
    fitted, checked = int(said.group(1)), int(said.group(2))
    assert fitted == 2 and checked >= fitted  # the run's two default sizes, then as many fresh
    flags = re.search(r"As flags: (.*)", text).group(1).split()
    assert flags[0] == "--tol" and flags[1].startswith("y=")
    assert main([*args, "--atol", "1e-9", *flags]) == 0  # what was printed passes the run
    capsys.readouterr()

    assert main(["validate", "--model", str(blocks.pt2), "--onnx", str(blocks.onnx),
                 "--noise-floor", "--suggest"]) == 1  # fmt: skip
    text = capsys.readouterr().out
    assert "y: none suggested: a bug" in text and "As flags" not in text

    assert main([*args, "--atol", "1e-9", "--noise-floor"]) == 1  # no --suggest: a hint only
    text = capsys.readouterr().out
    assert "Suggested tolerance" not in text and "--suggest" in text
