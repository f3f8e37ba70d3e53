"""A failure by its cause (parity.show.cause_labels) and "In numbers" as short lines
(parity.show.sentences.output_facts), issue 60 job 3.

The real case: demo:fp16's float16 export and a copy with a planted bug (a Linear's weight
x1.3), side by side with the noise floor measured. Both fail atol 1e-5; the float16 file's
outputs are intended ("float16 rounding") and the bug's are not, in every front's words: the
rows the tables show, the terminal's candidates table, the JSON report's `intended`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parity.judge.compare import compare_outputs
from parity.tolerances import Tolerance


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    from parity.cli import main
    from parity.load.demos import SHIPPED_DIR
    from parity.reports.saved_run import load_run
    from tests.helpers.plant_bug import plant

    folder = tmp_path_factory.mktemp("cause_labels")
    fp16 = folder / "fp16.onnx"
    fp16.write_bytes(next(Path(SHIPPED_DIR).glob("fp16-*.onnx")).read_bytes())
    bug = folder / "bug.onnx"
    plant(fp16, bug, "node_linear", "scale", 0.3)
    saved = folder / "run.parity.npz"
    args = ["validate", "--model", "demo:fp16", "--onnx", str(fp16), "--onnx", str(bug)]
    assert main([*args, "--noise-floor", "--input-sets", "1", "--save-run", str(saved)]) == 1
    return load_run(saved)  # as the dashboard and `parity report` read it


def test_the_float16_file_is_intended_and_the_bug_is_not(side_by_side) -> None:
    from parity.reports.report import report_dict
    from parity.results import FindingKind
    from parity.show.candidates_text import candidates_table
    from parity.show.cause_labels import intended_outputs, run_cause
    from parity.show.rows import comparison_rows

    run = side_by_side
    assert run.tolerance_verdict == "fail"
    assert [c.passed for c in run.candidates] == [False, False]  # both fail atol 1e-5
    names = set(run.output_names)
    assert intended_outputs(run) == {(0, n): "float16 rounding" for n in names}
    # one story: an intended output has no bug finding, and every bug output stays red
    bugs = {(f.candidate, f.output) for f in run.findings if f.kind is FindingKind.BUG}
    assert bugs == {(1, n) for n in names}
    assert run_cause(run, 0).intended == "float16 rounding" and run_cause(run, 0).css == "intended"
    assert run_cause(run, 1).intended == "" and run_cause(run, 1).css == "fail"
    assert run_cause(run).css == "fail"  # the run as a whole holds a bug

    rows = comparison_rows(run)
    said = {(r.candidate, r.name): r.cell("status", "marked") for r in rows}
    assert {k: v for k, v in said.items() if k[0] == 0} == {
        (0, n): "≈ float16 rounding" for n in names
    }
    assert {v for k, v in said.items() if k[0] == 1} == {"✗ fail"}
    table = candidates_table(run).splitlines()
    assert all(line.count("float16 rounding") == 1 and "FAIL" in line for line in table[2:])
    # the terminal's rounding-noise block: each candidate's own floor, labelled, so #0's
    # float16 rounding is never said "not rounding" beside the bug's
    from parity.cli.output import format_text

    block = format_text(run).split("Rounding noise (against torch in float64):\n", 1)[1]
    noise = [line.strip() for line in block.split("\n\n", 1)[0].splitlines()]
    assert {line.split(":", 1)[0] for line in noise} == {i.label for i in run.infos}
    assert not [line for line in noise if line.startswith("#0 ") and "not rounding" in line]
    assert [line for line in noise if line.startswith("#1 ") and "not rounding" in line]
    intended = report_dict(run)["intended"]
    assert sorted((e["candidate"], e["output"], e["label"]) for e in intended) == sorted(
        (0, n, "float16 rounding") for n in names
    )


def _one_output_run(onnx: np.ndarray, ref: np.ndarray):
    from parity.results import InputSet, OutputSet, ValidationRun
    from parity.tolerances import Tolerances

    tol = Tolerance(atol=1e-5, rtol=0.0)
    comp = compare_outputs(ref, onnx, name="logits", input_set=0, tolerance=tol)
    return ValidationRun.from_rows(
        model="m", onnx="m.onnx", signature=None, tolerances=Tolerances(tol), environment={},
        input_sets=(InputSet(0, {"x": np.zeros((4, 3), np.float32)}),), outputs=(comp,),
        ref_outputs=(OutputSet({"logits": ref}),), onnx_outputs=(OutputSet({"logits": onnx}),),
    )  # fmt: skip


def test_in_numbers_is_one_short_fact_a_line() -> None:
    """The 70-word sentence, as lines: the head, how many fail at which tolerance, the
    worst element (both values with the digits that tell them apart), where; numbers as
    parity.text writes them; the HTML report shows the same lines."""
    from parity.judge.where import where_of
    from parity.reports.html_report import render_html_report
    from parity.show.sentences import failing_outputs, output_facts
    from parity.text import html_text

    ref = np.linspace(-1.0, 1.0, 4 * 1000, dtype=np.float32).reshape(4, 1000)
    onnx = ref.copy()
    onnx[:, 7] += np.float32(0.25)  # one column off in every row
    run = _one_output_run(onnx, ref)
    (worst,) = failing_outputs(run)
    facts = output_facts(run, worst, where_of(run, worst))
    assert facts.head == "logits fails"
    count, worst_line, where = facts.lines
    assert count == "Out of tolerance: 4 of 4,000 elements (0.1%) at atol 1e-05, rtol 0"
    assert worst_line.startswith("Worst: off by 0.25 (reference ")
    assert worst_line.endswith(", 25,000 times the allowed error")
    assert where.startswith("Where: ") and "index 7 of axis 1" in where
    assert all(len(line.split()) <= 24 for line in facts.lines), facts.lines
    page = render_html_report(run)
    for line in (facts.head, *facts.lines):
        assert f"{html_text(line)}</" in page
