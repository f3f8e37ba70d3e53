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
