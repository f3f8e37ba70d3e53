"""A run's verdict and the exit code that says it: decided here for runs, candidates, the CLI,
the JSON report and sweeps.

`Verdict` is a `StrEnum`: its members are the strings "pass" / "fail" / "error", so JSON holds
them as they were and ``verdict == "pass"`` still reads true. `ExitCode` is `parity validate`'s
(and `parity sweep`'s) exit status: 0 every output passes, 1 some output fails, 2 the run could
not be made.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

__all__ = ["ExitCode", "Judge", "Verdict", "judge_of"]


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the run (or a candidate, or a sweep's pair) could not be made

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode[self.name]


class ExitCode(IntEnum):
    PASS = 0
    FAIL = 1
    ERROR = 2

    @property
    def verdict(self) -> Verdict:
        return Verdict[self.name]


class Judge(StrEnum):
    """How a run's verdict is decided (`--judge`, `validate(judge=...)`, the Run page).

    TOLERANCE (the default): every output within atol + rtol·|ref| passes, whatever the cause.
    CAUSE: the run fails on a bug and passes where every difference is what the file was
    meant to do (its precision, quantization or a tool's intended approximation, measured):
    decided from the run's findings (parity.show.cause).
    """

    TOLERANCE = "tolerance"
    CAUSE = "cause"


def judge_of(value: Judge | str) -> Judge:
    """A judge from its name ("tolerance" / "cause"); a ValueError naming both otherwise."""
    try:
        return Judge(value)
    except ValueError:
        raise ValueError(f"judge must be 'tolerance' or 'cause', got {value!r}") from None
