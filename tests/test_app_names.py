"""Names are text: a real export whose output names are markup payloads, through AppTest.

AppTest gives each element's markdown source; every payload must appear there only as the
escaped form the pages build with parity.dashboard.text (the Chromium test checks what renders).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.dashboard.text import md_code, md_text
from tests.helpers.payloads import FAILING, NAMES, write_payload_models

APP = str(Path(__file__).resolve().parents[1] / "app.py")
DANGEROUS = ("![", "](", "<a", "<img", ":red[", "$x$", "**b**", "http:", ":material/")


@pytest.fixture(scope="module")
def payload_app(tmp_path_factory) -> AppTest:
    pt2, onnx = write_payload_models(tmp_path_factory.mktemp("payload"))
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.radio(key="model_source").set_value("Path on this machine").run()
    at.text_input(key="model_path").set_value(str(pt2)).run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").set_value(str(onnx)).run()
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    assert at.session_state["parity_run"].output_names == NAMES
    return at


def _markdown_sources(at: AppTest) -> list[str]:
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success"):
        out += [el.value for el in at.get(kind)]
    out += [b.label for b in at.button]
    return out


def _assert_only_escaped(sources: list[str]) -> None:
    for source in sources:
        for name in NAMES:
            source = source.replace(md_code(name), "").replace(md_text(name), "")
        for bad in DANGEROUS:
            assert bad not in source, (bad, source)


def test_payload_names_are_escaped_on_every_page(payload_app: AppTest):
    at = payload_app
    run_sources = _markdown_sources(at)
    assert "**Failing outputs**, worst first:" in run_sources
    sentences = next(s for s in run_sources if s.startswith("- ") and " fails" in s)
    # one head line per failing output (parity.show.sentences.output_facts), each leading with
    # its escaped name; its facts are the nested lines under it
    heads = [line for line in sentences.splitlines() if line.startswith("- ")]
    assert sorted(line[2:].split(" fails")[0].strip("*") for line in heads) == sorted(
        md_text(n) for n in FAILING
    )
    _assert_only_escaped(run_sources)
    for page in ("pages/overview.py", "pages/inspect_page.py", "pages/tolerances.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        _assert_only_escaped(_markdown_sources(at))
        for figure in at.get("plotly_chart"):
            spec = json.loads(figure.proto.spec)
            for trace in spec["data"]:
                trace.pop("customdata", None)  # data for click selection, never drawn
            drawn = json.dumps(spec)
            assert "<a " not in drawn and "<img" not in drawn, page
