"""A saved run's array members and the parts that hold them: input sets (feeds, exclusion
masks), output sets, a comparison's re-judge profile (an analysis's result with arrays writes
its own: parity.results.by_name.OwnJson). What the manifest (parity.reports.codec) and the
older layouts it still reads (parity.reports.older_runs) both write and read: one floor below
both, so neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import parity.files.strict_json as sj
from parity.files.array_members import ArrayGet, ArrayPut
from parity.files.derived_json import decode, encode
from parity.reports.forms import register_forms
from parity.results import InputSet, OutputComparison, OutputSet

register_forms()

# ---------------------------------------------------------------------------------------
# arrays: a saved run's members, named by position (user names stay in the manifest)


def _named_arrays_to_json(
    arrays: Mapping[str, np.ndarray], prefix: str, put: ArrayPut, what: Callable[[str], str]
) -> list[dict[str, Any]]:
    """{NAME: array} as [{"name": NAME, "member": PREFIX/K.npy}]."""
    return [
        {"name": name, "member": put(f"{prefix}/{k}.npy", array, what(name))}
        for k, (name, array) in enumerate(arrays.items())
    ]


def _named_arrays_from_json(value: Any, at: str, get: ArrayGet) -> dict[str, np.ndarray]:
    result = {}
    for k, item in enumerate(sj.array(value, at)):
        item = sj.obj(item, f"{at}[{k}]")
        name = sj.string(sj.field(item, "name", f"{at}[{k}]"), f"{at}[{k}].name")
        result[name] = get(sj.field(item, "member", f"{at}[{k}]"), f"{at}[{k}].member")
    return result


def input_set_to_json(
    s: InputSet, position: int, masks: Mapping[str, np.ndarray], put: ArrayPut
) -> dict[str, Any]:
    """One input set: its feeds and its outputs' exclusion masks as members, its label."""
    at = f"of set {s.index}"
    return {
        "index": s.index,
        "label": s.label,
        "feeds": _named_arrays_to_json(
            s.feeds, f"inputs/{position}", put, lambda n: f"input {n!r} {at}"
        ),
        "exclude": _named_arrays_to_json(
            {name: np.asarray(mask, dtype=bool) for name, mask in masks.items()},
            f"exclude/{position}",
            put,
            lambda n: f"exclusion mask of output {n!r} {at}",
        ),
    }


def input_set_from_json(
    entry: Any, at: str, get: ArrayGet
) -> tuple[InputSet, dict[str, np.ndarray]]:
    entry = sj.obj(entry, at)
    feeds = _named_arrays_from_json(sj.field(entry, "feeds", at), f"{at}.feeds", get)
    input_set = decode(InputSet, entry, at, feeds=feeds)
    return input_set, _named_arrays_from_json(entry.get("exclude", []), f"{at}.exclude", get)


def output_sets_to_json(
    side: str, sets: tuple[OutputSet, ...], put: ArrayPut, *, start: int = 0
) -> list[dict[str, Any]]:
    """Output sets as entries whose arrays are members SIDE/POSITION/K (`start`: the first's
    position, where several candidates' sets are numbered in turn)."""
    return [
        {
            **encode(output_set),
            "arrays": _named_arrays_to_json(
                output_set.arrays, f"{side}/{s}", put, _output_what(side, s)
            ),
        }
        for s, output_set in enumerate(sets, start=start)
    ]


def _output_what(side: str, s: int) -> Callable[[str], str]:
    return lambda n: f"{side} output {n!r} of set {s}"


def output_sets_from_json(m: Mapping[str, Any], key: str, get: ArrayGet) -> tuple[OutputSet, ...]:
    return tuple(
        output_set_from_json(entry, f"{key}[{i}]", get)
        for i, entry in enumerate(sj.array(sj.field(m, key, "manifest"), key))
    )


def output_set_from_json(entry: Any, at: str, get: ArrayGet) -> OutputSet:
    entry = sj.obj(entry, at)
    arrays = _named_arrays_from_json(sj.field(entry, "arrays", at), f"{at}.arrays", get)
    return decode(OutputSet, entry, at, arrays=arrays)


# ---------------------------------------------------------------------------------------
# one comparison: its fields derived, its re-judge profile as members


def comparison_to_json(c: OutputComparison, put: ArrayPut, position: int) -> dict[str, Any]:
    """One comparison, exactly; its re-judge profile as members profiles/POSITION/K."""
    data: dict[str, Any] = encode(c)
    data["profile"] = (
        None
        if c.profile is None
        else {
            key: put(
                f"profiles/{position}/{i}.npy",
                np.asarray(value),
                f"profile {key!r} of output {c.name!r}",
            )
            for i, (key, value) in enumerate(c.profile.to_arrays().items())
        }
    )
    return data


def comparison_from_json(entry: Any, at: str, get: ArrayGet) -> OutputComparison:
    entry = sj.obj(entry, at)
    profile = None
    raw_profile = sj.optional(sj.obj, sj.field(entry, "profile", at), f"{at}.profile")
    if raw_profile is not None:
        from parity.judge.error_profile import ErrorProfile

        arrays = {str(k): get(member, f"{at}.profile.{k}") for k, member in raw_profile.items()}
        profile = ErrorProfile.from_arrays(_profile_arrays(arrays, f"{at}.profile"))
    return decode(OutputComparison, entry, at, profile=profile)


_PROFILE_SIZES = {"counts": 3, "anchor": 3, "zero_ref_max": 1, "hull_slack": 1}
_PROFILE_PAIRS = (("hull_r", "hull_d"), ("hist_bins", "hist_counts"), ("top_d", "top_r"),
                  ("sample_d", "sample_r"))  # fmt: skip


def _profile_arrays(arrays: dict[str, np.ndarray], at: str) -> dict[str, np.ndarray]:
    """A saved error profile's arrays, consistent before they are used: every member there,
    numbers, flat, the fixed ones of their size, each pair (hull, histogram, top, sample)
    of one length. A crafted file is one line, never a page's traceback."""
    needed = {"counts", "anchor", "zero_ref_max"} | {k for pair in _PROFILE_PAIRS for k in pair}
    missing = sorted(needed - set(arrays))
    if missing:
        raise sj.FieldError(f"{at}: missing {', '.join(missing)}")
    for key, array in arrays.items():
        if array.dtype.kind not in "biuf" or array.ndim > 1:
            raise sj.FieldError(f"{at}.{key}: expected a flat array of numbers, got {array.dtype}")
        if key in _PROFILE_SIZES and array.size != _PROFILE_SIZES[key]:
            raise sj.FieldError(f"{at}.{key}: expected {_PROFILE_SIZES[key]} numbers")
    for a, b in _PROFILE_PAIRS:
        if arrays[a].size != arrays[b].size:
            raise sj.FieldError(f"{at}: {a} and {b} differ in length")
    return arrays
