"""How numbers, shapes and tolerances read as text, in the terminal, the HTML report and the
dashboard: one policy for undefined and non-finite values, one shape notation."""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.tolerances import Tolerance

__all__ = ["number_text", "ratio_text", "shape_text", "tolerance_text"]


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


def ratio_text(value: float | None) -> str:
    """An error in units of the allowed error (core.judgement): ``0.13×``, ``4.81e+04×``."""
    return "-" if value is None else number_text(value) + "×"


def shape_text(dims: Sequence[int] | None) -> str:
    """A shape as Python prints ``array.shape``: ``(2, 3)``, ``(5,)``, ``()``; '-' if unknown."""
    return "-" if dims is None else str(tuple(int(d) for d in dims))


def tolerance_text(tol: Tolerance) -> str:
    """``atol 1e-05, rtol 0``."""
    return f"atol {tol.atol:g}, rtol {tol.rtol:g}"
