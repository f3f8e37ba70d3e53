"""Strict reading of the JSON files Parity accepts (tolerances files, saved-run manifests,
sweep manifests).

`json.loads` is permissive where a file from elsewhere should not be: `true` is a number to
Python, `1e400` becomes inf, `NaN` is accepted, a string iterates like a list, and a deeply
nested value ends in RecursionError. Every check here names the field (a dotted path) and
what was expected, so the caller can raise its one-line error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from parity.errors import FieldError

MAX_DEPTH = 32
"""Nesting deeper than this is refused (Parity's own files nest 6 levels)."""
MAX_INT = 2**63 - 1

T = TypeVar("T")


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _refuse_constant(name: str) -> Any:
    raise FieldError(f"{name} is not a JSON number (write null or a finite number)")


def _unique_keys(items: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in items:
        if key in seen:
            raise FieldError(f"not valid JSON: duplicate key {key!r}")
        seen[key] = value
    return seen


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON (no NaN/Infinity literals, no key given twice in one object: the
    last would win unseen) and refuse nesting beyond `max_depth`."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except RecursionError as exc:
        raise FieldError(f"nested deeper than {max_depth} levels") from exc
    except FieldError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, huge int literals
        raise FieldError(f"not valid JSON: {str(exc).splitlines()[0]}") from exc
    check_depth(value, max_depth)
    return value


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Iteratively (no recursion to exhaust) refuse containers nested deeper than allowed."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise FieldError(f"nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FieldError(f"{where}: expected an object, got {_show(value)}")
    return value


def field(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise FieldError(f"{where}: missing field {key!r}")
    return data[key]


def array(value: Any, where: str, *, limit: int | None = None) -> list[Any]:
    """A JSON list; with `limit`, of at most that many entries (a forged file's 300,000
    notes are one line, never 300,000 rows on a page)."""
    if not isinstance(value, list):
        raise FieldError(f"{where}: expected a list, got {_show(value)}")
    if limit is not None and len(value) > limit:
        raise FieldError(f"{where}: {len(value):,} entries, more than the {limit:,} a run holds")
    return value


def string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise FieldError(f"{where}: expected a string, got {_show(value)}")
    return value


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise FieldError(f"{where}: expected true or false, got {_show(value)}")
    return value


def integer(value: Any, where: str, *, minimum: int = 0) -> int:
    """An integer in [minimum, 2**63): not a bool, not a float (1e400 is not an index)."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INT:
        raise FieldError(f"{where}: expected an integer >= {minimum}, got {_show(value)}")
    return value


def number(value: Any, where: str, *, minimum: float | None = None) -> float:
    """A finite number (int or float, never a bool or a string), at least `minimum`."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise FieldError(f"{where}: expected a finite number{bound}, got {_show(value)}")
    return float(value)


def optional(check: Callable[..., T], value: Any, where: str, **kwargs: Any) -> T | None:
    return None if value is None else check(value, where, **kwargs)


def shape(value: Any, where: str, *, named: bool = False) -> tuple[Any, ...]:
    """A list of sizes (ints >= 0); with `named`, also dim names (strings) and null."""
    items = array(value, where)
    dims: list[Any] = []
    for i, dim in enumerate(items):
        if named and (dim is None or isinstance(dim, str)):
            dims.append(dim)
        else:
            kind = "an integer >= 0, a dim name or null" if named else "an integer >= 0"
            if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= MAX_INT:
                raise FieldError(f"{where}[{i}]: expected {kind}, got {_show(dim)}")
            dims.append(dim)
    return tuple(dims)
