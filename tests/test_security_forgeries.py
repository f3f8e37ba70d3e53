"""Forged saved runs refused in one line (issue 54): a run whose manifest hash was recomputed
after the manifest was edited is only as good as the checks behind the hash. Two candidates
of index 0, one input set's reference outputs missing (the per-set layout and the older flat
list, empty or short), a member whose header contradicts its manifest entry, a worst element
outside its array, and statistics a run cannot have (NaN, a negative error) are each
refused as malformed, through the Python API and `parity report` (exit 2, one line).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from parity.cli import main
from parity.errors import SavedRunError
from parity.reports.saved_run import load_run, save_run
from tests.helpers.forged_runs import rewrite
from tests.test_saved_run import make_run


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A real saved run: one output of shape (4, 3), two input sets, its outputs kept."""
    run = make_run({"y": np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)}, n_sets=2)
    path = save_run(run, tmp_path_factory.mktemp("forged") / "good.parity.npz")
    assert load_run(path).passed is not None  # it opens as it is
    return path


def _first_row(m: dict) -> dict:
    return m["candidates"][0]["comparisons"][0]


def _two_zeros(m: dict) -> None:
    second = {**m["candidates"][0], "comparisons": []}
    m["candidates"].append(second)


def _one_reference_gone(m: dict) -> None:
    m["input_sets"][1]["reference"] = None


def _flat_empty(m: dict) -> None:  # the older layout: references in one flat list
    for entry in m["input_sets"]:
        entry.pop("reference")
    m["ref_outputs"] = []


def _flat_short(m: dict) -> None:
    m["ref_outputs"] = [m["input_sets"][0].pop("reference")]
    m["input_sets"][1].pop("reference")


def _worst_outside(m: dict) -> None:
    _first_row(m)["stats"]["worst_index"] = [4, 0]  # the shape is (4, 3)


def _worst_rank(m: dict) -> None:
    _first_row(m)["stats"]["worst_index"] = [0]


def _nan_max(m: dict) -> None:
    _first_row(m)["stats"]["max_abs"] = "nan"


def _negative_rms(m: dict) -> None:
    _first_row(m)["stats"]["rms"] = -1.0


def _mismatches_past_elements(m: dict) -> None:
    row = _first_row(m)
    row["n_mismatch"] = row["n_elements"] + 1


def _set_index_twice(m: dict) -> None:
    m["input_sets"][1]["index"] = m["input_sets"][0]["index"]


def _short_onnx_outputs(m: dict) -> None:
    m["candidates"][0]["onnx_outputs"] = m["candidates"][0]["onnx_outputs"][:1]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_two_zeros, r"candidates\[1\]\.index: 0, expected 1"),
        (_one_reference_gone, r"input_sets\[1\]\.reference: missing"),
        (_flat_empty, r"ref_outputs: 0 output sets for 2 input sets"),
        (_flat_short, r"ref_outputs: 1 output sets for 2 input sets"),
        (_worst_outside, r"worst_index: \[4, 0\] is not an index of the compared shape \[4, 3\]"),
        (_worst_rank, r"worst_index: \[0\] is not an index"),
        (_nan_max, r"stats\.max_abs: 'nan' is not a statistic"),
        (_negative_rms, r"stats\.rms: -1\.0 is not a statistic"),
        (_mismatches_past_elements, r"n_mismatch: 13 of 12 elements"),
        (_set_index_twice, r"input_sets\[1\]\.index: 0 is listed twice"),
        (_short_onnx_outputs, r"candidates\[0\]\.onnx_outputs: 1 output sets for 2 input sets"),
    ],
)
def test_a_forged_manifest_is_refused_in_one_line(saved, tmp_path, capsys, change, said) -> None:
    forged = rewrite(saved, tmp_path / "forged.parity.npz", change)
    with pytest.raises(SavedRunError, match=f"malformed manifest.json: [^ ]*{said}"):
        load_run(forged)
    assert main(["report", str(forged)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("parity: error: ")


def test_a_member_whose_header_contradicts_its_manifest_entry_is_refused(saved, tmp_path) -> None:
    """The .npy header says (3, 4) where the manifest lists (4, 3): same bytes, same hash
    once recomputed; the reader trusts the manifest's shape, so the two must agree."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros((3, 4), np.float32), allow_pickle=False)
    forged = rewrite(
        saved,
        tmp_path / "reshaped.parity.npz",
        lambda m: None,
        member=("ref/0/0.npy", buffer.getvalue()),
    )
    with pytest.raises(SavedRunError, match=r"ref/0/0\.npy' holds float32 \[3, 4\], but manifest"):
        load_run(forged)
