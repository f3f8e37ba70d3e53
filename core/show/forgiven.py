"""What a tolerance forgives, against the rounding noise measured for its output: "atol 4e-3
passes an error up to 370× float32 rounding". A tolerance is a number; what it means depends
on the output's own rounding noise (torch's error against float64 at the file's precision,
parity.judge.noise_floor). Said wherever a tolerance is set or used (terminal, JSON, HTML,
the Tolerances page), for the tolerances the user set (not the default), where the noise was
measured; a bug such a tolerance passes is a finding (parity.show.findings).

A 16-bit file run without the noise floor still has its own rounding measured where the
intended reference ran (parity.analyses.approximation): what its 16-bit weights move the
output by plus what its 16-bit arithmetic does (the file against its float32 twin). That sum
is the output's measured float16 rounding where torch's own error was not measured."""

from __future__ import annotations

from dataclasses import dataclass

from parity.judge.noise_floor import output_floors
from parity.results import ValidationRun
from parity.text import number_text
from parity.tolerances import Tolerance

__all__ = [
    "FILE",
    "TORCH",
    "Forgiven",
    "file_rounding",
    "forgiven",
    "forgiven_json",
    "forgiven_text",
]


TORCH = "torch"  # the floor is torch's own error at the precision, against float64
FILE = "file"  # a 16-bit file's own rounding: its weights' cost + its arithmetic's


@dataclass(frozen=True)
class Forgiven:
    """One output's tolerance against its noise: `floor` is the largest error of torch itself
    at `precision` against float64 over the run's input sets (`basis` TORCH), or a 16-bit
    file's own rounding (FILE, file_rounding); `times` = atol / floor (None where the floor
    is 0)."""

    output: str
    tolerance: Tolerance
    floor: float
    precision: str
    times: float | None
    basis: str = TORCH  # what `floor` is: torch's own error (TORCH) or the file's (FILE)


def forgiven(run: ValidationRun) -> tuple[Forgiven, ...]:
    """Per output whose tolerance is not the default and whose rounding was measured: torch's
    own error where the noise floor ran, else a 16-bit file's own rounding."""
    default = Tolerance()
    floors = {
        name: (floor, n.precision, TORCH)
        for name, (n, floor, _) in output_floors(run.outputs).items()
    }
    for name, found in file_rounding(run).items():
        floors.setdefault(name, found)
    out = []
    for name, (floor, precision, basis) in floors.items():
        tolerance = run.tolerances.for_output(name)
        if tolerance == default:
            continue
        times = tolerance.atol / floor if floor > 0 else None
        out.append(Forgiven(name, tolerance, floor, precision, times, basis))
    return tuple(out)


def file_rounding(run: ValidationRun) -> dict[str, tuple[float, str, str]]:
    """Per output of the lead candidate, a 16-bit file's own rounding as the intended
    reference measured it (its 16-bit weights' cost + its 16-bit arithmetic's), where it ran."""
    result = run.approximation
    if result is None or not result.precision:
        return {}
    return {
        o.name: (o.weights_max_abs + o.arithmetic_max_abs, result.precision, FILE)
        for o in result.outputs
        if o.weights_max_abs is not None and o.arithmetic_max_abs is not None
    }


def forgiven_text(f: Forgiven) -> str:
    """``y: atol 0.004 passes an error up to 370× float32 rounding (torch's own error here
    1.1e-05)``; rtol adds its share of each element's |ref|."""
    rounding = "int8 quantization noise" if f.precision == "int8" else f"{f.precision} rounding"
    plus = f" plus rtol {f.tolerance.rtol:g}·|ref|" if f.tolerance.rtol else ""
    p = f.precision
    if f.times is None:
        exact = (
            f"torch itself is exact against float64 at {p}"
            if f.basis == TORCH
            else f"the file's {p} weights and arithmetic move it by nothing"
        )
        return (
            f"{f.output}: atol {f.tolerance.atol:g}{plus} forgives any error here: {exact}, so "
            "any difference is not rounding."
        )
    times = f"{float(f'{f.times:.2g}'):,.0f}" if f.times >= 100 else f"{f.times:.2g}"
    floor = (
        f"torch's own error here: {number_text(f.floor)}"
        if f.basis == TORCH
        else (
            f"the file's own here: {number_text(f.floor)}, what its {p} weights and its {p} "
            "arithmetic (against its float32 twin) move the output by"
        )
    )
    return (
        f"{f.output}: atol {f.tolerance.atol:g}{plus} passes an error up to {times}× "
        f"{rounding} ({floor})."
    )


def forgiven_json(run: ValidationRun) -> list[dict[str, object]]:
    """The JSON report's `tolerance_forgives`: [{output, atol, rtol, floor, precision, times,
    basis}] (`basis`: "torch", torch's own error at the precision; "file", a 16-bit file's
    own rounding, measured without the noise floor)."""
    return [
        {
            "output": f.output,
            "atol": float(f.tolerance.atol),
            "rtol": float(f.tolerance.rtol),
            "floor": float(f.floor),
            "precision": f.precision,
            "times": None if f.times is None else float(f.times),
            "basis": f.basis,
        }
        for f in forgiven(run)
    ]
