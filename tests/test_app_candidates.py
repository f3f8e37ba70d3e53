"""The dashboard with several candidates (issue 13), under AppTest: the Run page takes
several ONNX files / levels and ONNX against ONNX; the Overview shows the candidates x
outputs grid with each candidate's verdict and re-judges it at the session's tolerances;
Inspect and Tolerances have a candidate selector. Real exports, real torch and ORT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.dashboard.text import md_text
from parity.tolerances import Tolerance, Tolerances
from tests.helpers.candidate_exports import Exports

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 240


@pytest.fixture(scope="module")
def exports(candidate_exports: Exports) -> Exports:
    """The session's candidate exports (tests/conftest.py), read only."""
    return candidate_exports


def _grid_marks(at: AppTest) -> dict[tuple[int, str], str]:
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        for trace in spec["data"]:
            custom = trace.get("customdata")
            if trace["type"] == "scatter" and custom and len(custom[0]) == 3:
                return {(int(c[0]), c[1]): m for c, m in zip(custom, trace["text"], strict=True)}
    raise AssertionError("no candidates grid on the page")


@pytest.fixture(scope="module")
def side_by_side(exports: Exports) -> AppTest:
    """The Run page: the .pt2, dynamo + legacy + buggy exports, levels disable and all."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.radio(key="model_source").set_value("Path on this machine").run()
    at.text_input(key="model_path").input(str(exports.pt2)).run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").input(str(exports.dynamo)).run()
    at.text_area(key="onnx_more").input(f"{exports.legacy}\n{exports.buggy}\n").run()
    at.multiselect(key="opt").set_value(["disable", "all"]).run()
    assert not at.exception, at.exception
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    return at


def test_run_page_runs_every_file_at_every_level_as_candidates(side_by_side: AppTest):
    run = side_by_side.session_state["parity_run"]
    got = [(Path(c.onnx).name, c.ort_opt_level) for c in run.infos]
    assert got == [(f, lv) for f in ("dynamo.onnx", "legacy.onnx", "buggy.onnx")
                   for lv in ("disable", "all")]  # fmt: skip
    assert [run.candidate(i).verdict for i in range(6)] == ["pass"] * 4 + ["fail"] * 2
    said = md_text("6 candidates: 4 pass, 2 fail")  # names and counts are shown as text
    assert any(said in m.value for m in side_by_side.markdown)
    # three exports side by side are not stages unless the box says so (issue 60)
    assert not [a for a in run.analyses if a.analysis == "stages"]


def test_the_stages_box_makes_the_files_a_pipeline(exports: Exports):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.radio(key="model_source").set_value("Path on this machine").run()
    at.text_input(key="model_path").input(str(exports.pt2)).run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").input(str(exports.dynamo)).run()
    at.text_area(key="onnx_more").input(f"{exports.buggy}\n").run()
    at.checkbox(key="run_stages").check().run()
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    [stage] = [f for f in run.findings if f.kind == "stage"]
    assert stage.text.startswith("The numbers first break at #1 buggy.onnx")


def test_overview_grid_shows_candidates_by_outputs_and_follows_the_tolerances(
    side_by_side: AppTest,
):
    at = side_by_side
    at.switch_page("pages/overview.py").run()
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "opt level" in d.value.columns)
    assert list(table["verdict"]) == ["✓ pass"] * 4 + ["✗ FAIL"] * 2
    marks = _grid_marks(at)
    assert {marks[(k, "logits")] for k in (4, 5)} == {"✗"}
    assert {marks[(k, n)] for k in range(4) for n in ("logits", "total")} == {"✓"}
    # the selector opens on the first failing candidate; the detail table is its rows only
    assert at.selectbox(key="candidate_overview").value == 4
    detail = next(d.value for d in at.dataframe if "shape ref / onnx" in d.value.columns)
    assert len(detail) == 2 * 2 and set(detail["status"]) == {"✗ fail"}  # 2 sets x 2 outputs
    at.session_state["parity_tolerances"] = Tolerances(default=Tolerance(atol=0.1, rtol=0.0))
    at.run()
    assert not at.exception, at.exception
    assert set(_grid_marks(at).values()) == {"✓"}  # re-judged: every candidate passes


def test_inspect_and_tolerances_have_a_candidate_selector(side_by_side: AppTest):
    at = side_by_side
    at.session_state["parity_tolerances"] = at.session_state["parity_run"].tolerances
    at.switch_page("pages/inspect_page.py").run()
    assert not at.exception, at.exception
    assert "buggy.onnx" in at.selectbox(key="candidate_inspect").format_func(4)
    assert any(m.value.startswith("**FAIL**") for m in at.markdown)
    at.selectbox(key="candidate_inspect").set_value(1).run()
    assert not at.exception, at.exception
    assert any(m.value.startswith("**PASS**") for m in at.markdown)
    at.switch_page("pages/tolerances.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="candidate_tolerances").value == 1  # the choice is shared
    table = next(d.value for d in at.dataframe if "opt level" in d.value.columns)
    assert list(table["verdict"]) == ["✓ pass"] * 4 + ["✗ FAIL"] * 2


def test_onnx_against_onnx_from_the_run_page(exports: Exports):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.radio(key="model_source").set_value("None: ONNX against ONNX").run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").input(str(exports.legacy)).run()
    assert at.button(key="run_custom").disabled  # one file, one level: nothing to compare
    at.text_area(key="onnx_more").input(str(exports.fp16)).run()
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    assert run.model == f"onnx:{exports.legacy}" and run.provenance.reference_file
    (candidate,) = run.infos
    assert Path(candidate.onnx).name == "fp16.onnx" and run.verdict == "fail"
