"""Tolerances: per-output fallback, the JSON file format, and the --tol flag."""

from __future__ import annotations

import json

import pytest

from parity.errors import UsageError
from parity.tolerances import DEFAULT_ATOL, Tolerance, Tolerances, parse_tol_arg


def test_defaults_are_optimums():
    assert Tolerances().default == Tolerance(atol=1e-5, rtol=0.0) == Tolerance(DEFAULT_ATOL)


def test_per_output_tol_fallback_to_default():
    tols = Tolerances(default=Tolerance(1e-3, 0.0), outputs={"logits": Tolerance(1e-1, 1e-2)})
    assert tols.for_output("logits") == Tolerance(1e-1, 1e-2)
    assert tols.for_output("other") == Tolerance(1e-3, 0.0)


def test_json_round_trip(tmp_path):
    tols = Tolerances(default=Tolerance(2e-4, 1e-3), outputs={"a": Tolerance(0.5, 0.0)})
    path = tmp_path / "t.json"
    path.write_text(tols.dumps())
    assert Tolerances.load(path) == tols
    assert json.loads(path.read_text())["outputs"]["a"] == {"atol": 0.5, "rtol": 0.0}


def test_output_entry_without_rtol_inherits_the_files_default():
    tols = Tolerances.from_json(
        {"default": {"atol": 1e-4, "rtol": 1e-3}, "outputs": {"y": {"atol": 1.0}}}
    )
    assert tols.for_output("y") == Tolerance(1.0, 1e-3)


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"default": {"atol": "big"}},
        {"defaults": {}},
        {"outputs": {"y": {"atl": 1}}},
        {"default": {"atol": -1}},
        {"default": {"atol": float("nan")}},
    ],
)
def test_bad_tolerance_json_is_a_usage_error(data):
    with pytest.raises(UsageError):
        Tolerances.from_json(data)


def test_unreadable_tolerance_file_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(UsageError, match="broken.json"):
        Tolerances.load(path)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("logits=1e-3", ("logits", Tolerance(1e-3, 0.25))),
        ("logits=1e-3:1e-2", ("logits", Tolerance(1e-3, 1e-2))),
        ("present.0.key=0.1:0", ("present.0.key", Tolerance(0.1, 0.0))),
    ],
)
def test_parse_tol_arg(text, expected):
    assert parse_tol_arg(text, Tolerance(1e-5, 0.25)) == expected


@pytest.mark.parametrize("text", ["logits", "=1e-3", "logits=abc", "logits=1e-3:x"])
def test_parse_tol_arg_rejects_malformed(text):
    with pytest.raises(UsageError, match="--tol"):
        parse_tol_arg(text, Tolerance())


@pytest.mark.parametrize(
    "text",
    [
        '{"default": {"atol": 1e-3, "atol": 5}}',
        '{"default": {"atol": 1e-3}, "default": {"atol": 5}}',
        '{"outputs": {"y": {"atol": 1}, "y": {"atol": 9}}}',
    ],
)
def test_a_key_given_twice_is_refused_not_won_by_the_last(text, tmp_path):
    path = tmp_path / "dup.json"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        Tolerances.load(path)
    message = str(caught.value)
    assert "dup.json" in message and "duplicate key" in message and "\n" not in message


def test_cli_refuses_a_tolerances_file_with_a_duplicate_key(tmp_path, capsys):
    from parity.cli import main

    path = tmp_path / "dup.json"
    path.write_text('{"default": {"atol": 1e-3, "atol": 5}}')
    assert main(["validate", "--model", "demo:cnn", "--tolerances", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "duplicate key 'atol'" in err[0], err
