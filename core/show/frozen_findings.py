"""The frozen-size search's findings (parity.run.frozen_search, its results
parity.results.frozen): each confirmed node holding a size frozen at export (the cause of the
failure: no "not measured" hint beside it), then each input axis the file fixes where torch
takes other sizes. Registered by name (parity.show.finder), said after a padded batch's.
"""

from __future__ import annotations

from parity.results import Finding, FindingKind, ValidationRun
from parity.show.finder import asked_as, finds_in_run

__all__ = ["frozen_findings", "static_axis_findings"]

asked_as("frozen", "the frozen-size search")


@finds_in_run("frozen", rank=600, explains=True)
def frozen_findings(run: ValidationRun) -> list[Finding]:
    """Each confirmed frozen node's sentence (parity.judge.frozen's words)."""
    return [
        Finding(
            FindingKind.FROZEN, f.text or f"The {f.op} node {f.node} holds a size frozen at export."
        )
        for f in run.frozen
        if f.confirmed
    ]


@finds_in_run("static_axes", rank=610)
def static_axis_findings(run: ValidationRun) -> list[Finding]:
    """An input axis the file fixes where torch takes other sizes: its one line."""
    return [Finding(FindingKind.STATIC_AXIS, a.text) for a in run.static_axes if a.text]
