"""The Run page's Float inputs range field (--float-range LO:HI) under Streamlit's AppTest,
on the built-in cnn demo (real torch, real ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_the_float_inputs_range_field_sets_the_generated_inputs() -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    assert not at.exception, at.exception
    at.text_input(key="float_range").set_value("0.25:0.5").run()
    at.button(key="run_custom").click().run()
    assert not at.exception, at.exception
    run = at.session_state["parity_run"]
    (x,) = run.input_sets[0].feeds.values()
    assert x.min() >= 0.25 and x.max() <= 0.5
    assert "uniform in [0.25, 0.5] (--float-range)" in run.input_sets[0].label


def test_a_bad_float_inputs_range_is_said_in_the_widget_words() -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.text_input(key="float_range").set_value("1:0").run()
    assert not at.exception, at.exception
    shown = [e.value.replace("\\", "") for e in at.error]  # text: its punctuation escaped
    assert any("“Float inputs range”: need finite LO < HI, got 1:0" in e for e in shown), shown
    at.button(key="run_custom").click().run()
    (x,) = at.session_state["parity_run"].input_sets[0].feeds.values()
    assert np.asarray(x).min() < -1  # the default: standard normal
