"""The dashboard's pages under Streamlit's AppTest, on the real demos (real torch, real ORT).

AppTest reruns the whole script on every interaction (fragments included); partial reruns
are checked in a real browser by tests/test_browser.py.

Known AppTest quirk (Streamlit 1.67): with a `pages/` folder beside app.py, AppTest's reruns
after the first run the current page's script alone, not app.py, so the shared sidebar is
drawn on the first run only. The real server runs app.py every time (the browser tests see
the sidebar); sidebar behaviour is tested on a first run (`?run=FILE`) or in the browser.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from parity.dashboard.text import md_text
from parity.tolerances import Tolerances

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 180


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception
    return at


def _run_demo(at: AppTest, name: str) -> AppTest:
    at.button(key=f"demo_{name}").click().run()
    assert not at.exception, at.exception
    assert at.session_state["parity_run"].model == f"demo:{name}"
    return at


WHERE_TITLE = "Mismatch fraction and worst error"


def _figures(at: AppTest, *, where: bool = False) -> list[dict]:
    """The page's plotly figures; Inspect's per-axis "where" profile only when asked for."""
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    is_where = [f["layout"].get("title", {}).get("text", "").startswith(WHERE_TITLE) for f in figs]
    return [f for f, w in zip(figs, is_where, strict=True) if w == where]


def _z(figure: dict) -> np.ndarray:
    """A heatmap's z as numpy (plotly sends big arrays as base64 typed arrays)."""
    import base64

    z = figure["data"][0]["z"]
    if isinstance(z, dict):
        shape = tuple(int(d) for d in str(z["shape"]).split(","))
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(shape)
    return np.asarray(z, dtype=float)


