"""The presentation decisions made once (parity.labels, parity.text, parity.load.specs,
parity.load.dtypes,
parity.files.json_output, parity.files.hashing), checked against what every reader relies on."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import onnx
import pytest

from parity import labels, text
from parity.files import json_output
from parity.files.hashing import file_sha256
from parity.judge.compare import compare_outputs
from parity.load import dtypes, specs
from parity.results import Status
from parity.tolerances import Tolerance


def _comparison(ref, onnx_values, name="y"):
    return compare_outputs(
        np.asarray(ref, np.float32), np.asarray(onnx_values, np.float32), name=name,
        input_set=0, tolerance=Tolerance(1e-5, 0.0),
    )  # fmt: skip


def test_worst_first_puts_element_wise_failures_before_shape_failures_and_passes_last():
    ok = _comparison([1.0, 2.0], [1.0, 2.0], name="ok")
    few = _comparison([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.5], name="few")
    many = _comparison([1.0, 2.0], [1.5, 2.5], name="many")
    big_same_fraction = _comparison([1.0, 2.0], [9.0, 9.0], name="big")
    shape = compare_outputs(np.zeros(2), np.zeros(3), name="shape", input_set=0,
                            tolerance=Tolerance())  # fmt: skip
    order = labels.worst_first([ok, shape, few, many, big_same_fraction])
    assert [c.name for c in order] == ["big", "many", "few", "shape", "ok"]


def test_status_labels_are_one_table_in_four_styles():
    assert labels.status_label(Status.FAIL, "terminal") == "FAIL"
    assert labels.status_label(Status.SHAPE_MISMATCH, "terminal") == "SHAPE"
    assert labels.status_label(Status.SHAPE_MISMATCH) == "shape mismatch"
    assert labels.status_label(Status.PASS, "marked") == "✓ pass"
    assert labels.status_label(Status.MISSING, "marked") == "✗ missing"
    assert labels.status_label(Status.PASS, "mark") == "✓"
    for status in Status:
        for style in ("terminal", "words", "marked", "mark"):
            assert labels.status_label(status, style)


def test_numbers_and_shapes_read_the_same_everywhere():
    assert [text.number_text(v) for v in (None, math.nan, math.inf, -math.inf, 0.0)] == [
        "-", "nan", "inf", "-inf", "0",
    ]  # fmt: skip
    assert text.number_text(0.5) == "0.5" and text.number_text(1.5e-7) == "1.50e-07"
    assert text.number_text(np.float32(2.0), 8) == "2"
    assert text.shape_text((2, 3)) == "(2, 3)" and text.shape_text((5,)) == "(5,)"
    assert text.shape_text(None) == "-"
    assert text.tolerance_text(Tolerance(1e-5, 0.0)) == "atol 1e-05, rtol 0"


def test_model_texts_round_trip():
    assert specs.demo_name(specs.demo_spec("cnn")) == "cnn"
    assert specs.demo_name("hf:/x") is None and specs.demo_name(None) is None
    assert specs.is_hf_spec(specs.hf_spec("/models/llm"))
    assert specs.reference_path(specs.reference_spec("ref.npz")) == "ref.npz"
    assert specs.reference_path("demo:cnn") is None


@pytest.mark.parametrize("elem", [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15])
def test_dtype_names_agree_with_onnx_and_numpy(elem):
    name = dtypes.from_onnx_elem_type(elem)
    assert name == onnx.helper.tensor_dtype_to_np_dtype(elem).name
    assert dtypes.numpy_dtype(name) == np.dtype(name)
    ort = "tensor(" + {"float32": "float", "float64": "double"}.get(name, name) + ")"
    assert dtypes.from_ort_type(ort) == name


def test_bfloat16_has_a_numpy_dtype():
    assert dtypes.from_onnx_elem_type(16) == "bfloat16"
    assert dtypes.numpy_dtype("bfloat16").itemsize == 2


def test_json_output_turns_non_finite_numbers_into_null():
    data = json_output.strict({"a": np.float32("nan"), "b": [math.inf, np.int64(3)], "c": 1.5})
    assert data == {"a": None, "b": [None, 3], "c": 1.5}
    assert json.loads(json_output.dumps(data)) == data
    with pytest.raises(ValueError):
        json_output.dumps({"x": math.nan})


def test_file_hash_is_sha256_of_the_bytes(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * (3 << 20) + b"tail")  # more than one chunk
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
