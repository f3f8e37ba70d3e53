"""The dashboard's Sweep page under AppTest, on a real sweep folder (real pairs, real runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.cli import main
from tests.helpers.sweep_zoo import copy_tiny, with_ray_attempts, write_manifest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 180


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, model_zoo, tiny_artifacts) -> Path:
    """A passing pair, a failing one (both with saved runs), and one that cannot run. The
    failing pair's name has markdown's emphasis marks, which must show as the text they are."""
    root = tmp_path_factory.mktemp("sweep_page")
    zoo = root / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    (zoo / "corrupt.onnx").write_bytes(b"not onnx")
    tiny = ["--model", "models.py:make_tiny", "--save-run", "run.parity.npz"]
    manifest = write_manifest(
        zoo,
        [
            {"name": "good", "args": [*tiny, "--onnx", "tiny.onnx"]},
            {
                "name": "x__bad__",
                "args": [*tiny, "--onnx", "tiny.onnx", "--weights", "other_weights.pt"],
            },
            {"name": "corrupt", "args": [*tiny, "--onnx", "corrupt.onnx"]},
        ],
    )
    out = root / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "2"]) == 2
    assert (out / "summary.json").is_file()
    return out


def _open(sweep_dir: Path) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["sweep"] = str(sweep_dir)
    at.run()
    assert not at.exception, at.exception
    return at


def test_sweep_url_opens_the_folder_with_summary_table_and_grid(sweep_dir):
    at = _open(sweep_dir)
    assert at.title[0].value == "Sweep"
    assert "3 pair(s): 1 pass, 1 fail, 1 error" in at.text[0].value
    pairs = at.dataframe[0].value
    assert list(pairs["pair"]) == ["good", "x__bad__", "corrupt"]  # names as text, as they are
    assert list(pairs["verdict"]) == ["✓ pass", "✗ fail", "⚠ error"]
    assert "corrupt.onnx" in pairs.loc[2, "failing / error"]
    assert list(pairs["saved run"]) == ["yes", "yes", ""]
    grid = at.dataframe[1].value
    assert list(grid.columns) == ["y"] and list(grid.index) == ["good", "x__bad__"]
    assert grid.loc["good", "y"].startswith("✓ ")
    assert grid.loc["x__bad__", "y"].startswith("✗ fail ")
    assert any("1 pair(s) without compared outputs are left out" in c.value for c in at.caption)
    assert all("x__bad__" not in m.value for m in at.markdown)  # never markdown


def test_filter_keeps_only_failing_and_error_pairs_in_the_table_and_the_grid(sweep_dir):
    at = _open(sweep_dir)
    at.toggle(key="parity_sweep_only_bad").set_value(True).run()
    assert list(at.dataframe[0].value["pair"]) == ["x__bad__", "corrupt"]
    assert list(at.dataframe[1].value.index) == ["x__bad__"]


# Selecting a row (which opens the pair's saved run) needs a browser: tests/test_browser_sweep.py


def test_a_folder_that_is_not_a_sweep_is_one_line_and_the_last_sweep_stays(sweep_dir, tmp_path):
    at = _open(sweep_dir)
    at.text_input(key="parity_sweep_path").set_value(str(tmp_path / "**nope**")).run()
    at.button(key="parity_sweep_open").click().run()
    assert "Could not open that sweep folder." in at.error[0].value
    assert any("**nope**" in t.value and "no readable summary.json" in t.value for t in at.text)
    assert list(at.dataframe[0].value["pair"]) == ["good", "x__bad__", "corrupt"]


@pytest.fixture(scope="module")
def tried_dir(sweep_dir, tmp_path_factory) -> Path:
    return with_ray_attempts(sweep_dir, tmp_path_factory.mktemp("tried") / "out")


def test_attempts_and_nodes_show_a_retried_pass_and_a_pair_that_never_got_a_node(tried_dir):
    at = _open(tried_dir)
    pairs = at.dataframe[0].value.set_index("pair")
    assert pairs.loc["good", "verdict"] == "✓ pass (retried)"
    assert pairs.loc["x__bad__", "verdict"] == "✗ fail"
    assert list(pairs["tries"]) == [2, 1, 1, 1]
    assert pairs.loc["good", "attempts"].startswith(
        "lost: WorkerCrashedError on aaaaaaaaaaaa (3.0 s); pass on bbbbbbbbbbbb ("
    )
    assert pairs.loc["gpu", "attempts"] == "never got a node: not placed (120.0 s)"
    assert pairs.loc["gpu", "seconds"] is None or pairs["seconds"].isna()["gpu"]
    assert " on " in pairs.loc["corrupt", "attempts"]  # ran on this machine, and said so

    index = (tried_dir / "index.html").read_text()
    assert "pass (retried)" in index and "never got a node: not placed (120.0 s)" in index
    assert "lost: WorkerCrashedError on aaaaaaaaaaaa (3.0 s)" in index
