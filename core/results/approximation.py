"""What a file approximates on purpose and what that costs (parity.analyses.approximation
makes it; a candidate holds it by that name)."""

from __future__ import annotations

from dataclasses import dataclass

from parity.results.by_name import analysis_result


@dataclass(frozen=True)
class ApproximatedOutput:
    """One output under the file's intended approximations (parity.analyses.approximation):
    what they cost against torch, and the file against torch computing them too."""

    name: str
    cost_max_abs: float | None  # torch with the approximations against torch, over every set
    export_max_abs: float | None  # the file (16-bit: its float32 twin) against that torch
    export_passed: bool | None  # ... at the run's tolerance (None: not compared)
    weights_max_abs: float | None = None  # 16-bit: its rounded weights' own cost
    arithmetic_max_abs: float | None = None  # 16-bit: the file against its float32 twin
    # what export_passed was judged by: "the run's tolerance", or where that fails and the
    # output's float32 floor was measured, "float32 rounding" (10x torch's own float32 error)
    export_within: str = "the run's tolerance"


@analysis_result("approximation")
@dataclass(frozen=True)
class ApproximationResult:
    """What a file approximates on purpose and what that costs (parity.analyses.approximation):
    `approximations` in words ("FastGelu, the tanh approximation of GELU (2 nodes)"),
    `precision` the file's 16-bit type where its weights are 16-bit ("" where not), `modules`
    the torch modules computed approximately (() where every call of the function was)."""

    approximations: tuple[str, ...] = ()
    precision: str = ""
    modules: tuple[str, ...] = ()
    outputs: tuple[ApproximatedOutput, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def faithful(self) -> bool | None:
        """The file computes what it means (every output within the run's tolerance of
        torch doing the same); None when not compared."""
        judged = [o.export_passed for o in self.outputs if o.export_passed is not None]
        return all(judged) if judged else None
