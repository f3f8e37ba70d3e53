"""User strings as text in Streamlit's markdown: names, paths and messages never become markup.

Streamlit renders markdown in st.markdown, st.caption, st.error/info/warning/success, widget
labels, st.status and st.progress text, so an output name like ``![b](http://host/x.png)``
would make the viewer's browser fetch a URL, and ``[x](javascript:...)`` would be a link.
Every user-controlled string a page puts into markdown goes through `md_text` or `md_code`.
(Plain-text elements need nothing: st.text, st.code, st.dataframe cells, selectbox options.)
"""

from __future__ import annotations

import re
import string

from parity.settings import Front, flags_said

_PUNCT = frozenset(string.punctuation)
# GFM turns bare URLs and e-mail addresses in text into links even when escaped: a word
# joiner (U+2060, invisible) where the pattern would start keeps them text.
_AUTOLINK = re.compile(r"(?i)(?<=https)(?=:)|(?<=http)(?=:)|(?<=ftp)(?=:)|(?<=www)(?=\.)|(?=@)")
_WORD_JOINER = "\u2060"
_BACKTICKS = re.compile("`+")
_LONE_DASHES = re.compile(r"(?<!\S)--(?!\S)")


def _one_line(value: object) -> str:
    return " ".join(str(value).splitlines())


def md_text(value: object) -> str:
    """Markdown that shows `value` literally, on one line (every ASCII punctuation escaped).

    Streamlit's typography turns a lone ``--`` into an em dash even when escaped, which
    breaks a command such as ``streamlit run app.py -- --trust-code``: it goes in a code span.
    """
    pieces = _LONE_DASHES.split(_one_line(value))
    return "`--`".join(_escaped(piece) for piece in pieces)


def _escaped(text: str) -> str:
    # the joiners go in before escaping: after it, "http:" reads "http\\:" and the lookahead
    # for ":" never matched, so a name holding a URL became a link in a sentence
    joined = _AUTOLINK.sub(_WORD_JOINER, text)
    return "".join("\\" + ch if ch in _PUNCT else ch for ch in joined)


def md_code(value: object) -> str:
    """`value` as an inline code span (nothing inside one is markup), fenced past its backticks.

    Streamlit rewrites ``:material/`` anywhere in the source, code spans included, so such a
    string is shown as escaped text instead.
    """
    text = _one_line(value)
    if ":material/" in text or not text.strip():
        return md_text(text)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    # CommonMark strips one space from each end when both ends have one
    pad = " " if "`" in (text[0], text[-1]) or (text[0] == " " and text[-1] == " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def dashboard_words(message: str) -> str:
    """Text that names `parity validate` flags (a run's findings) in the dashboard's words:
    each flag becomes the widget that sets it ("--provider" -> "“Execution providers”"). An
    error says its own (`ParityError.words(Front.DASHBOARD)`)."""
    return flags_said(message, Front.DASHBOARD)
