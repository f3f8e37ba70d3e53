"""How a judgement looks, on one scale everywhere: colours of error ÷ allowed error.

``ratio = |onnx - ref| / (atol + rtol * |ref|)`` (:mod:`parity.judge.ratio`) is at most
1 for an element that passes, so 1 is the pass line whatever the tolerance and whatever the
output's scale. Colours are drawn on ``log10(ratio)`` over a fixed span (``1e-3`` to ``1e3``
times the allowed error): greens below the line, turning yellow close to it, reds above it,
darker the further over. The same ratio therefore has the same colour in every run, a passing
output is never red, and a failing one always is. Statuses that are not judged element by
element (shape, dtype, missing) get their own colour and their name, never an empty cell.

The Overview grid, the Inspect heatmaps and the HTML report all read colours from here
(:func:`cell_look` for one comparison, :func:`ratio_z` and :data:`RATIO_COLORSCALE` for
element views, :func:`ratio_color` for a table cell).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from parity.judge.ratio import comparison_ratio
from parity.labels import INTENDED_MARK, status_label
from parity.results import OutputComparison, Status
from parity.show.cause_labels import INTENDED_COLOR, INTENDED_TEXT
from parity.text import number_text, ratio_text

__all__ = [
    "ATOL_COLOR",
    "css_palette",
    "mark_css",
    "status_css",
    "FAIL_COLOR",
    "FAIL_TEXT",
    "PASS_COLOR",
    "PASS_TEXT",
    "RATIO_COLORBAR",
    "RATIO_COLORSCALE",
    "RATIO_SPAN",
    "STRUCTURAL_COLOR",
    "VERDICT_BADGE",
    "WARN_COLOR",
    "CellLook",
    "cell_look",
    "ratio_color",
    "ratio_z",
]

RATIO_SPAN = 3.0
"""Colours span 10**-RATIO_SPAN .. 10**RATIO_SPAN times the allowed error (clipped beyond)."""

_EPS_Z = 1e-3  # keeps a passing value on the green side of the line and a failing one off it
_PASS_STOPS = ((-3.0, "#5aae61"), (-2.0, "#a6d96a"), (-1.0, "#d9ef8b"), (0.0, "#fee08b"))
_FAIL_STOPS = ((0.0, "#e0392b"), (1.5, "#a50026"), (3.0, "#5c0011"))
ATOL_COLOR = "#0969da"  # the tolerance drawn on a figure (a line, a mark)
PASS_COLOR = "#1a7f37"
"""A passing line or mark drawn in a figure (the pass line, a tolerance's own line)."""
WARN_COLOR = "#f2cc60"
FAIL_COLOR = "#cf222e"
"""A failing mark in a figure (the first divergence, the failing elements)."""
VERDICT_BADGE = {"pass": "green", "fail": "red", "error": "orange", "intended": "yellow"}
"""A verdict's badge colour in the dashboard (Streamlit's named colours: `:green-background`),
by parity.show.cause_labels.CauseLook.css (a failure that is all intended: yellow)."""
ERROR_COLOR = "#9a6700"
"""A run or candidate that could not be made (the verdict "error")."""
PASS_TEXT = "#1f2328"
FAIL_TEXT = "#ffffff"
STRUCTURAL_COLOR = "#6639ba"
"""Shape / dtype mismatch and missing outputs: failures with no element-wise ratio."""


def _position(z: float) -> float:
    return (z + RATIO_SPAN) / (2 * RATIO_SPAN)


RATIO_COLORSCALE: list[list[object]] = [[_position(z), c] for z, c in _PASS_STOPS] + [
    [_position(z), c] for z, c in _FAIL_STOPS
]
"""Plotly colour scale over z = log10(ratio) in [-RATIO_SPAN, RATIO_SPAN] (zmin/zmax)."""

RATIO_COLORBAR: dict[str, object] = {
    "title": {"text": "error ÷ allowed", "side": "right"},
    "tickvals": [-3, -2, -1, 0, 1, 2, 3],
    "ticktext": ["≤ 0.001×", "0.01×", "0.1×", "1× pass line", "10×", "100×", "≥ 1000×"],
}
"""Colour bar of the ratio scale: the pass line (1×, where atol + rtol·|ref| is reached)
is marked on it."""


def ratio_z(ratio: np.ndarray | float, failing: np.ndarray | bool | None = None) -> np.ndarray:
    """log10(ratio) clipped to the colour span; zero is the bottom, inf the top. With
    `failing`, each value is kept on its verdict's side of the line (a ratio that rounds to
    exactly 1 still reads as what was decided). NaN stays NaN (not judged: blank)."""
    r = np.asarray(ratio, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.clip(np.log10(r), -RATIO_SPAN, RATIO_SPAN)
    if failing is None:
        failing = r > 1.0
    side = np.where(failing, np.maximum(z, _EPS_Z), np.minimum(z, -_EPS_Z))
    return np.where(np.isnan(r), np.nan, side)


def ratio_color(ratio: float | None, failing: bool | None = None) -> str:
    """The colour of one ratio as ``#rrggbb`` (what the plotly scale draws for it)."""
    if ratio is None or math.isnan(ratio):
        return STRUCTURAL_COLOR
    z = float(ratio_z(ratio, failing))
    stops = _FAIL_STOPS if z > 0 else _PASS_STOPS
    for (z0, c0), (z1, c1) in zip(stops, stops[1:], strict=False):
        if z0 <= z <= z1:
            t = (z - z0) / (z1 - z0)
            return _mix(c0, c1, t)
    return stops[0][1] if z < stops[0][0] else stops[-1][1]


def _mix(a: str, b: str, t: float) -> str:
    ca = [int(a[i : i + 2], 16) for i in (1, 3, 5)]
    cb = [int(b[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(ca, cb, strict=True))


@dataclass(frozen=True)
class CellLook:
    """How one (input set, output) comparison is drawn in a grid or a table cell."""

    ratio: float | None  # worst error ÷ allowed (None: not judged element by element)
    z: float | None  # its place on the colour scale (None: drawn in STRUCTURAL_COLOR)
    fill: str
    text_color: str
    mark: str  # readable without colour: ✓, ✗, ✗ NaN, shape, dtype, missing
    words: str  # one line for hover text: status and how far from the line


def cell_look(c: OutputComparison, intended: str = "") -> CellLook:
    """Colour, mark and words of one comparison at its own tolerance; `intended` (the
    cause's label, parity.show.cause_labels) draws a failure explained as intended in amber,
    off the ratio scale whose reds are kept for what is not."""
    failing = not c.status.passed
    ratio = comparison_ratio(c)
    if ratio is None and c.status is Status.FAIL:  # judged by equality only (strings)
        ratio = math.inf
    mark = status_label(c.status, "mark")
    s = c.stats
    if c.status is Status.FAIL and s is not None and (s.n_nan_mismatch or s.n_inf_mismatch):
        mark += " NaN" if s.n_nan_mismatch else " Inf"
    words = status_label(c.status, "words")
    if ratio is not None:
        max_abs = number_text(s.max_abs if s is not None else None)
        words += f": max |error| {max_abs} = {ratio_text(ratio)} the allowed error"
    if c.status not in (Status.PASS, Status.FAIL):
        return CellLook(ratio, None, STRUCTURAL_COLOR, FAIL_TEXT, mark, words)
    if intended and c.status is Status.FAIL:
        said = f"beyond the tolerance by {intended}, what the file was meant to do; {words}"
        mark = status_label(c.status, "mark", intended)
        return CellLook(ratio, None, INTENDED_COLOR, INTENDED_TEXT, mark, said)
    shown = ratio if ratio is not None else 0.1  # a pass with no profile: plain green
    z = float(ratio_z(shown, failing))
    fill = ratio_color(shown, failing)
    return CellLook(ratio, z, fill, FAIL_TEXT if failing else PASS_TEXT, mark, words)


def css_palette() -> str:
    """The palette as CSS custom properties, for every stylesheet Parity writes (the HTML
    report, the sweep index): `var(--pass)`, `var(--fail)`, `var(--error)`, `var(--text)`."""
    return (
        f":root{{--pass:{PASS_COLOR};--fail:{FAIL_COLOR};--error:{ERROR_COLOR};"
        f"--warn:{WARN_COLOR};--text:{PASS_TEXT};--structural:{STRUCTURAL_COLOR};"
        f"--intended:{INTENDED_COLOR};--intended-text:{INTENDED_TEXT}}}"
    )


def status_css(passed: bool) -> str:
    """A ✓ / ✗ cell's style in a table (the dashboard's dataframes)."""
    return f"color: {PASS_COLOR if passed else FAIL_COLOR}; font-weight: 600"


def mark_css(text: str) -> str:
    """A table cell's style by the mark it starts with: ✓ green, ✗ red, ≈ (beyond the
    tolerance as intended: parity.show.cause_labels) amber, anything else unstyled."""
    if text.startswith(INTENDED_MARK):
        return f"background-color: {INTENDED_COLOR}; color: {INTENDED_TEXT}; font-weight: 600"
    if text.startswith(("✓", "✗")):
        return status_css(text.startswith("✓"))
    return ""
