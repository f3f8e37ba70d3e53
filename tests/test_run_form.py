"""The Run form is the run on screen: a run opened from elsewhere (a saved run, the launcher's
`--model` run, a sweep pair) fills the form with the settings that made it, and Run makes it
again with what the user changed (AppTest, real demos and a real tiny model; the browser
round trip is tests/test_browser_run_form.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.dashboard.run_form import form_values
from parity.dashboard.text import md_text
from parity.launch import RUN_ENV, RUN_SCRATCH_ENV
from parity.pipeline import RunConfig, run_validation
from parity.reports.saved_run import load_run, read_manifest, save_run
from parity.run.config_json import config_from_json, config_json, config_of_run
from parity.run.hf_options import HfOptions
from parity.tolerances import Tolerance, Tolerances

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 180


@pytest.fixture(scope="module")
def broken_saved(tmp_path_factory) -> Path:
    from parity.cli import main

    saved = tmp_path_factory.mktemp("form") / "broken.parity.npz"
    # one input set: not the form's default (2, as the CLI's for a file with dynamic axes), so
    # the form showing 1 shows the run's own setting
    args = ["--input-sets", "1", "--atol", "1e-4", "--save-run", str(saved)]
    assert main(["validate", "--model", "demo:broken", *args])
    return saved


def _open(path: Path, monkeypatch=None, *, scratch: bool = False) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if scratch:  # as `parity dashboard --model ...` hands its own temp copy of the run
        assert monkeypatch is not None
        monkeypatch.setenv(RUN_ENV, str(path))
        monkeypatch.setenv(RUN_SCRATCH_ENV, "1")
    else:
        at.query_params["run"] = str(path)
    at.run()
    assert not at.exception, at.exception
    if not scratch:  # a ?run= link opens read-only until the user confirms
        at.button(key="parity_link_confirm").click().run()
        assert not at.exception, at.exception
    return at


def test_the_saved_run_carries_its_settings_and_they_round_trip(broken_saved: Path):
    carried = read_manifest(broken_saved)["provenance"]["config"]
    assert carried["model"] == "demo:broken" and carried["onnx"] == []  # the demo's own export
    run = load_run(broken_saved)
    config = config_of_run(run)
    assert config is not None and config.model == "demo:broken" and config.onnx is None
    assert config.tolerances.default.atol == 1e-4  # the run's own tolerances
    assert config_json(config) == carried
    assert json.loads(json.dumps(carried)) == carried


def test_a_config_with_every_setting_round_trips_through_json():
    config = RunConfig(
        model="hf:/models/llm",
        onnx=("a.onnx", "b.onnx"),
        dims={"batch": 3},
        n_input_sets=4,
        seed=7,
        int_ranges={"ids": (0, 50)},
        provider=("CPUExecutionProvider",),
        ort_opt_level=("disable", "all"),
        hf=HfOptions(prompts=("a", "b"), max_new_tokens=3, config_overrides={"n": 1}),
        layers=True,
        noise_floor=True,
        timeout=30.0,
    )
    tolerances = Tolerances(default=Tolerance(atol=1e-3, rtol=0.0))
    back = config_from_json(json.loads(json.dumps(config_json(config))), tolerances)
    assert back == replace(config, tolerances=tolerances)


def test_a_run_saved_before_runs_carried_settings_is_read_from_its_files(broken_saved: Path):
    run = load_run(broken_saved)
    old = replace(run, provenance=replace(run.provenance, config=None))
    config = config_of_run(old)
    assert config is not None
    assert config.model == "demo:broken" and config.onnx is None  # the cached demo export
    assert config.providers == ("CPUExecutionProvider",) and config.n_input_sets == 1


def test_form_values_name_every_kind_of_run():
    onnx_only = form_values(RunConfig(model=None, onnx=("r.onnx", "c.onnx")))
    assert onnx_only["model_source"] == "None: ONNX against ONNX"
    assert onnx_only["onnx_path"] == "r.onnx" and onnx_only["onnx_more"] == "c.onnx"
    assert onnx_only["onnx_source_False"] == "Path on this machine"
    ref = form_values(
        RunConfig(model=None, onnx=("m.onnx",), reference_file="ref.npz", input_files=("f.npz",))
    )
    assert ref["model_source"] == "Stored reference outputs" and ref["ref_path"] == "ref.npz"
    assert ref["feeds_paths"] == "f.npz"
    hf = form_values(
        RunConfig(
            model="hf:/m", onnx=None, hf=HfOptions(prompts=("hi",), config_overrides={"a": 1})
        )
    )
    assert hf["model_source"] == "Hugging Face directory (LLM)" and hf["hf_dir"] == "/m"
    assert hf["onnx_source_hf"] == "Let Parity export it" and hf["hf_overrides"] == "a=1"
    demo = form_values(RunConfig(model="demo:cnn", onnx=("mine.onnx",)))
    assert demo["model_demo"] == "cnn" and demo["onnx_source_True"] == "Path on this machine"


def test_an_opened_run_fills_the_form_and_run_makes_that_run_again(broken_saved: Path):
    at = _open(broken_saved)
    assert at.session_state["parity_run"].model == "demo:broken"
    assert at.radio(key="model_source").value == "Built-in demo"
    assert at.selectbox(key="model_demo").value == "broken"  # not the form's default demo:cnn
    assert at.radio(key="onnx_source_True").value == "The demo's export"
    assert at.number_input(key="n_sets").value == 1  # the run's, not the form's default 2
    said = "\n".join(m.value for m in at.markdown)
    assert "The export does not match PyTorch" in said  # the Overview's words, on landing
    opened = at.session_state["parity_run"]
    at.checkbox(key="run_layers").check().run()
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run is not opened and run.model == "demo:broken" and run.verdict == "fail"
    assert run.layers is not None and run.tolerances.default.atol == 1e-4  # the opened run's
    first = run.layers.first_divergence
    assert first is not None and first.onnx_op == "Pad"


def test_an_opened_path_run_fills_model_files_sizes_providers_and_flags(tmp_path, tiny_artifacts):
    config = RunConfig(
        model=str(tiny_artifacts.pt2),
        onnx=(str(tiny_artifacts.onnx),),
        dims={"batch": 5},
        n_input_sets=3,
        seed=11,
        ort_opt_level=("basic",),
        timeout=60.0,
    )
    saved = save_run(run_validation(config), tmp_path / "tiny.parity.npz")
    at = _open(saved)
    assert at.radio(key="model_source").value == "Path on this machine"
    assert at.text_input(key="model_path").value == str(tiny_artifacts.pt2)
    assert at.radio(key="onnx_source_False").value == "Path on this machine"
    assert at.text_input(key="onnx_path").value == str(tiny_artifacts.onnx)
    assert at.number_input(key="dim_batch").value == 5
    assert at.number_input(key="n_sets").value == 3
    assert at.number_input(key="seed").value == 11
    assert at.multiselect(key="opt").value == ["basic"]
    assert at.number_input(key="timeout").value == 0  # the server's budget, never a file's
    at.number_input(key="seed").set_value(12).run()
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run.provenance.seed == 12 and len(run.input_sets) == 3  # what the user changed
    assert run.input_sets[0].feeds["x"].shape[0] == 5 and run.provenance.ort_opt_level == "basic"


def test_the_sidebar_names_the_launchers_run_by_its_model_never_its_temp_file(
    broken_saved: Path, monkeypatch
):
    at = _open(broken_saved, monkeypatch, scratch=True)
    said = "\n".join(c.value for c in at.sidebar.caption)
    assert f"Opened {md_text('demo:broken')} with its own export, FAIL." in said
    assert str(broken_saved.parent) not in said and "parity.npz" not in said


def test_the_layers_page_compares_layers_of_an_opened_run_in_one_click(broken_saved: Path):
    at = _open(broken_saved)
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    at.button(key="layers_rerun").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run.layers is not None and run.layers.first_divergence.onnx_op == "Pad"


def test_an_opened_run_beyond_the_forms_limits_or_providers_fits_the_form(
    broken_saved: Path, tmp_path
):
    """A run made on another machine (a provider this one lacks) or with more than the form
    takes (input sets): the form shows what it can run here, never an error."""
    run = load_run(broken_saved)
    carried = {
        **run.provenance.config,
        "providers": ["CUDAExecutionProvider"],
        "n_input_sets": 40,
        "timeout": 10**6,
    }
    other = replace(run, provenance=replace(run.provenance, config=carried), saved=None)
    at = _open(save_run(other, tmp_path / "other.parity.npz"))
    assert at.multiselect(key="provider").value == ["CPUExecutionProvider"]
    assert at.number_input(key="n_sets").value == 16
    assert at.number_input(key="timeout").value == 0  # the server's budget, never a file's


def test_an_export_parity_made_itself_is_named_for_what_it_is_never_by_its_temp_path(
    broken_saved: Path,
):
    from parity.dashboard.sidebar import own_export_words

    run = load_run(broken_saved)
    assert own_export_words(run) == "the demo's own export"
    hf_config = {**run.provenance.config, "model": "hf:/models/llm", "hf": None}
    hf_run = replace(
        run,
        model="hf:/models/llm",
        onnx="/tmp/parity-x1/model.onnx",
        provenance=replace(run.provenance, config=hf_config),
    )
    assert own_export_words(hf_run) == "Parity's own export of the model (removed after the run)"
    given = replace(run, model="m.pt2", onnx="m.onnx")
    assert own_export_words(given) is None


def _run_is_off(at: AppTest) -> list[str]:
    return [c.value for c in at.caption if "Run is off" in c.value]


def test_the_run_button_asks_check_config_and_shows_its_reason_in_the_forms_words():
    """Issue 38: the Run page does not re-code check_config's rules: a config it refuses
    turns Run off with its reason (widgets, not flags); a valid one turns Run on."""
    from parity.dashboard.state import RUN_LAYERS as LAYERS_KEY
    from parity.run.config import config_problem
    from parity.settings import Front

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    assert not at.button(key="run_custom").disabled and not _run_is_off(at)
    # two levels against a torch model: two candidates, fine without layers ...
    at.multiselect(key="opt").set_value(["all", "basic"]).run()
    assert not at.button(key="run_custom").disabled and not _run_is_off(at)
    # ... refused with them, in check_config's words said for the dashboard
    at.checkbox(key=LAYERS_KEY).check().run()
    assert at.button(key="run_custom").disabled
    problem = config_problem(
        RunConfig(model="m.pt2", onnx=("a.onnx",), ort_opt_level=("all", "basic"), layers=True)
    )
    assert problem is not None
    reason = problem.words(Front.DASHBOARD)
    assert reason.startswith("“Compare layers” compares one ONNX file") and "--" not in reason
    assert _run_is_off(at) == [f":red[Run is off:] {md_text(reason)}"]
    # no level at all: check_config's first rule, and back on once one is chosen
    at.checkbox(key=LAYERS_KEY).uncheck().run()
    at.multiselect(key="opt").set_value([]).run()
    assert at.button(key="run_custom").disabled
    assert "ORT optimisation levels" in _run_is_off(at)[0]
    at.multiselect(key="opt").set_value(["basic"]).run()
    assert not at.button(key="run_custom").disabled and not _run_is_off(at)
    assert not at.exception, at.exception


def test_suggest_checks_the_run_the_command_started(tmp_path, monkeypatch):
    """`parity dashboard --model demo:fp16`: the user typed that model, so Suggest makes it
    again on fresh input sets (a saved run opened by hand is not made again)."""
    from parity.cli import main
    from parity.dashboard.tolerances import REOPENED

    saved = tmp_path / "fp16.parity.npz"
    assert main(["validate", "--model", "demo:fp16", "--save-run", str(saved)]) == 1
    at = _open(saved, monkeypatch, scratch=True)
    at.switch_page("pages/tolerances.py").run()
    at.button(key="tol_suggest").click().run()
    assert not at.exception, at.exception
    _, checked = at.session_state["tol_suggested"]
    assert checked.checked_on and checked.outputs, checked
    assert REOPENED not in checked.withheld.values()
    shown = "\n".join(t.value for t in at.text)
    assert "As flags" not in shown and "--tol" not in shown  # the page applied them