def _table(at: AppTest, column: str):
    """The first dataframe on the page that has `column`."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def _markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


@pytest.fixture(scope="module")
def broken_app() -> AppTest:
    return _run_demo(_app(), "broken")


def test_first_open_offers_every_demo_and_states_the_upload_limit():
    at = _app()
    keys = {b.key for b in at.button}
    assert {"demo_cnn", "demo_transformer", "demo_fp16", "demo_broken"} <= keys
    assert any("2,048 MB" in c.value for c in at.caption)
    # the default demo's ONNX signature is shown before anything runs
    assert "symbolic dims" in _markdown(at)


def test_demo_broken_runs_end_to_end_and_names_the_failing_output(broken_app: AppTest):
    at = broken_app
    text = _markdown(at)
    assert "FAIL" in text and "mask fails" in text  # parity.show.sentences, under the verdict
    run = at.session_state["parity_run"]
    failing = {c.name for c in run.comparisons if not c.status.passed}
    assert failing == {"mask"}


def test_overview_shows_verdict_table_and_grid(broken_app: AppTest):
    at = broken_app
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    assert "FAIL" in _markdown(at)
    table = at.dataframe[0].value
    mask_rows = table[table["output"] == "mask"]
    assert (mask_rows["status"] == "✗ fail").any()
    assert (table[table["output"] == "embedding"]["status"] == "✓ pass").all()
    assert mask_rows["mismatched"].max() > 0  # the fraction (a progress bar)
    assert set(table["set"]) == {0, 1}
    (grid,) = _figures(at)
    assert [t["type"] for t in grid["data"]] == ["heatmap", "scatter"]
    assert "✗" in grid["data"][1]["text"]
    assert any(b.key == "inspect_worst" for b in at.button)


def test_inspect_draws_heatmap_with_worst_marks_histogram_and_scatter(broken_app: AppTest):
    at = broken_app
    at.switch_page("pages/overview.py").run()
    at.button(key="inspect_worst").click().run()
    assert not at.exception
    assert at.selectbox(key="insp_out").value == "mask"
    (where,) = _figures(at, where=True)  # the per-axis profile, under the where sentence
    figs = _figures(at)
    assert [a["title"]["text"] for k, a in where["layout"].items() if k.startswith("xaxis")] == [
        "axis 0 (batch)",
        "axis 2 (height)",
        "axis 3 (width)",
    ]
    assert "**Where:** all 248 mismatches" in _markdown(at)
    # the slice selectors and the heatmap's axes carry the ONNX dim names
    assert at.selectbox(key="insp_0_mask_row").options[2] == "height (axis 2, size 32)"
    assert at.selectbox(key="insp_0_mask_col").value == 3
    label = at.number_input(key="insp_0_mask_idx0").label  # markdown: the name escaped
    assert label == md_text("batch (axis 0, size 2): index (0..1)")
    heat = figs[0]
    assert heat["layout"]["xaxis"]["title"]["text"] == "width (axis 3, size 32)"
    assert "ONNX %{customdata[2]" in heat["data"][0]["hovertemplate"]
    assert heat["data"][0]["zmin"] == -3
    assert "1× pass line" in heat["data"][0]["colorbar"]["ticktext"]
    assert [t["type"] for t in heat["data"]][:2] == ["heatmap", "scatter"]
    assert "every element drawn" in heat["layout"]["title"]["text"]
    assert [t["type"] for t in figs[1]["data"]] == ["heatmap"] * 3
    assert figs[2]["data"][0]["type"] == "bar"  # histogram
    assert figs[3]["data"][0]["name"].startswith("pass band")
    worst = at.dataframe[0].value
    assert len(worst) > 0 and worst["abs error"].iloc[0] >= worst["abs error"].iloc[-1]
    # signed error: centred colour scale (AppTest keeps its own page after st.switch_page)
    at.switch_page("pages/inspect_page.py")
    at.radio(key="insp_kind").set_value("signed").run()
    heat = _figures(at)[0]
    assert heat["data"][0]["zmid"] == 0
    at.radio(key="insp_kind").set_value("fails").run()  # only what fails at this tolerance
    heat = _figures(at)[0]
    assert "blank: passes at this tolerance" in heat["layout"]["title"]["text"]
    z = _z(heat).astype(float)
    assert np.isfinite(z).sum() == 124 and (z[np.isfinite(z)] > 0).all()  # the border only


def test_inspect_pools_a_large_output_and_says_by_how_much():
    from parity.judge.compare import compare_outputs
    from parity.results import InputSet, OutputSet, ValidationRun
    from parity.tolerances import Tolerance

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((2, 1200, 900), dtype=np.float32)
    onnx = ref.copy()
    onnx[1, 700:720, 100:140] += 0.5
    comparison = compare_outputs(ref, onnx, name="big", input_set=0, tolerance=Tolerance())
    run = ValidationRun.from_rows(
        model="synthetic", onnx="synthetic.onnx", signature=None, tolerances=Tolerances(),
        environment={}, input_sets=(InputSet(0, {"x": np.zeros(1, np.float32)}),),
        outputs=(comparison,), ref_outputs=(OutputSet({"big": ref}),),
        onnx_outputs=(OutputSet({"big": onnx}),),
    )  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/inspect_page.py").run()
    assert not at.exception
    heat = _figures(at)[0]
    title = heat["layout"]["title"]["text"]
    assert "block max-pooled 5x4" in title and "[1, :, :]" in title  # slice through the worst
    assert heat["data"][0]["z"]["shape"].replace(" ", "") == "240,225"
    assert len(json.dumps(heat)) < 2 * 1024 * 1024


def test_inspect_reuses_its_views_when_the_session_tolerances_differ_from_the_runs():
    # the memo was keyed on the re-judged run, a new object on every rerun: every click
    # recomputed the full-tensor views
    from parity.judge.compare import compare_outputs
    from parity.results import InputSet, OutputSet, ValidationRun
    from parity.tolerances import Tolerance

    ref = np.random.default_rng(1).standard_normal((40, 30), dtype=np.float32)
    onnx = ref + np.float32(1e-3)
    comparison = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=Tolerance())
    run = ValidationRun.from_rows(
        model="synthetic", onnx="synthetic.onnx", signature=None, tolerances=Tolerances(),
        environment={}, input_sets=(InputSet(0, {"x": np.zeros(1, np.float32)}),),
        outputs=(comparison,), ref_outputs=(OutputSet({"y": ref}),),
        onnx_outputs=(OutputSet({"y": onnx}),),
    )  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = Tolerances(default=Tolerance(1e-2, 0.0))
    at.switch_page("pages/inspect_page.py").run()
    assert not at.exception
    assert "PASS" in _markdown(at)  # judged at the session's tolerances
    views = dict(at.session_state["parity_inspect_cache"]["entries"])
    assert len(views) == 3
    at.radio(key="insp_kind").set_value("signed").run()
    again = at.session_state["parity_inspect_cache"]["entries"]
    assert all(again[key] is value for key, value in views.items())


def test_inspect_shows_what_the_verdict_judged_and_says_what_it_excluded():
    # Before: Inspect ranked padding positions the verdict had excluded (a worst element of
    # 0.257 for an output whose stats said 7.45e-8).
    from parity.pipeline import compare_case
    from parity.results import InputSet, OutputSet, ValidationRun
    from parity.sources import Case

    rng = np.random.default_rng(1)
    ref = rng.standard_normal((2, 4, 6, 8), dtype=np.float32)
    onnx = ref + np.float32(1e-7)
    pad = np.zeros((2, 1, 6, 1), dtype=bool)
    pad[0, :, :2] = True  # left padding of row 0
    onnx[0, :, :2] += 0.257
    # one worst element, in row 0 beside its padding: 1e-7 alone ties ~200 elements at one ulp,
    # and which of the ties is "worst" (so which slice Inspect opens) is numpy's partition
    # order, which differs between CPUs (its SIMD sorts)
    onnx[0, 0, 3, 0] += np.float32(5e-7)
    case = Case(InputSet(0, {}), OutputSet({"kv": ref}), exclude={"kv": pad}, exclude_reason="pad")
    shown, comparisons = compare_case(case, OutputSet({"kv": onnx}), Tolerances())
    (comparison,) = comparisons
    assert comparison.status.passed and comparison.stats.max_abs < 1e-6
    assert comparison.stats.worst_index == (0, 0, 3, 0)  # the planted one, not a tie
    run = ValidationRun.from_rows(
        model="synthetic", onnx="synthetic.onnx", signature=None, tolerances=Tolerances(),
        environment={}, input_sets=(case.input_set,), outputs=tuple(comparisons),
        ref_outputs=(case.reference,), onnx_outputs=(shown,), exclusions=(case.exclude,),
    )  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/inspect_page.py").run()
    assert not at.exception
    worst = _table(at, "abs error")
    assert worst["abs error"].max() == pytest.approx(comparison.stats.max_abs)
    assert "not judged" in "\n".join(c.value for c in at.caption)
    heat = _figures(at)[0]
    assert "excluded" in json.dumps(heat["layout"]["title"])


def test_tolerance_slider_rejudges_fp16_to_pass_and_suggest_gives_passing_json():
    at = _run_demo(_app(), "fp16")
    at.switch_page("pages/tolerances.py").run()
    assert not at.exception
    assert "FAIL" in _markdown(at)
    table = _table(at, "min atol to pass")
    # fails atol 1e-5, said as what it is: the file's own float16 rounding (amber), no bug
    assert (table["status"] == "≈ float16 rounding").all(), table["status"]
    at.select_slider(key="tol_atol").set_value(0.1).run()
    assert not at.exception
    assert "PASS" in _markdown(at)
    assert (_table(at, "min atol to pass")["status"] == "✓ pass").all()
    assert "2 of 2 output(s) pass the tolerance in every input set" in _markdown(at)
    # back to strict, then let Suggest find per-output tolerances that pass
    at.select_slider(key="tol_atol").set_value(1e-5).run()
    assert "FAIL" in _markdown(at)
    at.button(key="tol_suggest").click().run()
    assert not at.exception
    assert "PASS" in _markdown(at)
    _, checked = at.session_state["tol_suggested"]  # fitted, then checked on fresh sets
    assert set(checked.outputs) == {"last_hidden_state", "pooled"} and checked.checked_on
    assert any("fresh input set" in c.value for c in at.caption)
    tolerances = at.session_state["parity_tolerances"]
    assert set(tolerances.outputs) == {"last_hidden_state", "pooled"}
    again = Tolerances.from_json(json.loads(tolerances.dumps()))
    assert at.session_state["parity_run"].rejudge(again).verdict == "pass"
    # the overrides editor now shows the suggestion
    editor = _table(at, "override")
    assert editor["override"].all()
    shown = [float(a) for a in editor["atol"]]  # text cells, exact
    assert shown == [tolerances.outputs[n].atol for n in editor["output"]]


def test_a_corrupt_onnx_file_turns_run_off_with_its_cause_and_keeps_the_last_good_run(tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    at = _run_demo(_app(), "cnn")
    good = at.session_state["parity_run"]
    at.radio(key="onnx_source_True").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").set_value(str(bad)).run()
    assert not at.exception
    assert any("Cannot read this ONNX file" in e.value for e in at.error)
    assert at.button(key="run_custom").disabled
    assert any("Run is off, the ONNX file cannot be read" in c.value for c in at.caption)
    assert at.session_state["parity_run"] is good
    assert "PASS" in _markdown(at)  # the previous run's verdict is still on screen


def test_a_demo_run_puts_its_own_settings_in_the_form():
    at = _run_demo(_app(), "fp16")
    assert at.radio(key="model_source").value == "Built-in demo"
    assert at.selectbox(key="model_demo").value == "fp16"
    assert at.radio(key="onnx_source_True").value == "The demo's export"
    markdown = _markdown(at)
    assert "**Failing outputs**, worst first:" in markdown
    # the worst error, in words (parity.show.sentences; md_text escapes the colon)
    assert "Worst\\: off by" in markdown


def test_the_form_widgets_carry_their_values_as_their_own_defaults_after_a_demo_run():
    """A widget the browser mounts afresh shows its proto's default: after the rerun that
    seeded the form, each default is the form's value, never the call's literal (an empty
    providers list left Run off with no reason shown)."""
    at = _run_demo(_app(), "cnn")
    at.run()  # a rerun that sets nothing through the Session State API
    assert not at.exception
    for key in ("provider", "opt"):
        widget = at.multiselect(key=key)
        assert widget.value, key
        assert [widget.options[i] for i in widget.proto.default] == widget.value, key
    assert at.radio(key="model_source").proto.default == 0  # "Built-in demo"
    demo = at.selectbox(key="model_demo")
    assert demo.options[demo.proto.default] == "cnn"
    assert at.number_input(key="n_sets").proto.default == at.number_input(key="n_sets").value


def test_run_is_off_with_its_reason_when_no_provider_or_level_is_chosen():
    at = _app()
    assert not at.button(key="run_custom").disabled
    at.multiselect(key="provider").set_value([]).run()
    assert not at.exception
    assert at.button(key="run_custom").disabled
    # check_config's reason, naming the form's widgets (tests/test_run_form.py: any reason)
    reason = "give at least one “Execution providers” and one “ORT optimisation levels”"
    assert any(reason in c.value for c in at.caption)


def test_demo_query_parameter_runs_that_demo_on_first_open():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["demo"] = "broken"
    at.run()
    assert not at.exception
    assert at.session_state["parity_run"].model == "demo:broken"
    assert "FAIL" in _markdown(at)
    run = at.session_state["parity_run"]
    at.run()  # a rerun in the same session does not run the demo again
    assert at.session_state["parity_run"] is run


def test_pages_without_a_run_point_to_the_run_page():
    pages = ("overview", "inspect_page", "tolerances", "layers", "generation")
    for page in pages:  # one preamble, in the frame (parity.dashboard.frame.run_or_invite)
        at = AppTest.from_file(APP, default_timeout=TIMEOUT)
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception
        assert [i.value for i in at.info if "No run yet" in i.value], page
        assert [link for link in at.get("page_link") if "Go to Run" in str(link.proto)], page


def test_llm_directory_runs_every_generate_step_and_overview_shows_the_steps_grid(llama_dir):
    directory = llama_dir
    at = _app()
    at.radio(key="model_source").set_value("Hugging Face directory (LLM)").run()
    at.text_input(key="hf_dir").input(directory).run()
    at.number_input(key="hf_steps").set_value(3).run()
    assert not at.exception, at.exception
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run.model == f"hf:{directory}"
    assert [s.label.split(" · ")[1] for s in run.input_sets] == ["prefill", "decode", "decode"]
    assert run.verdict == "pass"
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    assert any(h.value == "Steps × outputs" for h in at.subheader)
    grid = next(f for f in _figures(at) if f["data"][0]["type"] == "heatmap")
    assert "step 3 · decode" in grid["data"][0]["y"]
    assert any("steps OK:  3/3" in c.value for c in at.code)


REOPEN_WITHOUT_TORCH = """
import json
import sys
from streamlit.testing.v1 import AppTest

at = AppTest.from_file(sys.argv[1], default_timeout=120)
at.query_params["run"] = sys.argv[2]
at.run()
assert not at.exception, at.exception
run = at.session_state["parity_run"]
assert run.verdict == "fail", run.verdict
assert {c.name for c in run.comparisons if not c.status.passed} == {"mask"}
at.switch_page("pages/inspect_page.py").run()
assert not at.exception, at.exception
types = {t["type"] for f in at.get("plotly_chart") for t in json.loads(f.proto.spec)["data"]}
assert "heatmap" in types, types
assert "torch" not in sys.modules, "opening a saved run imported torch"
print("REOPENED-WITHOUT-TORCH")
"""


def test_a_saved_demo_run_reopens_in_a_fresh_process_without_torch(tmp_path):
    import subprocess
    import sys

    from parity.cli import main

    saved = tmp_path / "broken.parity.npz"
    assert main(["validate", "--model", "demo:broken", "--save-run", str(saved)]) == 1
    result = subprocess.run(
        [sys.executable, "-c", REOPEN_WITHOUT_TORCH, APP, str(saved)],
        capture_output=True, text=True, timeout=300, cwd=str(Path(APP).parent),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "REOPENED-WITHOUT-TORCH" in result.stdout
