"""How numbers, shapes and tolerances read as text, in the terminal, the HTML report and the
dashboard: one policy for undefined and non-finite values, one shape notation, one way a user's
string is escaped into HTML, into plotly's text and onto a terminal."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "sentence_start",
    "aligned_table",
    "all_text",
    "count_text",
    "html_text",
    "axis_text",
    "number_text",
    "number_pair_text",
    "multiple_text",
    "parse_number",
    "percent_text",
    "plot_text",
    "plot_number_format",
    "ratio_text",
    "shape_text",
    "times_text",
    "terminal_text",
    "tolerance_text",
]


class _Tolerance(Protocol):  # parity.tolerances.Tolerance (which parses its numbers here)
    # read-only, as a frozen dataclass's fields are (a plain attribute would ask settable)
    @property
    def atol(self) -> float: ...
    @property
    def rtol(self) -> float: ...


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def number_text(value: float | None, digits: int | None = None) -> str:
    """'-' for undefined, 'nan', 'inf' / '-inf', '0'; else ``digits`` significant digits, or
    (by default) a short form that keeps table columns narrow: 3 digits, scientific outside
    [1e-3, 1e4)."""
    if value is None:
        return "-"
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    if digits is not None:
        return f"{value:.{digits}g}"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


def number_pair_text(a: float | None, b: float | None) -> tuple[str, str]:
    """Two numbers read side by side (the reference's and ONNX's at one element): number_text's
    short form, or as many more significant digits as it takes for two different values to
    read differently (``0.066812`` / ``0.066847``, never ``0.0668`` / ``0.0668``)."""
    texts = number_text(a), number_text(b)
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return texts  # undefined, or nan / inf (said in full)
    if texts[0] != texts[1] or float(a) == float(b):
        return texts  # different already, or the same value
    for digits in range(4, 18):  # 17 significant digits tell any two doubles apart
        texts = number_text(a, digits), number_text(b, digits)
        if texts[0] != texts[1]:
            break
    return texts


def plot_number_format(digits: int | None = None) -> str:
    """The d3 format (plotly hover templates, drawn in the browser) nearest number_text's:
    ``digits`` significant digits (3 by default), trailing zeros dropped, exponent far from 1."""
    return f".{digits or 3}~g"


def axis_text(axis: int, size: int | None = None, name: str | None = None) -> str:
    """An axis as people read it: ``height (axis 2, size 32)`` when the ONNX names it, else
    ``axis 2 (size 32)`` (or ``axis 2`` without a size). Plain text: escape it for markup."""
    where = f"axis {axis}" + ("" if size is None else f", size {size}")
    if name:
        return f"{name} ({where})"
    return f"axis {axis}" + ("" if size is None else f" (size {size})")


def ratio_text(value: float | None) -> str:
    """An error in units of the allowed error (parity.judge.ratio): ``0.13×``, ``4.81e+04×``."""
    return "-" if value is None else number_text(value) + "×"


def multiple_text(value: float) -> str:
    """A measured multiple in a sentence, to two significant digits (a noise ratio: ``0.9×``,
    ``3,600×``); ratio_text is the table's form (number_text's three digits)."""
    if value >= 100:
        return f"{float(f'{value:.2g}'):,.0f}\u00d7"
    return f"{value:.2g}\u00d7"


def percent_text(fraction: float | None) -> str:
    """A fraction as a percentage, three significant digits: ``0.3%`` (None reads as 0)."""
    return f"{100 * (fraction or 0.0):.3g}%"


def times_text(value: float) -> str:
    """An error in units of the allowed error, in words for a sentence: ``0.13 times``,
    ``48,100 times``, ``1.2e+10 times``; ``an unbounded multiple of`` for inf (NaN or Inf on
    one side). Three significant digits, as number_text."""
    value = float(value)
    if math.isinf(value):
        return "an unbounded multiple of"
    if 10 <= value < 1e9:
        return f"{float(f'{value:.3g}'):,.0f} times"
    return f"{number_text(value)} times"


def count_text(n: int, noun: str) -> str:
    """``1 output``, ``2 outputs``, ``0 outputs``: a count with its noun in the right number
    (``input set`` -> ``input sets``, ``batch`` -> ``batches``)."""
    return f"{n:,} {noun if n == 1 else plural_text(noun)}"


def plural_text(noun: str) -> str:
    """A regular noun's plural: ``output`` -> ``outputs``, ``batch`` -> ``batches``."""
    return f"{noun}es" if noun.endswith(("ch", "sh", "s", "x")) else f"{noun}s"


