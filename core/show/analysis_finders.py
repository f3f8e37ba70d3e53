"""Every analysis's finder, imported in one place (parity.show.findings imports this): so a
run gets the same findings whatever its caller imported, a saved run reopened by `parity
report` included. A new analysis adds its module's line here; the order of the findings is
each finder's rank (parity.show.finder), not this list's.
"""

from __future__ import annotations

import parity.show.approximation_findings
import parity.show.quantization_findings
from parity.show.finder import Finder, registered

__all__ = ["finders"]

MODULES = (parity.show.quantization_findings, parity.show.approximation_findings)


def finders() -> tuple[Finder, ...]:
    """Every registered finder, in rank order: the quantization's, then the approximation's
    (and any registered since, a test's)."""
    return registered()
