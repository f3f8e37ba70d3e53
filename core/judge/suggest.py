"""Tolerance ladders (1-2-5 per decade), per-output tolerances suggested from a run (from the
smallest passing atol, or from the rounding noise measured at each output's precision), and an
output's mismatch fraction against atol (the Tolerances page's curve).

A float slider cannot span 1e-9..10; a ladder of 1, 2, 5 per decade can, and the values it
offers are the round numbers people write in tolerance files. Suggestions come from the
re-judge profiles only (never raw tensors), so they are instant on any output size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from parity.judge.noise_floor import (
    ROUNDING_RATIO,
    floor_words,
    noise_rank,
    noise_sentence,
    output_floors,
)
from parity.labels import status_label
from parity.results import Noise, SuggestedTolerances, ValidationRun
from parity.text import number_text, tolerance_text
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
        for c in run.outputs:
            if c.name != name:
                continue
            if not c.can_rejudge or c.profile is None:  # can_rejudge: a profile is kept
                worst = None
                status = status_label(c.status)
                notes[name] = f"{status} in input set {c.input_set}: no tolerance fixes it"
                break
            m = c.profile.min_atol(current.rtol)
            if m is None:
                worst = None
                notes[name] = f"NaN/Inf mismatch in input set {c.input_set}: no atol passes"
                break
            worst = max(worst or 0.0, float(m))  # None only after a break
        min_atols[name] = worst
        if worst is None:
            continue
        if worst == 0.0:
            notes[name] = "exact match: its current tolerance passes"
            continue
        atol = round_up_125(margin * worst)
        tolerances = tolerances.with_output(name, Tolerance(atol=atol, rtol=current.rtol))
    return Suggestion(tolerances=tolerances, min_atols=min_atols, notes=notes, margin=margin)


def round_up_2sig(value: float) -> float:
    """Smallest number of two significant digits >= value (0 stays 0): a tolerance that
    prints exactly (``9.7e-08``), so the one shown is the one that was checked."""
    if value <= 0:
        return 0.0
    candidate = float(f"{value:.1e}")
    if candidate < value:
        exp = math.floor(math.log10(candidate))
        candidate = float(f"{candidate + 10.0 ** (exp - 1):.1e}")
    return candidate


NOISE_MULTIPLES = (2.0, 5.0, 10.0)
"""The k offered in "k x rounding noise", smallest first (see suggest_noise_tolerances)."""


@dataclass(frozen=True)
class NoiseSuggestion:
    """Per-output tolerances of k x the output's floor (``--noise-floor``: torch's own error at
    the candidate's precision, or int8's quantization noise), and the
    run re-judged with them: what they pass and what they still fail."""

    tolerances: Tolerances
    k: float
    atols: dict[str, float]  # outputs given k x rounding noise
    torch_errors: dict[str, float]  # their rounding noise: largest max|torch32 - torch64|
    noise: dict[str, Noise]  # each such output's worst noise (largest ratio) over its sets
    passes: dict[str, bool]  # every output, re-judged under `tolerances`
    notes: dict[str, str]  # outputs that kept their tolerance, and why
    passed: bool  # the whole run passes under `tolerances`

    @property
    def still_failing(self) -> tuple[str, ...]:
        return tuple(name for name, ok in self.passes.items() if not ok)


def has_noise(run: ValidationRun) -> bool:
    """The run measured rounding noise (``--noise-floor``) for at least one output."""
    return any(c.noise is not None for c in run.outputs)


def suggest_noise_tolerances(run: ValidationRun, k: float | None = None) -> NoiseSuggestion:
    """Per float32 output with a noise floor: atol = k x its floor, torch's own error at the
    candidate's precision or int8's quantization noise (parity.judge.noise_floor; its
    largest ``max|torch32 - torch64|`` over input sets and candidates; rtol 0, since the
    noise is an absolute bound), rounded up to two significant digits. Other outputs keep
    the run's tolerance and get a note.

    Why k x torch's error: ONNX judged against torch float32 errs by at most its own error
    against float64 plus torch's, so an export that only rounds differently (ratio near 1)
    passes at k = 2, and one whose error is thousands x the rounding fails at any k offered.

    k (None: chosen): the smallest of NOISE_MULTIPLES (2, 5, 10) under which every output
    whose error looks like rounding (ratio <= ROUNDING_RATIO) passes; outputs that do not
    look like rounding never choose it, so a bug cannot loosen the tolerance for itself. If
    none of them passes every rounding output, 10 (ROUNDING_RATIO: past it the error is not
    rounding any more) and what fails is said. The suggestion is checked: `passes` and
    `passed` are the run re-judged with it."""
    atom: dict[str, float] = {}
    worst: dict[str, Noise] = {}
    notes: dict[str, str] = {}
    floors = output_floors(run.outputs)
    for name in run.output_names:
        mine = [c for c in run.outputs if c.name == name]
        stuck = next((c for c in mine if not c.can_rejudge), None)
        if stuck is not None:
            status = status_label(stuck.status)
            notes[name] = f"{status} in input set {stuck.input_set}: no tolerance fixes it"
            continue
        if not mine or any(c.noise is None for c in mine) or name not in floors:
            notes[name] = "rounding noise not measured: keeps its tolerance"
            continue
        worst[name], atom[name], _ = floors[name]
    if k is None:
        rounding = [name for name, n in worst.items() if noise_rank(n) <= ROUNDING_RATIO]
        k = NOISE_MULTIPLES[-1]
        for candidate in NOISE_MULTIPLES:
            if all(_judged(run, atom, candidate).get(name, False) for name in rounding):
                k = candidate
                break
    tolerances = _noise_tolerances(run, atom, k)
    judged = run.rejudge(tolerances)
    passes = {name: name not in judged.failing for name in run.output_names}
    return NoiseSuggestion(
        tolerances=tolerances,
        k=float(k),
        atols={name: tolerances.for_output(name).atol for name in atom},
        torch_errors=atom,
        noise=worst,
        passes=passes,
        notes=notes,
        passed=judged.passed,
    )


def _noise_tolerances(run: ValidationRun, atom: dict[str, float], k: float) -> Tolerances:
    tolerances = run.tolerances
    for name, torch_error in atom.items():
        tolerances = tolerances.with_output(
            name, Tolerance(atol=round_up_2sig(k * torch_error), rtol=0.0)
        )
    return tolerances


def _judged(run: ValidationRun, atom: dict[str, float], k: float) -> dict[str, bool]:
    failing = set(run.rejudge(_noise_tolerances(run, atom, k)).failing)
    return {name: name not in failing for name in run.output_names}


def noise_suggestion_lines(s: NoiseSuggestion) -> list[str]:
    """The suggestion and its check, in words: a headline, then one line per output (its
    tolerance, whether it passes, and for one that still fails, that it is not rounding),
    then the same tolerances as ``--tol`` flags. The terminal and the Tolerances page show
    these lines."""
    times = f"{s.k:g}\u00d7"
    if s.passed:
        verdict = "the run passes with it"
    elif s.still_failing:
        verb = "still fails" if len(s.still_failing) == 1 else "still fail"
        verdict = f"{', '.join(s.still_failing)} {verb} with it"
    else:
        verdict = "the run still fails with it"
    kinds = " / ".join(dict.fromkeys(floor_words(n) for n in s.noise.values()))
    lines = [
        f"Suggested tolerance: {times} rounding noise (atol = {times} "
        f"{kinds or 'the rounding noise'}, rtol 0), checked: {verdict}"
    ]
    for name, ok in s.passes.items():
        if name in s.atols:
            n = s.noise[name]
            tol = tolerance_text(Tolerance(atol=s.atols[name], rtol=0.0))
            figure = f"{tol} ({times} {number_text(s.torch_errors[name])})"
            if ok:
                lines.append(f"{name}: {figure}: passes")
            elif noise_rank(n) > ROUNDING_RATIO:
                why = (
                    ""
                    if n.precision == "int8"
                    else ", a bug that no rounding tolerance should pass"
                )
                lines.append(f"{name}: {figure}: still fails: {noise_sentence(n)}{why}")
            else:
                lines.append(f"{name}: {figure}: still fails at {times} rounding noise")
        else:
            lines.append(f"{name}: {s.notes.get(name, 'keeps its tolerance')}")
    flags = " ".join(f"--tol {name}={atol:g}:0" for name, atol in s.atols.items())
    if flags:
        lines.append(f"As flags: {flags}")
    return lines


def pooled_mismatch_curve(
    run: ValidationRun, name: str, atols: np.ndarray, rtol: float
) -> np.ndarray | None:
    """Output `name`'s mismatch fraction at each of `atols` (same rtol), pooled over every
    input set (and candidate): mismatching judged elements / judged elements, from the
    re-judge profiles alone. None when no comparison of it has a profile or judges any."""
    total = None
    n = 0
    for c in run.outputs:
        if c.name != name or c.profile is None:
            continue
        frac = np.asarray(c.profile.mismatch_curve(atols, rtol), dtype=np.float64)
        total = frac * c.n_judged if total is None else total + frac * c.n_judged
        n += c.n_judged
    return None if total is None or n == 0 else total / n


def suggestion_lines(s: SuggestedTolerances) -> list[str]:
    """A checked suggestion (parity.analyses.fresh_check) in words: a headline (its basis, what it
    was fitted on and checked on), one line per output (its tolerance, or why none), the
    fresh sets, then the same tolerances as ``--tol`` flags. The terminal, the HTML report and
    the Tolerances page show these lines."""
    if not s.outputs and not s.withheld:
        return []
    fitted = f"fitted on {s.fitted_on} input set{'s' if s.fitted_on != 1 else ''}"
    n = len(s.checked_on)
    checked = f"checked on {n} fresh input set{'s' if n != 1 else ''}" if n else "none shown"
    if s.basis == "rounding":
        basis = f"{s.k or 2:g}\u00d7 the measured rounding noise, rtol 0"
    else:
        basis = (
            "observed: 2\u00d7 the smallest passing atol, shown only where the fresh sets' "
            "error is float rounding (torch in float64 on them; --noise-floor measures the run's)"
        )
    lines = [f"Suggested tolerances ({basis}), {fitted}, {checked}:"]
    for name, t in s.outputs.items():
        lines.append(f"{name}: {tolerance_text(t)}: passes the fresh input sets")
    for name, why in s.withheld.items():
        lines.append(f"{name}: none suggested: {why}")
    if s.checked_on:
        lines.append("Fresh input sets: " + "; ".join(s.checked_on))
    flags = " ".join(f"--tol {name}={t.atol:g}:{t.rtol:g}" for name, t in s.outputs.items())
    if flags:
        lines.append(f"As flags: {flags}")
    return lines
