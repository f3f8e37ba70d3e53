"""The report's and saved run's `approximation` block (parity.analyses.approximation): what a
file approximates on purpose and what it costs, per output. A reopened run keeps it, so its
findings are the ones the run said."""

from __future__ import annotations

from typing import Any

import numpy as np

import parity.files.strict_json as sj
from parity.files.json_output import exact, from_exact
from parity.results import ApproximatedOutput, ApproximationResult

_NUMBERS = ("cost_max_abs", "export_max_abs", "weights_max_abs", "arithmetic_max_abs")


def approximation_to_json(a: ApproximationResult, *, saved: bool = False) -> dict[str, Any]:
    """``approximation``: {"approximations", "precision", "modules", "outputs": [{name,
    cost_max_abs, export_max_abs, export_passed, export_within, weights_max_abs,
    arithmetic_max_abs}],
    "notes"}. A saved run keeps its numbers exactly (`saved`); the report's are strict."""
    num = exact if saved else _finite
    return {
        "approximations": list(a.approximations),
        "precision": a.precision or None,
        "modules": list(a.modules),
        "outputs": [
            {
                "name": o.name,
                **{key: num(getattr(o, key)) for key in _NUMBERS},
                "export_passed": o.export_passed,
                "export_within": o.export_within,
            }
            for o in a.outputs
        ],
        "notes": list(a.notes),
    }


def approximation_from_json(raw: Any, at: str = "approximation") -> ApproximationResult | None:
    """What `approximation_to_json(saved=True)` wrote (None: absent, or saved before)."""
    if raw is None:
        return None
    raw = sj.obj(raw, at)

    def texts(key: str) -> tuple[str, ...]:
        items = sj.array(raw.get(key, []), f"{at}.{key}")
        return tuple(sj.string(t, f"{at}.{key}[{i}]") for i, t in enumerate(items))

    outputs = []
    for i, entry in enumerate(sj.array(raw.get("outputs", []), f"{at}.outputs")):
        o = f"{at}.outputs[{i}]"
        entry = sj.obj(entry, o)
        numbers = {key: from_exact(entry.get(key), f"{o}.{key}") for key in _NUMBERS}
        outputs.append(
            ApproximatedOutput(
                name=sj.string(sj.field(entry, "name", o), f"{o}.name"),
                export_passed=sj.optional(
                    sj.boolean, entry.get("export_passed"), f"{o}.export_passed"
                ),
                export_within=sj.string(
                    entry.get("export_within", "the run's tolerance"), f"{o}.export_within"
                ),
                **numbers,
            )
        )
    precision = sj.optional(sj.string, raw.get("precision"), f"{at}.precision") or ""
    return ApproximationResult(
        approximations=texts("approximations"),
        precision=precision,
        modules=texts("modules"),
        outputs=tuple(outputs),
        notes=texts("notes"),
    )


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None
