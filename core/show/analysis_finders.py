"""Every analysis's finder (and its words), imported in one place (parity.show.findings
imports this): so a run gets the same findings whatever its caller imported, a saved run
reopened by `parity report` included. A new analysis adds its module's line here; the order
of the findings is each finder's rank (parity.show.finder), not this list's.
"""

from __future__ import annotations

import parity.show.approximation_findings
import parity.show.data_findings
import parity.show.frozen_findings
import parity.show.layers_findings
import parity.show.noise_findings
import parity.show.quantization_findings
import parity.show.stage_findings
from parity.show.finder import Finder, RunFinder, registered, run_finders

__all__ = ["finders", "run_level"]

MODULES = (
    parity.show.quantization_findings,
    parity.show.approximation_findings,
    parity.show.frozen_findings,
    parity.show.data_findings,
    parity.show.stage_findings,
    parity.show.layers_findings,
    parity.show.noise_findings,
)


def finders() -> tuple[Finder, ...]:
    """Every registered finder of a candidate, in rank order: the quantization's, then the
    approximation's (and any registered since, a test's)."""
    return registered()


def run_level() -> tuple[RunFinder, ...]:
    """Every registered finder of the whole run, in rank order: --data's, the frozen
    search's."""
    return run_finders()
