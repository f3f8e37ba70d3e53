"""The markdown-escaping rule for user strings (rendering is checked in Chromium)."""

from __future__ import annotations

from parity.dashboard.text import md_code, md_text


def test_md_text_escapes_every_markup_character_and_breaks_autolinks():
    out = md_text("![b](http://h/x.png) :red[R] $x$ www.e.com a@b.co\nnext")
    assert "![" not in out and "](" not in out and ":red[" not in out and "$x$" not in out
    assert "http:" not in out and "www." not in out and "a@" not in out
    assert "\n" not in out
    visible = out.replace("\\", "").replace("\u2060", "")
    assert visible == "![b](http://h/x.png) :red[R] $x$ www.e.com a@b.co next"


def test_md_code_fences_past_the_longest_backtick_run():
    assert md_code("mask") == "`mask`"
    assert md_code("a`b``c") == "```a`b``c```"
    assert md_code("`a") == "`` `a ``"
    assert md_code(" a ") == "`  a  `"
    assert md_code(":material/home:") == md_text(":material/home:")  # rewritten in code spans
    assert md_code("  ") == md_text("  ")


def test_a_lone_double_dash_is_a_code_span_so_no_em_dash_replaces_it():
    out = md_text("start it with: streamlit run app.py -- --trust-code")
    assert "`--`" in out  # Streamlit's typography leaves code spans alone (seen in Chromium)
    assert out.replace("\\", "").replace("`", "") == (
        "start it with: streamlit run app.py -- --trust-code"
    )
    assert md_text("--flag a--b") == md_text("--flag a--b").replace("`", "")  # not lone


def test_counts_and_alls_read_as_people_say_them():
    """Issue 22: "all 2 outputs pass" and "1 outputs" read as "both outputs" and "1 output"."""
    from parity.text import all_text, count_text, times_text

    assert [count_text(n, "output") for n in (0, 1, 2, 1234)] == [
        "0 outputs", "1 output", "2 outputs", "1,234 outputs"
    ]  # fmt: skip
    assert count_text(1, "input set") == "1 input set"
    assert [all_text(n, "output") for n in (1, 2, 3)] == [
        "the one output", "both outputs", "all 3 outputs"
    ]  # fmt: skip
    assert [times_text(x) for x in (0.13, 4.2, 48123.0, 1.2e10, float("inf"))] == [
        "0.13 times", "4.2 times", "48,100 times", "1.20e+10 times", "an unbounded multiple of"
    ]  # fmt: skip


def test_a_dim_name_an_exporter_made_up_reads_as_the_op_that_sets_it() -> None:
    from parity.signature import readable_dim
    from parity.text import axis_text

    assert axis_text(1, 32, readable_dim("Resizeout_dim_1")) == "Resize size (axis 1, size 32)"
    assert readable_dim("unk__7") is None and readable_dim("height") == "height"


def test_every_dim_name_the_legacy_exporter_makes_up_reads_as_its_op(tmp_path) -> None:
    """The legacy exporter names an output's computed dims OP + OUTPUT + _dim_K ("Convy_dim_3",
    "LayerNormalizationlast_hidden_state_dim_0"), whatever the output is called."""
    import warnings

    import torch

    from parity.load.onnx_model import load_onnx
    from parity.signature import readable_dim

    path = tmp_path / "conv.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            torch.nn.Conv2d(3, 4, 3, padding=1), (torch.randn(1, 3, 8, 8),), str(path),
            dynamo=False, input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        )  # fmt: skip
    signature = load_onnx(path).signature
    assert signature.outputs[0].shape[2:] == ("Convy_dim_2", "Convy_dim_3")  # the premise
    assert signature.output_dim_names("y", 4)[2:] == ("Conv size", "Conv size")
    assert readable_dim("LayerNormalizationlast_hidden_state_dim_0") == "LayerNormalization size"
    assert readable_dim("Conv_dim_0") == "Conv_dim_0"  # no output name after the op: the user's
