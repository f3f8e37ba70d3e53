"""The JSON report: strict JSON whatever the statistics hold, and the fixed field names."""

from __future__ import annotations

import json
import math

import numpy as np

from parity.reports.report import SCHEMA, dumps, error_report_dict, report_dict
from parity.results import ErrorStats, InputSet, OutputComparison, Status, ValidationRun
from parity.tolerances import Tolerance, Tolerances


def _comparison(**stats) -> OutputComparison:
    base = dict(
        max_abs=0.5, worst_index=(1, 2), ref_at_worst=1.0, onnx_at_worst=1.5, max_rel=0.5,
        mean_abs=0.1, rms=0.2, p99_abs=0.4, n_nan_mismatch=0, n_inf_mismatch=0, cosine=0.99,
        snr_db=20.0,
    )  # fmt: skip
    base.update(stats)
    return OutputComparison(
        input_set=0, name="y", status=Status.FAIL, tolerance=Tolerance(1e-5, 0.0),
        ref_shape=(2, 3), onnx_shape=(2, 3), ref_dtype="float32", onnx_dtype="float32",
        n_elements=6, stats=ErrorStats(**base), n_mismatch=3, message="Mismatched elements: 3 / 6",
    )  # fmt: skip


def _run(comparison: OutputComparison) -> ValidationRun:
    return ValidationRun.from_rows(
        model="demo:x", onnx="x.onnx", signature=None, tolerances=Tolerances(),
        environment={"torch": "t", "onnx": "o", "onnxruntime": "r", "provider": "CPU"},
        input_sets=(InputSet(0, {"x": np.zeros((2, 3), np.float32)}),),
        outputs=(comparison,),
    )  # fmt: skip


def test_non_finite_statistics_become_null():
    data = report_dict(_run(_comparison(snr_db=math.inf, max_abs=float("nan"), cosine=None)))
    text = dumps(data)  # allow_nan=False: raises if anything non-finite slipped through
    output = json.loads(text)["outputs"][0]
    assert output["snr_db"] is None and output["max_abs"] is None and output["cosine"] is None


def test_report_carries_schema_verdict_and_output_fields():
    data = json.loads(dumps(report_dict(_run(_comparison()))))
    assert data["schema"] == SCHEMA
    assert data["verdict"] == "fail"
    output = data["outputs"][0]
    assert output["worst_index"] == [1, 2]
    assert output["mismatch_fraction"] == 0.5
    assert output["ref_shape"] == [2, 3]
    assert data["input_sets"][0]["inputs"]["x"] == {"shape": [2, 3], "dtype": "float32"}


def test_error_report_has_error_verdict_and_kind():
    data = error_report_dict(
        model="m", onnx=None, tolerances=Tolerances(), kind="onnx_load", message="bad file"
    )
    assert data["verdict"] == "error"
    assert data["errors"] == [{"kind": "onnx_load", "message": "bad file"}]
    json.loads(dumps(data))
