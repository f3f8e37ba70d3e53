"""What Parity writes as JSON (the report, the layers block) is strict: numpy scalars become
Python ones and NaN / ±Inf become null, so every reader accepts the file. Reading strictly is
parity.files.strict_json's job. (Saved runs keep their own encoding: they reopen bit for bit.)"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

__all__ = ["dumps", "finite_or_none", "strict"]


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
        return finite_or_none(value)
    return value


def dumps(data: Any, *, indent: int = 2) -> str:
    """JSON text; raises on a NaN or Inf that was not made strict first."""
    return json.dumps(data, indent=indent, allow_nan=False)
