"""The approximation analysis's findings (parity.analyses.approximation, its result
parity.results.approximation): each failing output judged against torch doing what the file
means. Registered by name (parity.show.finder), after the quantization's; a birth --layers
confirmed is said before them (its torch side computed the same intended model).
"""

from __future__ import annotations

from parity.results import ApproximationResult, Finding, FindingKind, ValidationRun
from parity.show.finder import asked_as, finds, numeric_failures
from parity.show.noise_findings import HIDDEN_BY_TOLERANCE
from parity.text import number_text, tolerance_text
from parity.tolerances import Tolerance

__all__ = ["approximation_findings"]


asked_as("approximation", "the intended reference (approximations, 16-bit weights)")


@finds("approximation", rank=20, after_birth=True, passing=True)
def approximation_findings(run: ValidationRun, candidate: int, limit: int | None) -> list[Finding]:
    """A file that approximates on purpose (parity.analyses.approximation): each failing
    output judged against torch doing what the file means (its tanh GELU, its 16-bit
    weights; a 16-bit file through its float32 twin). Agreement: each approximation's cost
    said (`approximation`, and `rounding` for the 16-bit weights and arithmetic); else a bug.
    On every candidate, a 16-bit output that passes only at a loosened tolerance while its
    twin is off is a bug the tolerance hides (where the noise floor ran, it says so)."""
    result = run.approximation
    assert result is not None
    return _judged(run, result, candidate, limit) + _hidden(run, result, candidate)


def _hidden(run: ValidationRun, result: ApproximationResult, candidate: int) -> list[Finding]:
    """Outputs passing only at a loosened tolerance whose 16-bit twin the analysis found off,
    where no noise was measured (parity.show.noise_findings speaks where it was)."""
    if not result.precision:
        return []
    off = {o.name: o for o in result.outputs if o.export_passed is False}
    out: list[Finding] = []
    for c in run.outputs:
        o = off.get(c.name)
        if o is None or c.noise is not None or not c.passes_only_loosened:
            continue
        del off[c.name]
        p = result.precision
        text = (
            f"{c.name}: {HIDDEN_BY_TOLERANCE}: it passes at {tolerance_text(c.tolerance)} "
            f"only; against torch with the file's {p} weights, its wide twin (the same graph "
            f"and weights computed without rounding to {p}, so not {p} rounding) differs by "
            f"max abs {number_text(o.export_max_abs)}, and at the default "
            f"{tolerance_text(Tolerance())} it fails."
        )
        out.append(Finding(FindingKind.BUG, text, c.name, candidate))
    return out


def _judged(
    run: ValidationRun, result: ApproximationResult, candidate: int, limit: int | None
) -> list[Finding]:
    """Each failing output against torch doing what the file means."""
    gelu = ", ".join(result.approximations)
    p = result.precision
    means = " and ".join(
        (["the same approximation"] if gelu else []) + ([f"the file's {p} weights"] if p else [])
    )
    subject = "its wide twin" if p else "the file"
    by_name = {o.name: o for o in result.outputs}
    out: list[Finding] = []
    for name in list(numeric_failures(run))[:limit]:
        o = by_name.get(name)
        if o is None or o.export_passed is None:
            continue
        against = f"against torch with {means}{f' ({gelu})' if gelu else ''}"
        if not o.export_passed:
            twin = (
                f" (the same graph and weights computed without rounding to {p}, so not {p} "
                "rounding)"
                if p
                else ""
            )
            text = (
                f"{name}: not what the file means, a bug in the export: {against}, {subject}"
                f"{twin} still differs by max abs {number_text(o.export_max_abs)} (beyond the "
                "run's tolerance)."
            )
            out.append(Finding(FindingKind.BUG, text, name, candidate))
            continue
        agrees = (
            f"against torch with {means}, {subject} agrees to max abs "
            f"{number_text(o.export_max_abs)} (within {o.export_within})"
        )
        if gelu:
            text = (
                f"{name}: {gelu}, moves it by max abs {number_text(o.cost_max_abs)} from "
                f"torch's exact GELU; {agrees}: intended, not a bug."
            )
            out.append(Finding(FindingKind.APPROXIMATION, text, name, candidate))
        if p:
            text = (
                f"{name}: {p} rounding, not a bug: its {p} weights move it by max abs "
                f"{number_text(o.weights_max_abs)} and its {p} arithmetic by max abs "
                f"{number_text(o.arithmetic_max_abs)} (the file against its wide twin: the "
                f"same graph and weights computed without rounding to {p}); {agrees}."
            )
            out.append(Finding(FindingKind.ROUNDING, text, name, candidate))
    return out
