"""Tolerances: a global (atol, rtol) and per-output overrides.

The pass rule, everywhere: an element passes when ``|onnx - ref| <= atol + rtol * |ref|``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from os import PathLike, fspath
from pathlib import Path
from typing import Any, TypeAlias

import parity.files.strict_json as strict_json
from parity.errors import UsageError
from parity.settings import Setting
from parity.text import parse_number

DEFAULT_ATOL = 1e-5  # Optimum's default
DEFAULT_RTOL = 0.0
MAX_FILE_BYTES = 16 << 20  # a tolerances file is a few KB; refuse before parsing a huge one


@dataclass(frozen=True)
class Tolerance:
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL

    def __post_init__(self) -> None:
        for label, value in (("atol", self.atol), ("rtol", self.rtol)):
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value >= 0):
                raise UsageError(f"{label} must be a finite number >= 0, got {value!r}")

    def to_json(self) -> dict[str, float]:
        return {"atol": float(self.atol), "rtol": float(self.rtol)}


@dataclass(frozen=True)
class Tolerances:
    default: Tolerance = Tolerance()
    outputs: Mapping[str, Tolerance] = field(default_factory=dict)

    def for_output(self, name: str) -> Tolerance:
        return self.outputs.get(name, self.default)

    def with_default(self, tolerance: Tolerance) -> Tolerances:
        return replace(self, default=tolerance)

    def with_output(self, name: str, tolerance: Tolerance | None) -> Tolerances:
        outputs = dict(self.outputs)
        if tolerance is None:
            outputs.pop(name, None)
        else:
            outputs[name] = tolerance
        return replace(self, outputs=outputs)

    def check_outputs(self, names: Iterable[str]) -> None:
        """Refuse tolerances for outputs that do not exist: a typo would leave the real output
        on the default tolerance without a word."""
        known = list(dict.fromkeys(names))
        unknown = [name for name in self.outputs if name not in known]
        if unknown:
            listed = ", ".join(repr(name) for name in known) or "none"
            raise UsageError(
                f"tolerance for unknown output(s) {', '.join(repr(n) for n in unknown)}; "
                f"the outputs are: {listed}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "default": self.default.to_json(),
            "outputs": {name: tol.to_json() for name, tol in self.outputs.items()},
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "tolerances") -> Tolerances:
        if not isinstance(data, dict):
            raise UsageError(f"{source}: expected a JSON object with 'default' and 'outputs'")
        unknown = set(data) - {"default", "outputs"}
        if unknown:
            raise UsageError(
                f"{source}: unknown keys {sorted(unknown)}; expected 'default', 'outputs'"
            )
        default = _tolerance_from_json(data.get("default", {}), Tolerance(), f"{source}: default")
        outputs_data = data.get("outputs", {})
        if not isinstance(outputs_data, dict):
            raise UsageError(f"{source}: 'outputs' must be an object of NAME: {{atol, rtol}}")
        outputs = {
            str(name): _tolerance_from_json(value, default, f"{source}: outputs.{name}")
            for name, value in outputs_data.items()
        }
        return cls(default=default, outputs=outputs)

    @classmethod
    def load(cls, path: str | Path) -> Tolerances:
        from parity.files.safe_read import read_bytes

        raw = read_bytes(path, what="tolerances file", limit=MAX_FILE_BYTES, error=UsageError)
        try:
            data = strict_json.loads(raw)
        except strict_json.FieldError as exc:
            raise UsageError(f"tolerances file {path}: {exc}") from exc
        return cls.from_json(data, source=str(path))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


def _tolerance_from_json(value: Any, fallback: Tolerance, where: str) -> Tolerance:
    """Numbers are JSON numbers: "0.5" and true are refused, as are negatives and inf."""
    if not isinstance(value, dict) or set(value) - {"atol", "rtol"}:
        unknown = sorted(set(value) - {"atol", "rtol"}) if isinstance(value, dict) else []
        extra = f" (unknown keys {unknown})" if unknown else ""
        raise UsageError(f'{where}: expected {{"atol": number, "rtol": number}}{extra}')
    try:
        return Tolerance(
            atol=strict_json.number(value.get("atol", fallback.atol), f"{where}.atol", minimum=0),
            rtol=strict_json.number(value.get("rtol", fallback.rtol), f"{where}.rtol", minimum=0),
        )
    except strict_json.FieldError as exc:
        raise UsageError(str(exc)) from exc


def parse_tol_arg(text: str, default: Tolerance) -> tuple[str, Tolerance]:
    """Parse ``NAME=ATOL[:RTOL]`` (the CLI's ``--tol``); rtol falls back to the default's."""
    name, sep, value = text.rpartition("=")
    if not sep or not name:
        raise UsageError("expected NAME=ATOL[:RTOL]", setting=Setting("tolerances", repr(text)))
    atol_text, _, rtol_text = value.partition(":")
    try:
        atol = parse_number(atol_text)
        rtol = parse_number(rtol_text) if rtol_text else default.rtol
    except ValueError as exc:
        raise UsageError(str(exc), setting=Setting("tolerances", repr(text))) from exc
    return name, Tolerance(atol=atol, rtol=rtol)


TolerancesLike: TypeAlias = (
    Tolerances | Mapping[str, float | tuple[float, float] | Tolerance] | str | PathLike[str] | None
)


def tolerances_of(value: TolerancesLike, default: Tolerance, *, explicit: bool) -> Tolerances:
    """The tolerances the API takes (`validate(tolerances=...)`, `run.rejudge(...)`): None (the
    default alone), a `Tolerances`, a tolerances JSON file, or a mapping name -> atol,
    (atol, rtol) or `Tolerance` (the default's rtol where only atol is given). `explicit`: the
    caller also gave atol/rtol, which replace a file's default and clash with a `Tolerances`."""
    if value is None:
        return Tolerances(default=default)
    if isinstance(value, Tolerances):
        if explicit:
            raise UsageError("give atol/rtol or a Tolerances object (it has its own default)")
        return value
    if isinstance(value, (str, PathLike)):
        loaded = Tolerances.load(fspath(value))
        return loaded if not explicit else replace(loaded, default=default)
    if not isinstance(value, Mapping):
        raise UsageError(
            f"tolerances must be a mapping, a Tolerances or a file, got {type(value).__name__}"
        )
    outputs: dict[str, Tolerance] = {}
    for name, tol in value.items():
        if isinstance(tol, Tolerance):
            outputs[str(name)] = tol
        elif isinstance(tol, (int, float)) and not isinstance(tol, bool):
            outputs[str(name)] = Tolerance(atol=float(tol), rtol=default.rtol)
        elif isinstance(tol, tuple) and len(tol) == 2:
            outputs[str(name)] = Tolerance(atol=tol[0], rtol=tol[1])
        else:
            raise UsageError(
                f"tolerance for {name!r}: expected atol, (atol, rtol) or a Tolerance, got {tol!r}"
            )
    return Tolerances(default=default, outputs=outputs)
