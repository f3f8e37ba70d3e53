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
