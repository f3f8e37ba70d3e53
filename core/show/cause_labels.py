"""A failure by its cause, in one label and one colour, decided once for the terminal, the
JSON report, the HTML report and the dashboard's pages (grids, tables, badges, the sweep).

An output that fails its tolerance while the run's findings explain its difference as what
the file was meant to do (rounding at its precision, its quantization, an approximation a
tool applied on purpose: parity.show.cause's INTENDED kinds) is *intended*: it is drawn in
amber and named by its cause ("float16 rounding"), never in the red of a bug. A bug, an ONNX
Runtime error, a frozen size or a difference nothing explains stays red: the rule is
parity.show.cause.judge_by_cause's, read here, so no page says "rounding" of an output a
finding calls a bug.
"""

from __future__ import annotations

from dataclasses import dataclass

from parity.labels import INTENDED_MARK
from parity.results import Finding, FindingKind, ValidationRun
from parity.show.findings import HIDDEN_BY_TOLERANCE
from parity.verdict import Verdict

__all__ = [
    "INTENDED_COLOR",
    "INTENDED_MARK",
    "INTENDED_TEXT",
    "INTENDED_WORDS",
    "HIDDEN_BUG_MARKED",
    "CauseLook",
    "hidden_bug_findings",
    "hidden_bugs",
    "intended_json",
    "intended_label",
    "intended_outputs",
    "run_cause",
]

INTENDED_COLOR = "#e3a008"
"""Amber: an output beyond its tolerance by what the file was meant to do (not a bug)."""
INTENDED_TEXT = "#1f2328"
"""Text drawn on INTENDED_COLOR."""
INTENDED_WORDS = (
    "amber (≈) fails by what the file was meant to do (its precision's rounding, its "
    "quantization, an approximation: no bug found)"
)
"""The colour's legend, as every caption and report says it."""


HIDDEN_BUG_MARKED = f"✗ pass: {HIDDEN_BY_TOLERANCE}"
"""A cell of an output that passes only at a tolerance looser than the default while a
finding calls it a bug (the sweep's and the run's tables): red, never a green pass."""


def hidden_bug_findings(run: ValidationRun) -> list[Finding]:
    """The bug findings of outputs that pass only at a tolerance looser than the default:
    the rows, the headline and the sweep read these."""
    return [f for f in run.findings if f.kind is FindingKind.BUG and HIDDEN_BY_TOLERANCE in f.text]


def hidden_bugs(run: ValidationRun) -> set[tuple[int, str]]:
    """(candidate, output) of each output a bug the tolerance hides (hidden_bug_findings)."""
    return {(f.candidate or 0, f.output) for f in hidden_bug_findings(run) if f.output}


def intended_label(kind: FindingKind, precision: str = "float32") -> str:
    """``float16 rounding``, ``int8 quantization``, ``approximation``: the cause's name."""
    if kind is FindingKind.QUANTIZATION:
        return (
            f"{precision} quantization"
            if precision.startswith(("int", "uint"))
            else ("quantization")
        )
    if kind is FindingKind.APPROXIMATION:
        return "approximation"
    return "int8 quantization noise" if precision == "int8" else f"{precision} rounding"


def intended_outputs(run: ValidationRun) -> dict[tuple[int, str], str]:
    """(candidate, output) -> its cause's label, for every output that fails its tolerance
    and whose difference the findings explain as intended (parity.show.cause). A candidate
    that could not run has none; the others are judged each as its own run."""
    from parity.show.cause import judge_by_cause
    from parity.show.findings import file_precision_word

    out: dict[tuple[int, str], str] = {}
    for view in run.candidates:
        if view.info.error is not None or view.passed:
            continue
        one = run.for_candidate(view.index)
        noise = {c.name: c.noise.precision for c in one.outputs if c.noise is not None}
        word = file_precision_word(one)
        for candidate, name, kind in judge_by_cause(one).intended:
            out[(candidate, name)] = intended_label(kind, noise.get(name, word))
    return out


@dataclass(frozen=True)
class CauseLook:
    """A run's (or one candidate's) verdict as badges and table cells show it: `verdict`;
    `intended` the cause's label where the run fails its tolerance only by intended
    differences (then drawn amber), else ""."""

    verdict: Verdict
    intended: str = ""

    @property
    def css(self) -> str:
        """The HTML report's class: pass, fail, error, or intended."""
        return "intended" if self.intended else str(self.verdict)

    def marked(self) -> str:
        """A table cell: ``✓ pass``, ``✗ FAIL``, ``⚠ error``, ``≈ FAIL: float16 rounding``."""
        if self.intended:
            return f"{INTENDED_MARK} FAIL: {self.intended}"
        return {"pass": "✓ pass", "fail": "✗ FAIL", "error": "⚠ error"}[self.verdict]


def run_cause(run: ValidationRun, candidate: int | None = None) -> CauseLook:
    """The run's (or candidate `candidate`'s) look: intended where it fails with every
    failing output intended (nothing unexplained, no bug, no error, nothing frozen)."""
    one = run if candidate is None else run.for_candidate(candidate)
    verdict = run.verdict if candidate is None else run.candidate_verdict(candidate)
    if verdict is not Verdict.FAIL:
        return CauseLook(verdict)
    from parity.show.cause import judge_by_cause

    judged = judge_by_cause(one)
    if judged.verdict is not Verdict.PASS or not judged.intended:
        return CauseLook(verdict)
    labels = intended_outputs(one)
    return CauseLook(verdict, ", ".join(sorted(set(labels.values()))))


def intended_json(run: ValidationRun) -> list[dict[str, object]]:
    """The JSON report's `intended`: [{candidate, output, label}] for every output beyond its
    tolerance by an intended difference (what the sweep's grid colours amber)."""
    return [
        {"candidate": k, "output": name, "label": label}
        for (k, name), label in sorted(intended_outputs(run).items())
    ]
