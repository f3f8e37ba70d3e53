"""The JSON policy, once: what Parity writes as JSON is strict (no NaN or Infinity literals),
numpy scalars become Python ones, and a non-finite float becomes null (`strict`, the report)
or, where it must come back exactly (a saved run's figures), the string "nan", "inf" or
"-inf" (`exact` / `from_exact`). Free-form values (an hf: summary) go through `plain`.
Reading strictly is parity.files.strict_json's job; parity.reports.codec applies this policy
to every result type."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

import parity.files.strict_json as sj

__all__ = ["dumps", "exact", "finite_or_none", "from_exact", "plain", "strict"]


def finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def strict(value: Any) -> Any:
    """``value`` with numpy scalars/arrays made Python and non-finite floats made None."""
    if isinstance(value, dict):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if isinstance(value, np.ndarray):
        return strict(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return finite_or_none(float(value))
    return value


def exact(value: Any) -> float | str | None:
    """A float that reads back bit for bit: non-finite ones as "nan", "inf" or "-inf"."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else str(value)


def from_exact(value: Any, where: str = "number") -> float | None:
    """A number written by `exact`: finite, null, or "nan" / "inf" / "-inf" (FieldError
    naming `where` otherwise)."""
    if value is None:
        return None
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return sj.number(value, where)


def plain(value: Any) -> Any:
    """Free-form JSON made strict: non-finite floats None, an array a short description,
    anything else unknown its str()."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, np.ndarray):
        return f"<array {value.dtype} {list(value.shape)}>"
    return str(value)


def dumps(data: Any, *, indent: int = 2) -> str:
    """JSON text; raises on a NaN or Inf that was not made strict first."""
    return json.dumps(data, indent=indent, allow_nan=False)
