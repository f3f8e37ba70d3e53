"""Analysis results held by name: an analysis's result type is registered under the analysis's
name (`analysis_result`), a candidate holds its results by that name (CandidateRun.results),
or the run does for a result of the whole run (ValidationRun.results, `per_run`), and the codec
and the JSON report write and read every registered type with no edit (parity.reports.codec,
parity.files.derived_json): a new analysis adds its type and registers it.

A result whose key the report has always had, empty or not (the frozen search's `frozen`), is
registered `always`: where a run holds none, its empty value (the type made with no arguments)
is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, runtime_checkable

from parity.files.array_members import ArrayGet, ArrayPut

__all__ = ["OwnJson", "analysis_result", "result_types", "written_results"]

T = TypeVar("T", bound=type)

_TYPES: dict[bool, dict[str, type]] = {False: {}, True: {}}  # per_run -> name -> type
_ALWAYS: dict[bool, dict[str, type]] = {False: {}, True: {}}  # ... written when absent


def analysis_result(name: str, *, per_run: bool = False, always: bool = False) -> Callable[[T], T]:
    """Register a frozen dataclass as analysis `name`'s result (the JSON key it is saved and
    reported under): one per candidate, or with `per_run` one for the whole run. A name is one
    type's. With `always`, a run that holds none writes the type's empty value (cls())."""

    def register(cls: T) -> T:
        if any(types.get(name, cls) is not cls for types in _TYPES.values()):
            raise ValueError(f"analysis {name!r} already has its result type")
        _TYPES[per_run][name] = cls
        if always:
            _ALWAYS[per_run][name] = cls
        return cls

    return register


@runtime_checkable
class OwnJson(Protocol):
    """A result whose JSON is its own code's, arrays and all (--layers: its kept values): the
    report's is `to_json()`, a saved run's `saved_json(put, prefix)` (each array a member
    named under `prefix`, through `put`), read back by the type's `from_saved_json(raw, get,
    at)`. Any other registered type is derived from its fields (parity.files.derived_json)."""

    def to_json(self) -> dict[str, Any]: ...

    def saved_json(self, put: ArrayPut, prefix: str) -> dict[str, Any]: ...

    @classmethod
    def from_saved_json(cls, raw: Any, get: ArrayGet, at: str) -> Any: ...


def result_types(*, per_run: bool = False) -> Mapping[str, type]:
    """The registered result types by their analysis's name, in registration order: a
    candidate's, or with `per_run` the run's."""
    return MappingProxyType(_TYPES[per_run])


def written_results(results: Mapping[str, object], *, per_run: bool) -> dict[str, object]:
    """`results` as they are written, in registration order (a live run and the same run
    reopened write their keys alike): each `always` type the run does not hold as its empty
    value; a name not registered last, as it is."""
    always = _ALWAYS[per_run]
    out = {
        name: results[name] if name in results else always[name]()
        for name in _TYPES[per_run]
        if name in results or name in always
    }
    return {**out, **{k: v for k, v in results.items() if k not in out}}
