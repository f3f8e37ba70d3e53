"""--data's result of the whole run (parity.analyses.answers makes it): what changes per output
on the user's samples, the JSON report's top-level `data`. Its type lives in parity.data (below
this package, which cannot import back up), so it is registered under its analysis's name here
(parity.results.by_name); it writes its own JSON, arrays and all (parity.data.result). Its
findings are parity.show.data_findings'.
"""

from __future__ import annotations

from parity.data.result import DataResult
from parity.results.by_name import analysis_result

__all__ = ["DataResult"]

analysis_result("data", per_run=True)(DataResult)
