"""What a run found beside its rows: what each analysis did, the findings every front renders,
and the tolerances it suggests (the frozen search's nodes and axes: parity.results.frozen)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from parity.results.by_name import analysis_result
from parity.tolerances import Tolerance, Tolerances


@dataclass(frozen=True)
class AnalysisNote:
    """What an analysis that was asked for did, or why it could not: the JSON report's
    `analyses[]`. No analysis is silently absent: one that could not run (`done` False) says
    why here, and the findings say it (parity.show.findings)."""

    analysis: str  # the analysis's name (parity.analyses): "noise_floor", "layers", "repro", ...
    text: str
    done: bool = True


class FindingKind(StrEnum):
    """What a finding says of a run (the JSON's `findings[].kind`): decided in
    parity.show.findings."""

    BUG = "bug"
    ROUNDING = "rounding"
    FROZEN = "frozen"
    NEAR_TIE = "near_tie"
    ERROR = "error"
    STATIC_AXIS = "static_axis"
    FROZEN_SEARCH = "frozen_search"  # what the frozen search cost when it confirmed nothing
    UNMEASURED = "unmeasured"
    DIVERGES = "diverges"
    QUANTIZATION = "quantization"  # what a file's quantized weights cost (not a bug)
    # what the file cannot do that the model does (a left-padded batch: parity.hf.padded_batch)
    LIMITATION = "limitation"
    STAGE = "stage"  # several files as pipeline stages: the first where the numbers break
    # what an approximation the deploy tool applied on purpose costs (FastGelu's tanh GELU, ...)
    APPROXIMATION = "approximation"
    ANSWERS = "answers"  # --data: what changes for the samples (parity.data.words)


FINDING_KINDS = tuple(k.value for k in FindingKind)


@dataclass(frozen=True)
class Finding:
    """One conclusion of a run (the JSON report's `findings[]`): made once, in
    parity.show.findings, and rendered as-is by the terminal, JSON, HTML, Overview and API.
    `output` / `candidate` are None where the finding is about the whole run."""

    kind: FindingKind
    text: str
    output: str | None = None
    candidate: int | None = None


SUGGESTION_BASES = ("rounding", "observed")  # `suggested_tolerances.basis`


@analysis_result("suggested_tolerances", per_run=True)
@dataclass(frozen=True)
class SuggestedTolerances:
    """Per-output tolerances Parity suggests (parity.analyses.fresh_check): fitted on the run's
    input sets, then checked on fresh ones (other seed, other sizes, at least as many) before
    being shown. `basis`: "rounding" (k x the noise floor --noise-floor measured) or
    "observed" (margin x the smallest atol that passed: no rounding measurement behind it);
    `checked_on` describes every fresh set each tolerance passed on without being fitted to
    it; `withheld` says, per output, why none is suggested (a bug, not rounding, fails on
    fresh inputs, could not be checked). The JSON report's `suggested_tolerances`."""

    outputs: Mapping[str, Tolerance]
    basis: str  # SUGGESTION_BASES
    checked_on: tuple[str, ...] = ()
    withheld: Mapping[str, str] = field(default_factory=dict)
    default: Tolerance | None = None
    fitted_on: int = 0  # input sets it was fitted on
    k: float | None = None  # basis "rounding": atol = k x the floor

    def tolerances(self, base: Tolerances) -> Tolerances:
        """`base` with the suggested tolerances: what `--tolerances` reads back."""
        out = base if self.default is None else base.with_default(self.default)
        for name, tolerance in self.outputs.items():
            out = out.with_output(name, tolerance)
        return out
