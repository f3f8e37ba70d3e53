"""Every analysis's result type, imported in one place (parity.reports.codec reads the types
from here: `result_types`): a type registers under its analysis's name when its module is
imported (parity.results.by_name), so a saved run reopened in a fresh process (`parity report
RUN`, the dashboard) reads every result it holds whatever its caller imported. The types in
parity.results come with it; one that lives above it (--layers' LayersResult, in
parity.layers) adds its module's line here.
"""

from __future__ import annotations

import parity.layers.result
import parity.results
from parity.results.by_name import result_types

__all__ = ["MODULES", "result_types"]

MODULES = (parity.results, parity.layers.result)
