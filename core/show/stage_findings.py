"""Several --onnx files as pipeline stages side by side (parity.analyses.stages): the first
stage where the numbers break, said once for the run (its analyses[] note is the sentence).
Registered by name (parity.show.finder), after --data's answers and before the rest.
"""

from __future__ import annotations

from parity.results import Finding, FindingKind, ValidationRun
from parity.show.finder import asked_as, finds_in_run

__all__ = ["stage_findings"]

asked_as("stages", "pipeline stages (several --onnx files)")


@finds_in_run("stages", rank=200)
def stage_findings(run: ValidationRun) -> list[Finding]:
    """The stages' done note: where the numbers break."""
    return [
        Finding(FindingKind.STAGE, n.text)
        for n in run.analyses
        if n.analysis == "stages" and n.done
    ]
