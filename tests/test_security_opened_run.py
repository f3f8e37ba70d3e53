"""An opened run can change only what the Run form shows (issue 49): a saved run's
`provenance.config` may carry budgets, an hf: export path or another model than the one it
names; none of them reaches a new run (AppTest on the real app, real demo runs)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.dashboard.access import TRUST_FLAG
from parity.dashboard.run_form import form_values
from parity.reports.saved_run import load_run, save_run
from parity.run.config_json import config_of_run, reopened

APP = str(Path(__file__).resolve().parents[1] / "app.py")

FACTORY = """
from pathlib import Path

from torch import nn

Path({marker!r}).write_text("factory code ran")


def build():
    return nn.Linear(4, 3)
"""


@pytest.fixture(scope="module")
def broken_saved(tmp_path_factory) -> Path:
    from parity.cli import main

    saved = tmp_path_factory.mktemp("opened") / "broken.parity.npz"
    assert main(["validate", "--model", "demo:broken", "--save-run", str(saved)]) == 1
    return saved


def _crafted(saved: Path, folder: Path, name: str, **config) -> Path:
    run = load_run(saved)
    carried = {**run.provenance.config, **config}
    other = replace(run, provenance=replace(run.provenance, config=carried), saved=None)
    return save_run(other, folder / name)


def _open(path: Path) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = str(path)
    at.run()
    assert not at.exception, at.exception
    at.button(key="parity_link_confirm").click().run()  # a ?run= link opens read-only
    assert not at.exception, at.exception
    return at


def test_an_opened_runs_budgets_never_reach_the_next_run(broken_saved: Path, tmp_path):
    crafted = _crafted(
        broken_saved,
        tmp_path,
        "budgets.parity.npz",
        max_memory=7 << 40,
        layers_memory_mb=1 << 30,
        timeout=5.0,
    )
    config = config_of_run(load_run(crafted))
    assert config is not None and config.max_memory == 7 << 40  # what the file says ...
    again = reopened(config)  # ... and what a new run may take of it
    assert again.max_memory is None and again.layers_memory_mb == 1024 and again.timeout is None
    at = _open(crafted)
    assert at.number_input(key="timeout").value == 0  # the server's: no limit
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run.saved is None and run.model == "demo:broken"  # a new run was made
    made = run.provenance.config
    assert made["max_memory"] is None and made["layers_memory_mb"] == 1024
    assert made["timeout"] is None


def test_the_layers_rerun_of_an_opened_run_takes_no_budget_from_it(broken_saved: Path, tmp_path):
    crafted = _crafted(broken_saved, tmp_path, "l.parity.npz", max_memory=1, layers_memory_mb=3)
    at = _open(crafted)
    at.switch_page("pages/layers.py").run()
    at.button(key="layers_rerun").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run.layers is not None  # with max_memory=1 the run would have been refused
    assert run.provenance.config["max_memory"] is None
    assert run.provenance.config["layers_memory_mb"] == 1024


def test_an_hf_runs_export_path_and_task_are_dropped_never_shown_or_used(tmp_path):
    from parity.pipeline import RunConfig
    from parity.run.hf_options import HfOptions

    victim = tmp_path / "user-data.txt"
    config = RunConfig(
        model="hf:/models/llm",
        onnx=None,
        hf=HfOptions(prompts=("a",), export_path=str(victim), task="text-generation"),
        max_memory=1 << 40,
    )
    again = reopened(config)
    assert again.hf is not None and again.hf.export_path is None and again.hf.task is None
    assert again.hf.prompts == ("a",) and again.max_memory is None
    values = form_values(again)
    assert values["hf_export"] == ""  # the field the user types a path into starts empty
    assert str(victim) not in map(str, values.values())


@pytest.fixture
def factory(tmp_path) -> tuple[str, Path]:
    marker = tmp_path / "ran.txt"
    source = tmp_path / "payload_factory.py"
    source.write_text(FACTORY.format(marker=str(marker)))
    return f"{source}:build", marker


def test_a_run_named_demo_broken_never_runs_another_files_factory(
    broken_saved: Path, tmp_path, factory, monkeypatch
):
    """Trusted dashboard: the run says demo:broken, its config names a factory file."""
    monkeypatch.setattr(sys, "argv", ["app.py", TRUST_FLAG])
    spec, marker = factory
    crafted = _crafted(broken_saved, tmp_path, "label.parity.npz", model=spec)
    assert load_run(crafted).model == "demo:broken"
    assert config_of_run(load_run(crafted)) is None  # it would run another model
    at = _open(crafted)
    assert spec not in [t.value for t in at.text_input]  # the form never names the factory
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    assert not [b for b in at.button if b.key == "layers_rerun"]  # nothing to re-run
    at.switch_page("pages/run.py").run()
    if not at.button(key="run_custom").disabled:
        at.button(key="run_custom").click().run()
    assert not marker.exists()
    run = at.session_state["parity_run"]
    assert run.model != spec and run.model.startswith("demo:")  # what the form showed


def test_a_run_opened_by_a_link_is_read_only_until_the_user_confirms(broken_saved: Path):
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = str(broken_saved)
    at.run()
    assert not at.exception, at.exception
    assert at.session_state["parity_run"].model == "demo:broken"  # shown
    assert at.selectbox(key="model_demo").value != "broken"  # not in the form
    at.switch_page("pages/layers.py").run()
    assert not [b for b in at.button if b.key == "layers_rerun"]  # nothing re-runs it
    at.switch_page("pages/run.py").run()
    at.button(key="parity_link_confirm").click().run()
    assert not at.exception, at.exception
    assert at.selectbox(key="model_demo").value == "broken"  # now the form shows it
    assert not [b for b in at.button if b.key == "parity_link_confirm"]