def all_text(n: int, noun: str) -> str:
    """Every one of `n` things, as people say it: ``the one output``, ``both outputs``,
    ``all 3 outputs`` (never "all 2 outputs" or "all 1 outputs")."""
    if n == 1:
        return f"the one {noun}"
    return f"both {plural_text(noun)}" if n == 2 else f"all {n:,} {plural_text(noun)}"


def shape_text(dims: Sequence[int] | None) -> str:
    """A shape as Python prints ``array.shape``: ``(2, 3)``, ``(5,)``, ``()``; '-' if unknown."""
    return "-" if dims is None else str(tuple(int(d) for d in dims))


def tolerance_text(tol: _Tolerance) -> str:
    """``atol 1e-05, rtol 0``."""
    return f"atol {tol.atol:g}, rtol {tol.rtol:g}"


def parse_number(text: str) -> float:
    """A number as people type it: ``5e-3``, ``1e-05``, ``0.005``, ``.5``, ``2E+1`` (spaces
    around it ignored). Refuses what ``float()`` would also take but nobody means in a
    tolerance cell: ``nan``, ``inf``, ``1_000``, hex; raises ValueError saying what it got."""
    cleaned = str(text).strip().replace("\u2212", "-")  # a typographic minus reads as minus
    if not _NUMBER.fullmatch(cleaned):
        raise ValueError(f"{str(text).strip()!r} is not a number (write e.g. 5e-3 or 0.005)")
    value = float(cleaned)
    if not math.isfinite(value):
        raise ValueError(f"{str(text).strip()!r} is too large")
    return value


def aligned_table(rows: Sequence[Sequence[str]]) -> str:
    """A terminal table: the first row is the header, columns padded to their widest cell,
    a dashed rule under the header, no trailing spaces. Each cell is one line of text
    (terminal_text: a name from a file cannot break the table or the terminal)."""
    rows = [[terminal_text(cell) for cell in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# C0 and C1 controls, DEL, and Unicode's bidirectional marks, embeddings, overrides and isolates
# (and its line / paragraph separators): what can move a terminal's cursor, clear its screen,
# hide text or reorder a line. Newlines and tabs are kept only in a whole text (`lines=True`).
_CONTROLS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_CONTROLS}]")
_UNSAFE_IN_LINES = re.compile(f"(?![\\n\\t])[{_CONTROLS}]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


FIELD_LIMIT = 4_000
"""The most characters of one field (a name, a message, a sentence) a terminal is shown: a
saved run's 10 MB sentence is cut, and says so."""


def terminal_text(value: object, *, lines: bool = False) -> str:
    """A string Parity did not write (a name, a path, a message, a saved run's text) as a
    terminal may show it: every control character escaped as Python writes it (``\\x1b``,
    ``\\u202e``), so a file cannot clear the screen, move the cursor, hide text, reorder a line
    or (one field, the default) start a line of its own; a field is cut at FIELD_LIMIT
    characters, saying how many more there were. ``lines=True`` keeps newlines and tabs and
    cuts nothing: a whole text whose fields were escaped already (the CLI's every line).
    Backslashes are left as they are, so escaping twice changes nothing."""
    text = str(value)
    if lines:
        return _UNSAFE_IN_LINES.sub(_escaped, text)
    cut = ""
    if len(text) > FIELD_LIMIT:
        text, cut = text[:FIELD_LIMIT], f"… [{len(text) - FIELD_LIMIT:,} more characters cut]"
    return _UNSAFE.sub(_escaped, text) + cut


def html_text(value: object) -> str:
    """A user string as literal text in HTML: element content or a quoted attribute. Its
    control characters and bidirectional marks, embeddings, overrides and isolates read as
    terminal_text writes them (``\\u202e``): a forged name cannot reorder the page's text
    around it (newlines and tabs stay, as in a whole text)."""
    return html.escape(_UNSAFE_IN_LINES.sub(_escaped, str(value)), quote=True)


def plot_text(value: object) -> str:
    """A user string as literal text in a plotly label, title, legend or hover text (plotly
    reads a subset of HTML there; quotes need no escaping); controls as html_text writes
    them."""
    return html.escape(_UNSAFE_IN_LINES.sub(_escaped, str(value)), quote=False)


def sentence_start(text: str) -> str:
    """`text` as a sentence starts: its first letter upper case, unless its first word is a
    name (``onnx.checker``, ``node_linear``, ``/c1/Conv``: a dot, an underscore, a slash or a
    digit in it), which is written as it is named."""
    first = text.split(" ", 1)[0].rstrip(",:;")
    if not text or not first.isalpha():
        return text
    return text[0].upper() + text[1:]
