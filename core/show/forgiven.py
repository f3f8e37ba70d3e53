"""What a tolerance forgives, against the rounding noise measured for its output: "atol 4e-3
passes an error up to 370× float32 rounding". A tolerance is a number; what it means depends
on the output's own rounding noise (torch's error against float64 at the file's precision,
parity.judge.noise_floor). Said wherever a tolerance is set or used (terminal, JSON, HTML,
the Tolerances page), for the tolerances the user set (not the default), where the noise was
measured; a bug such a tolerance passes is a finding (parity.show.findings)."""

from __future__ import annotations

from dataclasses import dataclass

from parity.judge.noise_floor import output_floors
from parity.results import ValidationRun
from parity.text import number_text
from parity.tolerances import Tolerance

__all__ = ["Forgiven", "forgiven", "forgiven_json", "forgiven_text"]


@dataclass(frozen=True)
class Forgiven:
    """One output's tolerance against its noise: `floor` is the largest error of torch itself
    at `precision` against float64 over the run's input sets; `times` = atol / floor (None
    where the floor is 0)."""

    output: str
    tolerance: Tolerance
    floor: float
    precision: str
    times: float | None


def forgiven(run: ValidationRun) -> tuple[Forgiven, ...]:
    """Per output whose tolerance is not the default and whose noise floor was measured."""
    default = Tolerance()
    out = []
    for name, (noise, floor, _) in output_floors(run.outputs).items():
        tolerance = run.tolerances.for_output(name)
        if tolerance == default:
            continue
        times = tolerance.atol / floor if floor > 0 else None
        out.append(Forgiven(name, tolerance, floor, noise.precision, times))
    return tuple(out)


def forgiven_text(f: Forgiven) -> str:
    """``y: atol 0.004 passes an error up to 370× float32 rounding (torch's own error here
    1.1e-05)``; rtol adds its share of each element's |ref|."""
    rounding = "int8 quantization noise" if f.precision == "int8" else f"{f.precision} rounding"
    plus = f" plus rtol {f.tolerance.rtol:g}·|ref|" if f.tolerance.rtol else ""
    if f.times is None:
        return (
            f"{f.output}: atol {f.tolerance.atol:g}{plus} forgives any error here: torch itself "
            f"is exact against float64 at {f.precision}, so any difference is not rounding."
        )
    times = f"{float(f'{f.times:.2g}'):,.0f}" if f.times >= 100 else f"{f.times:.2g}"
    return (
        f"{f.output}: atol {f.tolerance.atol:g}{plus} passes an error up to {times}× "
        f"{rounding} (torch's own error here: {number_text(f.floor)})."
    )


def forgiven_json(run: ValidationRun) -> list[dict[str, object]]:
    """The JSON report's `tolerance_forgives`: [{output, atol, rtol, floor, precision, times}]."""
    return [
        {
            "output": f.output,
            "atol": float(f.tolerance.atol),
            "rtol": float(f.tolerance.rtol),
            "floor": float(f.floor),
            "precision": f.precision,
            "times": None if f.times is None else float(f.times),
        }
        for f in forgiven(run)
    ]
