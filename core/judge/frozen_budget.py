"""What the frozen-at-export search may spend and what it did (parity.judge.frozen runs it):
one check's answer (`Outcome`), the checks' `Budget` (a count, a time limit, and on a failure
of values only an `Allowance` of estimated seconds), and the search's result with its note
(`FrozenSearch`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from parity.results import FrozenNode


@dataclass(frozen=True)
class Outcome:
    """One check's answer: `passed` at the user's tolerances; `error`: the largest output's
    max |onnx - torch| over its max |torch| (inf: ONNX Runtime raised, shapes or one-sided
    NaN differ); `skipped`: why the check was not run (its memory estimate over the budget)."""

    passed: bool
    error: float = math.inf
    skipped: str = ""


# (dims, model bytes or None for the file itself) -> its Outcome, or None where torch itself
# cannot run at that size
Check = Callable[[Mapping[str, int], bytes | None], Outcome | None]
# (dims) -> {ONNX node name: FILE:LINE} from a re-trace at that size (legacy exports), or {}
Retrace = Callable[[Mapping[str, int]], Mapping[str, str]]

MAX_CHECKS = 24  # torch + ONNX Runtime runs the search may make, all told
ROUNDING_REL = 1e-4  # float32 rounding at the outputs' scale: ~840 ulps, far below a wrong size


@dataclass(frozen=True)
class Allowance:
    """What the checks may cost where the failure gives the search little to go on (values
    only, no error, no shape): `seconds` in all, each check estimated before it runs from the
    run's own measured rates (torch `torch_rate` and the rest of a check `ort_rate` seconds
    per input element, `elements(dims)` a set's input elements, `session` a changed graph's
    session setup); torch is charged once per size (its outputs are kept), at least
    `torch_floor` (a new shape's start-up). Estimated, not timed: the search's own clock
    never decides what it runs. `basis` says where the seconds come from, for the note."""

    seconds: float
    elements: Callable[[Mapping[str, int]], int]
    torch_rate: float
    ort_rate: float
    torch_floor: float = 0.0
    session: float = 0.0
    basis: str = ""

    def cost(self, dims: Mapping[str, int], patched: bool, torch_ran: bool) -> float:
        n = self.elements(dims)
        torch = 0.0 if torch_ran else max(self.torch_rate * n, self.torch_floor)
        return torch + self.ort_rate * n + (self.session if patched else 0.0)


@dataclass
class Budget:
    """Checks left, the time the search may take (a big model's failing run whose constants
    are no sizes must not cost 24 more runs of it), and what it did, for the note."""

    left: int = MAX_CHECKS
    until: float = math.inf  # time.monotonic() past which nothing more starts
    ran: int = 0
    skipped: list[str] = field(default_factory=list)  # why a check was not run (memory)
    stopped: bool = False  # the time limit ended the search
    unaffordable: int = 0  # checks the allowance left out
    over: str = ""  # ... the first, where and why, said in the note
    bound: float = ROUNDING_REL  # an agreeing output's largest relative error
    allowance: Allowance | None = None  # the estimated cost the checks may take, all told
    spent: float = 0.0  # ... and what the checks run so far were estimated to cost
    sizes: set[tuple[tuple[str, int], ...]] = field(default_factory=set)  # torch ran there

    def take(self) -> bool:
        if self.out_of_time():
            return False
        if self.left <= 0:
            return False
        self.left -= 1
        return True

    def out_of_time(self) -> bool:
        if time.monotonic() > self.until:
            self.stopped = True
        return self.stopped

    def run(self, check: Check, dims: Mapping[str, int], patched: bytes | None) -> Outcome | None:
        """One check, counted; None where torch cannot run there or it was skipped (its
        estimated cost past the allowance ends the search, said)."""
        if not self._affords(dims, patched is not None):
            return None
        outcome = check(dims, patched)
        if outcome is not None and outcome.skipped:
            if outcome.skipped not in self.skipped:
                self.skipped.append(outcome.skipped)
            return None
        self.ran += 1
        return outcome

    def _affords(self, dims: Mapping[str, int], patched: bool) -> bool:
        if self.allowance is None:
            return True
        key = tuple(sorted((d, int(v)) for d, v in dims.items()))
        cost = self.allowance.cost(dims, patched, key in self.sizes)
        if self.spent + cost > self.allowance.seconds:
            self.unaffordable += 1  # skipped: a later check (a smaller size) may fit
            if not self.over:
                at = ", ".join(f"{d} {v}" for d, v in dims.items())
                self.over = (
                    f"({self.allowance.basis}): the first at {at}, about {cost:.2g} s with "
                    f"{self.spent:.2g} s spent"
                )
            return False
        self.spent += cost
        self.sizes.add(key)
        return True

    def agrees(self, outcome: Outcome | None) -> bool:
        """Within the user's tolerance, or within the file's own rounding (`bound`)."""
        return outcome is not None and (outcome.passed or outcome.error <= self.bound)


@dataclass(frozen=True)
class FrozenSearch:
    """What the search found (`nodes`, confirmed only) and what it cost: checks run, sizes
    skipped for memory (with why), whether the time limit stopped it, its seconds, and the
    check its allowance could not afford (`over`)."""

    nodes: tuple[FrozenNode, ...]
    checks: int = 0
    skipped: tuple[str, ...] = ()
    stopped: bool = False
    seconds: float = 0.0
    limit: float = math.inf
    over: str = ""  # the first check its allowance left out, where and why
    unaffordable: int = 0  # ... and how many it left out

    @property
    def note(self) -> str:
        """The one sentence said when nothing is named after some check, or a check was
        skipped ("" else: a search with nothing to try says nothing)."""
        parts = []
        if not self.nodes and (self.checks or self.stopped):  # nothing to try: nothing to say
            parts.append(
                f"No size frozen at export was confirmed: the search ran {self.checks} check"
                f"{'s' if self.checks != 1 else ''} in {self.seconds:.1f} s"
                + (
                    f" and stopped at its {self.limit:.0f} s limit"
                    if self.stopped and math.isfinite(self.limit)
                    else ""
                )
                + "."
            )
        elif self.stopped and math.isfinite(self.limit):
            parts.append(f"The frozen-size search stopped at its {self.limit:.0f} s limit.")
        if self.over:
            n = self.unaffordable
            parts.append(
                f"The frozen-size search left out {n} check{'s' if n != 1 else ''} past its "
                f"budget for a failure of values only {self.over}."
            )
        if self.skipped:
            more = len(self.skipped) - 1
            also = f" (and {more} more size{'s' if more > 1 else ''})" if more else ""
            parts.append(f"A frozen-size check was skipped: {self.skipped[0]}{also}.")
        return " ".join(parts)
