"""A run in plain words (parity.show.summary), in the order a stakeholder reads it: the
verdict, then the findings (where the export starts to diverge, rounding or a bug), then the
numbers, then the technical notes; the same words in the HTML report (tests/test_html_report.py)
and on the Overview page (here, AppTest). Real demo runs: real torch, real ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.pipeline import RunConfig, run_validation
from parity.reports.html_report import render_html_report
from parity.show.summary import headline, notes, plain_summary

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(scope="module")
def broken_found():
    """demo:broken with its layers compared and its rounding noise measured."""
    return run_validation(RunConfig(model="demo:broken", onnx=None, layers=True, noise_floor=True))


def test_a_failing_run_says_where_it_diverges_and_that_it_is_not_rounding(broken_found):
    said = plain_summary(broken_found)
    assert said.headline == (
        "The export does not match PyTorch: 1 of 2 outputs differ beyond the allowed error."
    )
    texts = [f.text for f in said.findings]
    assert texts[0] == "The export starts to diverge at the Pad node node_pad, outside any module."
    assert texts[1].startswith("Not rounding: run alone on PyTorch's exact inputs")
    # the layers confirmed the birth: the failing output is a bug, said once, never rounding
    assert texts[2].startswith("mask: a bug, not rounding: the error is made at the Pad node")
    assert [f.kind for f in said.findings] == ["bug", "bug", "bug"]
    assert said.findings[2].output == "mask"
    assert not any("atol" in line for line in (said.headline, *texts))
    assert "atol 1e-05, rtol 0" in said.notes[0]


def test_a_passing_run_has_no_findings():
    run = run_validation(RunConfig(model="demo:cnn", onnx=None))
    assert headline(run).startswith("The export matches PyTorch: both outputs agree")
    assert run.findings == () and notes(run)


def test_the_html_report_puts_the_findings_before_the_numbers(broken_found):
    text = render_html_report(broken_found)
    order = [
        text.index("The export does not match PyTorch"),
        text.index("The export starts to diverge at the Pad node"),
        text.index("<h2>In numbers"),
        text.index("<h2>Technical notes"),
    ]
    assert order == sorted(order)


def test_the_overview_opens_with_the_verdict_then_findings_then_numbers_then_notes(
    broken_found,
):
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["parity_run"] = broken_found
    at.session_state["parity_tolerances"] = broken_found.tolerances
    at.switch_page("pages/overview.py").run()
    assert not at.exception, at.exception
    texts = [m.value for m in at.markdown]
    position = {
        what: next(i for i, t in enumerate(texts) if needle in t)
        for what, needle in (
            ("headline", "The export does not match PyTorch"),
            ("findings", "The export starts to diverge at the Pad node"),
            ("numbers", "mask fails"),
            ("notes", "Each element passes when"),
        )
    }
    assert list(position.values()) == sorted(position.values()), position
    assert "atol" not in "\n".join(texts[: position["numbers"]])
    subheaders = [s.value for s in at.subheader]
    assert subheaders.index("In numbers") < subheaders.index("Technical notes")


def test_the_html_report_names_a_demo_export_for_what_it_is_not_its_cache_path():
    """A reader of the report gets "the demo's own export", never Parity's cache folder."""
    import html as html_lib

    from parity import validate
    from parity.reports.html_report import render_html_report

    run = validate("demo:broken")
    header = render_html_report(run).split("<header>", 1)[1].split("</header>", 1)[0]
    assert "demo:broken against the demo's own export" in html_lib.unescape(header)
    assert html_lib.escape(run.onnx) not in header and run.onnx not in header
