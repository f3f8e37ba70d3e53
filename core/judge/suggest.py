"""Tolerance ladders (1-2-5 per decade), per-output tolerances suggested from a run, and an
output's mismatch fraction against atol (the Tolerances page's curve).

A float slider cannot span 1e-9..10; a ladder of 1, 2, 5 per decade can, and the values it
offers are the round numbers people write in tolerance files. Suggestions come from the
re-judge profiles only (never raw tensors), so they are instant on any output size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from parity.labels import status_label
from parity.results import ValidationRun
from parity.tolerances import Tolerance, Tolerances

MANTISSAS = (1, 2, 5)
DEFAULT_MARGIN = 2.0
"""Suggested atol = margin x the smallest passing atol, rounded up to the ladder."""


def ladder(lo_exp: int = -9, hi_exp: int = 1, *, zero: bool = False) -> tuple[float, ...]:
    """1-2-5 values from 10**lo_exp to 10**hi_exp inclusive, optionally starting at 0."""
    values = [float(f"{m}e{e}") for e in range(lo_exp, hi_exp) for m in MANTISSAS]
    values.append(float(f"1e{hi_exp}"))
    return ((0.0,) if zero else ()) + tuple(values)


def with_value(values: tuple[float, ...], value: float) -> tuple[float, ...]:
    """The ladder with `value` inserted in order (so an exact loaded tolerance stays exact)."""
    if any(math.isclose(v, value, rel_tol=1e-12, abs_tol=0.0) for v in values):
        return values
    return tuple(sorted((*values, float(value))))


def nearest(values: tuple[float, ...], value: float) -> float:
    """The ladder entry nearest to `value` on a log scale (0 maps to 0 when offered)."""
    if value <= 0:
        return values[0]
    positive = [v for v in values if v > 0]
    return min(positive, key=lambda v: abs(math.log10(v) - math.log10(value)))


def round_up_125(value: float) -> float:
    """Smallest 1-2-5 number >= value (0 stays 0)."""
    if value <= 0:
        return 0.0
    exp = math.floor(math.log10(value))
    for e in (exp, exp + 1):
        for m in MANTISSAS:
            candidate = float(f"{m}e{e}")
            if candidate >= value * (1 - 1e-12):
                return candidate
    return float(f"1e{exp + 2}")  # unreachable; keeps the type checker calm


@dataclass(frozen=True)
class Suggestion:
    """Per-output tolerances that would pass, and why an output got none."""

    tolerances: Tolerances
    min_atols: dict[str, float | None]  # worst (largest) min atol over input sets
    notes: dict[str, str]  # output name -> why no tolerance was suggested / what was done
    margin: float


def suggest_tolerances(run: ValidationRun, *, margin: float = DEFAULT_MARGIN) -> Suggestion:
    """Per output: margin x (largest smallest-passing atol over input sets), rounded up
    to 1-2-5, at the output's current rtol. Outputs that no atol can fix (shape or dtype
    mismatch, missing, one-sided NaN/Inf) keep their tolerance and get a note."""
    tolerances = run.tolerances
    min_atols: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for name in run.output_names:
        current = run.tolerances.for_output(name)
        worst: float | None = 0.0
        for c in run.comparisons:
            if c.name != name:
                continue
            if not c.can_rejudge:
                worst = None
                status = status_label(c.status)
                notes[name] = f"{status} in input set {c.input_set}: no tolerance fixes it"
                break
            m = c.profile.min_atol(current.rtol)
            if m is None:
                worst = None
                notes[name] = f"NaN/Inf mismatch in input set {c.input_set}: no atol passes"
                break
            worst = max(worst, float(m))
        min_atols[name] = worst
        if worst is None:
            continue
        if worst == 0.0:
            notes[name] = "exact match: its current tolerance passes"
            continue
        atol = round_up_125(margin * worst)
        tolerances = tolerances.with_output(name, Tolerance(atol=atol, rtol=current.rtol))
    return Suggestion(tolerances=tolerances, min_atols=min_atols, notes=notes, margin=margin)


def pooled_mismatch_curve(
    run: ValidationRun, name: str, atols: np.ndarray, rtol: float
) -> np.ndarray | None:
    """Output `name`'s mismatch fraction at each of `atols` (same rtol), pooled over every
    input set (and candidate): mismatching judged elements / judged elements, from the
    re-judge profiles alone. None when no comparison of it has a profile or judges any."""
    total = None
    n = 0
    for c in run.comparisons:
        if c.name != name or c.profile is None:
            continue
        frac = np.asarray(c.profile.mismatch_curve(atols, rtol), dtype=np.float64)
        total = frac * c.n_judged if total is None else total + frac * c.n_judged
        n += c.n_judged
    return None if total is None or n == 0 else total / n
