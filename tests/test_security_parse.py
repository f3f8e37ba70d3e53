"""Every parse budgeted (issue 49): zip directories counted from their end record before
zipfile parses them, a saved run's manifest checked against the memory budget before json
parses it, and the codec refusing what would crash a page (out-of-range indices, profile
arrays that disagree, arrays that are not numbers) in one line. Real saved runs of
demo:broken, re-saved with one field crafted."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parity.cli import main
from parity.errors import SavedRunError
from parity.reports.saved_run import MANIFEST, load_run, save_run


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    saved = tmp_path_factory.mktemp("parse") / "broken.parity.npz"
    assert main(["validate", "--model", "demo:broken", "--save-run", str(saved)]) == 1
    return saved


def _many_entries(path: Path, n: int) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(n):
            zf.writestr(f"{i}.npy", b"")
    return path


def _one_line_exit_2(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_saved_run_listing_too_many_entries_is_refused_before_zipfile_parses_it(tmp_path, capsys):
    path = _many_entries(tmp_path / "many.parity.npz", 200_001)
    err = _one_line_exit_2(["report", str(path)], capsys)
    assert "lists 200,001 files" in err, err


def test_inputs_listing_too_many_arrays_are_refused_before_zipfile_parses_them(tmp_path, capsys):
    path = _many_entries(tmp_path / "feeds.npz", 100_001)
    err = _one_line_exit_2(["validate", "--model", "demo:cnn", "--inputs", str(path)], capsys)
    assert "lists 100,001 files" in err, err


def test_a_manifest_is_checked_against_the_memory_budget_before_it_is_parsed(broken, capsys):
    with zipfile.ZipFile(broken) as zf:
        size = zf.getinfo(MANIFEST).file_size
    budget = f"{size * 10 // 1024}K"  # holds the file, not what json makes of it
    err = _one_line_exit_2(["report", str(broken), "--max-memory", budget], capsys)
    assert f"parsing its {size:,}-byte {MANIFEST}" in err, err


def _resaved(broken: Path, tmp_path: Path, **changes) -> Path:
    run = load_run(broken)
    return save_run(replace(run, saved=None, **changes), tmp_path / "crafted.parity.npz")


def _with_rows(run, rows):
    """The run's candidates, each with the rows of `rows` that sit where its own did (a
    crafted row keeps its place, whatever candidate index it names)."""
    out, k = [], 0
    for c in run.candidates:
        out.append(replace(c, outputs=tuple(rows[k : k + len(c.outputs)])))
        k += len(c.outputs)
    return tuple(out)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("input_set", 7, "[0].comparisons[0].input_set: 7 is not one of the run's input sets"),
        ("candidate", 7, "candidates[0].comparisons[0].candidate: 7 is not the candidate's index"),
    ],
)
def test_out_of_range_indices_are_refused_in_one_line(broken, tmp_path, capsys, field, value, said):
    run = load_run(broken)
    first = replace(run.outputs[0], **{field: value})
    crafted = _resaved(broken, tmp_path, candidates=_with_rows(run, (first, *run.outputs[1:])))
    with pytest.raises(SavedRunError, match=said.replace("[", r"\[").replace("]", r"\]")):
        load_run(crafted)
    err = _one_line_exit_2(["report", str(crafted)], capsys)
    assert said in err and "KeyError" not in err, err


def test_profile_arrays_that_disagree_are_refused_in_one_line(broken, tmp_path, capsys):
    run = load_run(broken)
    c = next(c for c in run.outputs if c.profile is not None)
    bad = replace(c.profile, hull_d=np.concatenate([c.profile.hull_d, [1.0, 2.0]]))
    outputs = tuple(replace(o, profile=bad) if o is c else o for o in run.outputs)
    crafted = _resaved(broken, tmp_path, candidates=_with_rows(run, outputs))
    err = _one_line_exit_2(["report", str(crafted)], capsys)
    assert "hull_r and hull_d differ in length" in err, err


def test_arrays_that_are_not_numbers_are_refused_in_one_line(broken, tmp_path, capsys):
    run = load_run(broken)
    s = run.input_sets[0]
    name = next(iter(s.feeds))
    texts = replace(s, feeds={**s.feeds, name: np.array(["a", "b"])})
    cases = (replace(run.cases[0], input_set=texts), *run.cases[1:])
    crafted = _resaved(broken, tmp_path, cases=cases)
    err = _one_line_exit_2(["report", str(crafted)], capsys)
    assert "not numbers" in err, err


def test_the_generation_page_draws_a_bounded_part_of_300k_tokens(broken, tmp_path):
    from streamlit.testing.v1 import AppTest

    from parity.dashboard.generation import MAX_TOKEN_ROWS
    from parity.results import GenerationInfo, PromptGeneration

    n = 300_000
    tokens = tuple(range(n))
    prompt = PromptGeneration(
        prompt="p" * 100_000,
        torch_tokens=tokens,
        onnx_tokens=tokens,
        torch_text="t" * n,
        onnx_text="o" * n,
        torch_pieces=tuple("t" for _ in tokens),
        onnx_pieces=tuple("o" for _ in tokens),
    )
    huge = replace(load_run(broken), saved=None, generation=GenerationInfo({}, (), (prompt,)))
    path = save_run(huge, tmp_path / "huge.parity.npz")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=300)
    at.query_params["run"] = str(path)
    at.run()
    at.switch_page("pages/generation.py").run()
    assert not at.exception, at.exception
    (table,) = at.dataframe
    assert len(table.value) == MAX_TOKEN_ROWS
    assert max(len(t.value) for t in at.text) < 30_000  # texts cut, the cut said
    assert any(f"{MAX_TOKEN_ROWS:,} of {n:,} tokens" in c.value for c in at.caption)
