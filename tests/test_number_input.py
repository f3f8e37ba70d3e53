"""Numbers typed by people: one parser (parity.text.parse_number) for the CLI's --tol and the
dashboard's tolerance cells, and the overrides editor's rules
(parity.dashboard.tolerance_editor)."""

from __future__ import annotations

import pytest

from parity.dashboard.tolerance_editor import apply_edits, editor_frame, fmt
from parity.results import ValidationRun
from parity.text import parse_number
from parity.tolerances import Tolerance, Tolerances, parse_tol_arg


@pytest.mark.parametrize(
    ("text", "value"),
    [("5e-3", 0.005), ("1e-05", 1e-5), ("0.005", 0.005), (" .5 ", 0.5), ("2E+1", 20.0),
     ("0", 0.0), ("3", 3.0), ("\u22121e-3", -0.001)],
)  # fmt: skip
def test_every_way_of_writing_a_number_reads_the_same(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "text", ["", "5e-", "e-3", "nan", "inf", "1_000", "0x10", "1e999", "5 e-3"]
)
def test_what_nobody_means_as_a_tolerance_is_refused_with_what_it_got(text):
    with pytest.raises(ValueError, match="not a number|too large"):
        parse_number(text)


def test_cli_tol_reads_through_the_same_parser():
    assert parse_tol_arg("y=5e-3:1e-05", Tolerance()) == ("y", Tolerance(0.005, 1e-5))


def _run(names: tuple[str, ...]) -> ValidationRun:
    from parity.results import OutputComparison, Status

    comps = tuple(
        OutputComparison(
            input_set=0, name=n, status=Status.PASS, tolerance=Tolerance(), ref_shape=(1,),
            onnx_shape=(1,), ref_dtype="float32", onnx_dtype="float32", n_elements=1,
        )
        for n in names
    )  # fmt: skip
    return ValidationRun.from_rows(
        model="m", onnx="m.onnx", signature=None, tolerances=Tolerances(), environment={},
        input_sets=(), outputs=comps,
    )  # fmt: skip


NAMES = ["logits", "pooled"]
GLOBAL = Tolerances(default=Tolerance(1e-5, 0.0))


def test_typing_5e_3_in_an_atol_cell_stores_0_005_and_turns_the_override_on():
    tol, errors = apply_edits(GLOBAL, NAMES, {1: {"atol": "5e-3"}})
    assert errors == []
    assert tol.outputs == {"pooled": Tolerance(0.005, 0.0)}  # rtol: the global value
    frame = editor_frame(_run(tuple(NAMES)), tol)
    assert list(frame["override"]) == [False, True]
    assert list(frame["atol"]) == ["", "0.005"]


def test_a_bad_cell_is_refused_in_words_and_changes_nothing():
    tol, errors = apply_edits(GLOBAL, NAMES, {0: {"atol": "5e-"}, 1: {"rtol": "-1"}})
    assert tol == GLOBAL
    assert len(errors) == 2
    assert "atol of logits" in errors[0] and "'5e-' is not a number" in errors[0]
    assert "rtol of pooled" in errors[1] and ">= 0" in errors[1]


def test_unticking_override_returns_the_output_to_the_global_values():
    start = GLOBAL.with_output("logits", Tolerance(1e-3, 1e-4))
    tol, errors = apply_edits(start, NAMES, {0: {"override": False}})
    assert errors == [] and tol == GLOBAL


def test_blank_cell_takes_the_global_value_and_cells_show_exact_values():
    start = GLOBAL.with_output("logits", Tolerance(1e-3, 1e-4))
    tol, _ = apply_edits(start, NAMES, {0: {"rtol": ""}})
    assert tol.outputs["logits"] == Tolerance(1e-3, 0.0)
    for value in (1e-05, 0.005, 3.3333333e-7, 0.1 + 0.2):
        assert parse_number(fmt(value)) == value
