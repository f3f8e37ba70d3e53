"""Flag values turned into settings: `--dim`, `--int-range`, `--float-range`, comma lists,
tolerances and the memory budget. A malformed value is a UsageError naming its flag."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from parity.errors import UsageError
from parity.settings import Setting
from parity.tolerances import Tolerance, Tolerances, parse_tol_arg


def _parse_pairs(items: Sequence[str], flag: str, kind: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{flag} {item!r}: expected {kind}")
        pairs[name] = value
    return pairs


def parse_list(text: str, flag: str) -> tuple[str, ...]:
    """A comma-separated flag value (``disable,all``) as its items, blanks refused."""
    items = tuple(item.strip() for item in text.split(","))
    if not all(items):
        raise UsageError(f"{flag} {text!r}: expected NAME[,NAME...] without empty items")
    return items


def parse_dims(items: Sequence[str]) -> dict[str, int]:
    dims = {}
    for name, value in _parse_pairs(items, "--dim", "NAME=SIZE or INPUT:AXIS=SIZE").items():
        try:
            dims[name] = int(value)
        except ValueError as exc:
            raise UsageError(
                "SIZE must be an integer", setting=Setting("dims", f"{name}={value}")
            ) from exc
        if dims[name] < 0:
            raise UsageError("SIZE must be >= 0", setting=Setting("dims", f"{name}={value}"))
    return dims


def parse_int_ranges(items: Sequence[str]) -> dict[str, tuple[int, int]]:
    ranges = {}
    for name, value in _parse_pairs(items, "--int-range", "NAME=LOW:HIGH").items():
        low, sep, high = value.partition(":")
        try:
            bounds = (int(low), int(high))
        except ValueError as exc:
            raise UsageError(
                "expected integers LOW:HIGH", setting=Setting("int_ranges", f"{name}={value}")
            ) from exc
        if not sep or bounds[0] >= bounds[1]:
            raise UsageError(
                "expected LOW:HIGH with LOW < HIGH",
                setting=Setting("int_ranges", f"{name}={value}"),
            )
        ranges[name] = bounds
    return ranges


def parse_float_ranges(
    items: Sequence[str],
) -> tuple[tuple[float, float] | None, dict[str, tuple[float, float]]]:
    """--float-range values: (the range for every float input or None, per input)."""
    from parity.run.inputs import parse_float_range

    every: tuple[float, float] | None = None
    ranges: dict[str, tuple[float, float]] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep:
            if every is not None:
                raise UsageError(
                    "give one LO:HI for every input", setting=Setting("float_range", str(item))
                )
            every = parse_float_range(item, Setting("float_range"))
        elif not name:
            raise UsageError("expected [NAME=]LO:HI", setting=Setting("float_range", repr(item)))
        else:
            ranges[name] = parse_float_range(value, Setting("float_range", name))
    return every, ranges


def tolerances_from_args(args: argparse.Namespace, *, base: Tolerances | None = None) -> Tolerances:
    """--tolerances file (else `base`) first, then --atol/--rtol over its default, then --tol."""
    tolerances = Tolerances.load(args.tolerances) if args.tolerances else (base or Tolerances())
    if args.atol is not None or args.rtol is not None:
        default = tolerances.default
        tolerances = tolerances.with_default(
            Tolerance(
                atol=default.atol if args.atol is None else args.atol,
                rtol=default.rtol if args.rtol is None else args.rtol,
            )
        )
    for item in args.tol:
        name, tolerance = parse_tol_arg(item, tolerances.default)
        tolerances = tolerances.with_output(name, tolerance)
    return tolerances


def max_memory_bytes(args: argparse.Namespace) -> int | None:
    """--max-memory in bytes, or None for the default budget."""
    from parity.limits.budget import parse_size

    return None if args.max_memory is None else parse_size(args.max_memory)
