"""--layers' findings (its result parity.layers.result, "layers" on each candidate): where a
failing candidate's outputs start to differ, a bug where it confirmed the error born there
(its node, run alone on the reference's exact inputs, still disagrees); then that birth speaks
for every failing output of the candidate, whatever its noise ratio, the ratio said beside it
(a softmax's float32 floor can be larger than a small bug's effect, so the ratio alone cannot
clear it). The layers record no output reachability, so "every failing output it feeds" is
every failing output of the candidate. Registered as evidence (parity.show.finder) before the
noise floor's; where no candidate compared its layers, its hint says what --layers would tell.
"""

from __future__ import annotations

from typing import Any

from parity.judge.noise_floor import is_rounding
from parity.labels import OUTSIDE_MODULES
from parity.results import Finding, FindingKind, Noise, OutputComparison, ValidationRun
from parity.show.births import birth_place, born_before
from parity.show.finder import asked_as, evidence
from parity.show.noise_findings import (
    beyond_rounding,
    file_precision_word,
    ratio_words,
    rounding_name,
    worst_noise,
)

__all__ = ["born_output", "located"]

asked_as("layers", "--layers")


def _first(run: ValidationRun) -> tuple[Any, bool]:
    """The lead candidate's first divergence, and whether --layers confirmed it born there."""
    layers = run.layers
    first = layers.first_divergence if layers is not None else None
    confirmation = layers.confirmation_of(first) if layers is not None else None
    return first, getattr(confirmation, "outcome", None) == "born"


def located(run: ValidationRun, candidate: int) -> list[Finding]:
    """Where --layers saw the outputs start to differ: a bug where it confirmed the error
    born there (its node, run alone on the reference's exact inputs, still disagrees), else
    where they diverge."""
    first, born = _first(run)
    precision = file_precision_word(run)
    out: list[Finding] = []
    if first is not None:
        where = (
            f"The export starts to diverge in {first.torch_module}, {birth_place(first, 'its')}."
            if first.torch_module
            else f"The export starts to diverge {birth_place(first)}, {OUTSIDE_MODULES[1:-1]}."
        )
        kind = FindingKind.BUG if born else FindingKind.DIVERGES
        out.append(Finding(kind, where, candidate=candidate))
        if born:
            alone = (
                "those nodes with it still give"
                if born_before(first)
                else f"that {first.onnx_op} node still gives"
            )
            out.append(
                Finding(
                    FindingKind.BUG,
                    f"Not rounding: run alone on PyTorch's exact inputs, {alone} a different "
                    "answer, so the error is made there (a bug in the export, not "
                    f"{precision} noise carried along).",
                    candidate=candidate,
                )
            )
    return out


def born_output(
    run: ValidationRun, candidate: int, name: str, rows: list[OutputComparison]
) -> Finding | None:
    """A failing output of a candidate whose layers confirmed a birth: a bug made there."""
    first, born = _first(run)
    if not born:
        return None
    return Finding(FindingKind.BUG, _born_text(name, first, worst_noise(rows)), name, candidate)


def _born_text(name: str, first: Any, noise: Noise | None) -> str:
    said = (
        f"{name}: a bug, not rounding: the error is made {birth_place(first)} (confirmed "
        "alone) and carried to this output"
    )
    if noise is None:
        return said + "."
    if is_rounding(noise):
        return (
            f"{said}; {ratio_words(noise)}, which alone could pass for "
            f"{rounding_name(noise.precision)}, so no tolerance should be loosened for it."
        )
    return f"{said}; {beyond_rounding(noise)}."


def hint(run: ValidationRun, found: list[Finding]) -> str | None:
    """No candidate compared its layers: where the outputs start to differ is unmeasured."""
    if all(c.layers is None for c in run.candidates):
        return "where inside the model the outputs start to differ (--layers)"
    return None


evidence("layers", rank=10, locate=located, judge=born_output, hint=hint)
