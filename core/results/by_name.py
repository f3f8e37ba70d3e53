"""Analysis results held by name: an analysis's result type is registered under the analysis's
name (`analysis_result`), a candidate holds its results by that name (CandidateRun.results),
and the codec and the JSON report write and read every registered type with no edit
(parity.reports.codec, parity.reports.derived): a new analysis adds its type and registers it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TypeVar

__all__ = ["analysis_result", "result_types"]

T = TypeVar("T", bound=type)

_TYPES: dict[str, type] = {}


def analysis_result(name: str) -> Callable[[T], T]:
    """Register a frozen dataclass as analysis `name`'s result (the JSON key it is saved and
    reported under); a name is one type's."""

    def register(cls: T) -> T:
        if _TYPES.setdefault(name, cls) is not cls:
            raise ValueError(f"analysis {name!r} already has its result type {_TYPES[name]}")
        return cls

    return register


def result_types() -> Mapping[str, type]:
    """Every registered result type by its analysis's name, in registration order."""
    return MappingProxyType(_TYPES)
