"""One row per comparison (parity.show.rows): the terminal, the JSON report, the HTML report and the
dashboard's tables all show the same cells, in the same column order."""

from __future__ import annotations

import re

import numpy as np

from parity.judge.compare import compare_outputs
from parity.reports.html_report import render_html_report
from parity.reports.report import report_dict
from parity.results import InputSet, Status, ValidationRun
from parity.show.format import format_table
from parity.show.rows import COLUMNS, ComparisonRow, comparison_rows, merge, output_rows
from parity.tolerances import Tolerance, Tolerances

# parity.report/1 outputs[] fields, in their order: a contract (README, design.md)
REPORT_FIELDS = [
    "candidate", "input_set", "name", "status", "ref_shape", "onnx_shape", "ref_dtype",
    "onnx_dtype", "n_elements", "n_excluded", "max_abs", "max_rel", "mean_abs", "rms", "p99_abs",
    "n_mismatch", "mismatch_fraction", "n_nan_mismatch", "n_inf_mismatch", "worst_index",
    "ref_at_worst", "onnx_at_worst", "cosine", "snr_db", "atol", "rtol", "min_atol_to_pass",
    "message", "where", "noise",
]  # fmt: skip


def _compare(ref, onnx, *, name="y", input_set=0, atol=1e-5):
    return compare_outputs(
        np.asarray(ref, np.float32), np.asarray(onnx, np.float32), name=name,
        input_set=input_set, tolerance=Tolerance(atol, 0.0),
    )  # fmt: skip


def _run(*comparisons) -> ValidationRun:
    sets = sorted({c.input_set for c in comparisons})
    return ValidationRun.from_rows(
        model="m", onnx="m.onnx", signature=None, tolerances=Tolerances(), environment={},
        input_sets=tuple(InputSet(i, {"x": np.zeros(2, np.float32)}) for i in sets),
        outputs=tuple(comparisons),
    )  # fmt: skip


def _mixed_run() -> ValidationRun:
    return _run(
        _compare([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.5], name="y", input_set=0),
        _compare([1.0, 2.0], [1.0, np.nan], name="z", input_set=0),
        _compare(np.zeros((2, 3)), np.zeros((2, 4)), name="y", input_set=1),
        _compare([1.0, 2.0], [1.0, 2.0], name="z", input_set=1),
    )


def test_report_outputs_are_the_rows_as_json_with_the_contract_fields_in_order():
    run = _mixed_run()
    outputs = report_dict(run)["outputs"]
    assert [list(o) for o in outputs] == [REPORT_FIELDS] * 4
    # every row field is in the report but those it says elsewhere or never (so a new one is
    # placed in the contract's order on purpose)
    from dataclasses import fields

    from parity.show.rows import REPORT_KEYS, ComparisonRow

    elsewhere = {"n_judged", "can_rejudge", "intended", "hidden_bug"}  # findings say the last two
    written = {f.name for f in fields(ComparisonRow)} - elsewhere
    assert set(REPORT_KEYS) == written
    first = outputs[0]
    assert first["status"] == "fail" and first["n_mismatch"] == 1 and first["ref_shape"] == [4]
    assert first["max_abs"] == 0.5 and first["worst_index"] == [3]
    assert outputs[1]["n_nan_mismatch"] == 1 and outputs[1]["min_atol_to_pass"] is None
    assert outputs[2]["status"] == "shape_mismatch" and outputs[2]["max_abs"] is None
    assert outputs[2]["onnx_shape"] == [2, 4]


def test_terminal_and_html_tables_follow_the_one_column_order():
    run = _mixed_run()
    header = format_table(run).splitlines()[0].split("  ")
    terminal = [h.strip() for h in header if h.strip()]
    shown = [c.short_header for c in COLUMNS if c.key != "message"]
    assert terminal == shown
    html = render_html_report(run)
    table = html.split("<table class='outputs'>")[1].split("</tr>")[0]
    assert re.findall(r"<th>(.*?)</th>", table) == [c.header for c in COLUMNS]


def test_cells_read_the_same_in_the_terminal_and_the_html():
    run = _mixed_run()
    text = format_table(run)
    html = render_html_report(run)
    rows = comparison_rows(run)
    assert [r.name for r in rows] == [c.name for c in run.comparisons]
    shape = rows[2]
    assert shape.cell("shape") == "(2, 3) vs (2, 4)" and "(2, 3) vs (2, 4)" in text
    assert "(2, 3) vs (2, 4)" in html
    assert rows[0].cell("mismatch") == "1 / 4 (25%)" and "1 / 4 (25%)" in text
    assert rows[1].cell("nonfinite") == "1 / 0" and rows[0].cell("nonfinite") == "-"
    assert rows[0].cell("status", "terminal") == "FAIL" and rows[2].cell("status") == (
        "shape mismatch"
    )


def test_dataframe_values_keep_numbers_numeric():
    row = comparison_rows(_mixed_run())[0]
    assert row.value("max_abs") == 0.5 and row.value("mismatch") == 0.25
    assert row.value("set") == 0 and row.value("status") == "✗ fail"


def test_merged_output_row_takes_the_worst_set_and_the_atol_that_passes_in_every_set():
    a = _compare([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.5], input_set=0)
    b = _compare([1.0, 2.0], [1.0, 2.25], input_set=1)
    merged = merge([ComparisonRow.from_comparison(a), ComparisonRow.from_comparison(b)])
    assert merged.input_set is None and merged.cell("set") == "all"
    assert merged.status is Status.FAIL and merged.max_abs == 0.5
    assert merged.n_mismatch == 2 and merged.n_judged == 6
    assert merged.min_atol_to_pass == max(a.min_atol_to_pass, b.min_atol_to_pass)
    # a shape failure in one set: no tolerance fixes the output (the worst set to look at is
    # still the element-wise failure: parity.labels.badness)
    (y, z) = output_rows(_mixed_run())
    assert y.status is Status.FAIL and not y.can_rejudge and y.min_atol_to_pass is None
    assert z.status is Status.FAIL and z.n_nonfinite == 1
