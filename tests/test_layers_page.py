"""The Layers page under AppTest: what it says without a layers result, with one, and with
user names that look like markup (they must stay text).

The run is a real demo run (real torch, real ONNX Runtime); its layers block is built by hand
(tests/test_layers_views.py's chain) so the page's every line has one right answer. The page on
a real engine's result is in tests/test_layers_ui_real.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from parity.layers.result import KeptValue, LayersResult
from tests.test_layers_views import EVIL, chain

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 180


@pytest.fixture(scope="module")
def demo_run():
    from parity.pipeline import RunConfig, run_validation

    return run_validation(RunConfig(model="demo:cnn", onnx=None))


def _open(run, page="pages/layers.py") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def _with_layers(run, result: LayersResult):
    ref = np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)
    kept = (KeptValue(6, 0, "v6", ref, ref + np.float32(1e-3)),)
    return run.with_layers({0: replace(result, kept=kept)})


def _all_markdown(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for e in at.info] + [e.value for e in at.warning]
    return "\n".join(parts)


def test_a_run_without_layers_offers_to_compare_them_in_one_click(demo_run):
    """The run carries the settings that made it: the page runs it again with layers."""
    at = _open(demo_run)
    (info,) = at.info
    assert "Run it again comparing every intermediate value" in info.value
    assert at.button(key="layers_rerun").label == "Compare layers for this run"
    assert not at.get("plotly_chart")


def test_a_run_without_a_torch_model_says_how_to_get_layers(demo_run):
    from parity.results import RunKind

    provenance = replace(demo_run.provenance, config=None, kind=RunKind.REFERENCE)
    run = replace(demo_run, model="reference:ref.npz", provenance=provenance)
    at = _open(run)
    (info,) = at.info
    # the page's own control, never the CLI flag it stands for (issue 60)
    assert "Compare layers" in info.value and "--layers" not in info.value
    assert not at.button and not at.get("plotly_chart")


def test_the_page_states_the_first_divergence_draws_it_and_lists_every_value(demo_run):
    result = chain(module=EVIL)
    at = _open(_with_layers(demo_run, result))
    texts = [t.value for t in at.text]
    sentence = next(t for t in texts if t.startswith("The export starts to diverge"))
    assert EVIL in sentence and "Gemm node /n6/Gemm" in sentence
    # names reach the page as text only: no markdown element carries them
    assert "<b>2</b>" not in _all_markdown(at) and "**mlp**" not in _all_markdown(at)
    assert any("DIVERGES" in m.value for m in at.markdown)
    # the engine's limits are listed, not hidden
    assert "• 2 ONNX value(s) have no torch counterpart." in texts
    assert "• a note from the engine" in texts
    figs = [json.loads(f.proto.spec) for f in at.get("plotly_chart")]
    assert [f["data"][0]["type"] for f in figs] == ["scatter", "icicle"]
    table = at.dataframe[0].value
    assert len(table) == len(result.values)
    assert list(table["order"]) == sorted(table["order"])
    born = table[table["status"] == "✗ diverges"]
    assert list(born["order"]) == [6, 6] and list(born["module"]) == [EVIL, EVIL]
    assert set(table["status"]) == {"✓ pass", "✗ diverges", "· carried"}
    assert (table["arrays"] == "kept").sum() == 1
    # filters: status, input set, text
    at.multiselect(key="layers_status").set_value(["✗ diverges"]).run()
    assert len(at.dataframe[0].value) == 2
    at.multiselect(key="layers_status").set_value(["✓ pass", "· carried"]).run()
    at.selectbox(key="layers_set").set_value(1).run()
    at.text_input(key="layers_text").input("fc2").run()
    shown = at.dataframe[0].value
    assert (
        len(shown) == 4
        and set(shown["set"]) == {1}
        and set(shown["module"]) == {f"blocks.{b}.fc2" for b in range(4)}
    )
    # max |error| view: the pass line is the run's atol
    at.radio(key="layers_metric").set_value("max_abs").run()
    depth = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "max |error|" in depth["layout"]["title"]["text"]
    assert any(b.label.startswith("Download Model Explorer") for b in at.get("download_button"))


def test_a_kept_value_opens_in_the_inspect_views_and_goes_back(demo_run):
    run = _with_layers(demo_run, chain())
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.session_state["parity_inspect_layer"] = (6, 0)  # what selecting its row sets
    at.switch_page("pages/inspect_page.py").run()
    assert not at.exception, at.exception
    assert any(t.value.startswith("v6 · Gemm node /n6/Gemm · module blocks.2.fc1") for t in at.text)
    types = [json.loads(f.proto.spec)["data"][0]["type"] for f in at.get("plotly_chart")]
    assert types == ["bar", "heatmap", "heatmap", "bar", "scatter"]  # where profile (bars) first
    assert any("FAIL" in m.value and "default tolerance" in m.value for m in at.markdown)
    # a looser session tolerance re-judges the kept value (its comparison is not recomputed)
    from parity.tolerances import Tolerance, Tolerances

    box = at.session_state["parity_inspect_cache"]
    at.session_state["parity_tolerances"] = Tolerances(default=Tolerance(atol=0.01))
    at.run()
    assert any(
        m.value.startswith("**PASS** at the default tolerance (atol 0.01") for m in at.markdown
    )
    assert at.session_state["parity_inspect_cache"] is box
    at.button(key="insp_layer_back").click().run()
    assert not at.exception
    assert "parity_inspect_layer" not in at.session_state
    assert at.selectbox(key="insp_out").value == "logits"


def test_a_layers_result_with_nothing_compared_says_so(demo_run):
    empty = LayersResult(
        criterion="c", matching="module boundaries", matched=0, unmatched_onnx=40,
        unmatched_torch=12, first_divergence=None, values=(),
        notes=("TorchScript without a graph: no torch intermediates",),
    )  # fmt: skip
    at = _open(demo_run.with_layers({0: empty}))
    texts = [t.value for t in at.text]
    assert any("nothing compared" in t for t in texts)
    assert "• 40 ONNX value(s) have no torch counterpart." in texts
    assert "• TorchScript without a graph: no torch intermediates" in texts
    assert any("nothing to draw" in w.value for w in at.warning)
