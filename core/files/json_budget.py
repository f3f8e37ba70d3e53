"""A bound on what parsing a JSON file may cost, checked before it is parsed.

Python's parser turns a byte into tens of bytes of objects: a 63 MB manifest of short values
took 3.2 GB, a 17 MB file of `[]` 0.8 GB and 28 s. Counting the bytes that can start a value
(`,` `[` `{` `:`, an upper bound on the values) costs a pass over the bytes in C; the estimate
is that count times what one parsed value was measured to cost at most (~90 bytes), plus two
copies of the text. A file over the budget is one UsageError line, before any object exists.
"""

from __future__ import annotations

from parity.errors import UsageError
from parity.limits.budget import format_size

VALUE_BYTES = 96
"""Peak bytes per parsed value, measured on lists, objects, numbers and strings (72-89)."""
DEFAULT_BUDGET = 512 << 20
"""A sweep summary of 10^5 pairs needs ~200 MB; a manifest of 10^5 pairs less."""


def parse_cost(raw: bytes) -> tuple[int, int]:
    """(an upper bound on the values in `raw`, the bytes parsing it may take at most)."""
    values = 1 + sum(raw.count(c) for c in (b",", b"[", b"{", b":"))
    return values, values * VALUE_BYTES + 2 * len(raw)


def check_json_budget(raw: bytes, where: str, budget: int = DEFAULT_BUDGET) -> None:
    """UsageError naming `where` when parsing `raw` may take more than `budget` bytes."""
    values, cost = parse_cost(raw)
    if cost > budget:
        raise UsageError(
            f"{where}: too big to read: up to {values:,} JSON values in {format_size(len(raw))} "
            f"would take about {format_size(cost)} to parse, over the {format_size(budget)} "
            "allowed"
        )
