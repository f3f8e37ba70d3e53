"""What the frozen-size search may cost (issue 62): on a failure of values only it takes at most
a quarter of the run's torch time, each check estimated before it runs from the run's own
rates (parity.judge.frozen.Allowance); where ONNX Runtime raised or a shape differs it keeps its
full bound. The bound's logic is tested with a counted budget (each check's cost fixed), on
the real legacy export of a mean written by hand (a Div by 3072 = 64 × 48); wall time is never
asserted."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import onnx
import pytest

from parity.judge.frozen import find_frozen
from parity.judge.frozen_budget import Allowance, Outcome
from tests.helpers import frozen_models

DIMS = ["batch", "height", "width"]
FAILING = [{"batch": 2, "height": 32, "width": 32}]


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("frozen_budget")
    frozen_models.write_models(root)
    with contextlib.redirect_stdout(io.StringIO()):
        for name in ("pool", "flatten"):
            frozen_models.export(root, name, dynamo=False)
    return root


class Counted:
    """A check that fails everywhere and counts its calls: what the budget lets through."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, int], bool]] = []

    def __call__(self, dims, patched) -> Outcome:
        self.calls.append((dict(dims), patched is not None))
        return Outcome(passed=False, error=1.0)


def counted(seconds: float, *, rate: float = 1.0, floor: float = 0.0) -> Allowance:
    """Each check at a size torch has not run costs `rate` s (one element), at least `floor`;
    a repeat costs 0."""
    return Allowance(
        seconds=seconds, elements=lambda dims: 1, torch_rate=rate, ort_rate=0.0,
        torch_floor=floor, basis=f"{seconds:g} s",
    )  # fmt: skip


def search(exports: Path, allowance: Allowance | None, check: Counted):
    model = onnx.load(str(exports / "pool_legacy.onnx"))
    return find_frozen(
        model, DIMS, FAILING, [], check, seconds=math.inf, batch={"batch"}, allowance=allowance
    )


def test_a_values_only_search_runs_the_checks_its_allowance_affords(exports) -> None:
    """2.5 s at 1 s a check: two checks run, the others are not started and the note says the
    first left out, why, and how many; without an allowance the same search runs on (its
    premise: it wanted more)."""
    check = Counted()
    found = search(exports, counted(2.5), check)
    assert len(check.calls) == 2 and found.checks == 2
    assert found.nodes == () and found.unaffordable >= 1
    said = f"left out {found.unaffordable} check"
    assert said in found.note and "past its budget for a failure of values only (2.5 s)" in (
        found.note
    )
    assert "about 1 s with 2 s spent" in found.note
    unbounded = Counted()
    search(exports, None, unbounded)
    assert len(unbounded.calls) > 2


def test_torch_is_charged_once_per_size(exports) -> None:
    """Two new sizes at 1 s each (the export's 64 × 48, where the file works, and the failing
    one) spend 2 of 2.5 s; the changed graphs, checked at the failing size torch already ran
    at, cost nothing more and all run."""
    check = Counted()

    def export_works(dims, patched):
        outcome = check(dims, patched)
        return Outcome(passed=True, error=0.0) if len(check.calls) == 1 else outcome

    found = search(exports, counted(2.5), export_works)
    new = [dims for dims, patched in check.calls if not patched]
    changed = [dims for dims, patched in check.calls if patched]
    assert new == [{"batch": 2, "height": 64, "width": 48}, FAILING[0]]
    assert changed and all(d == FAILING[0] for d in changed)
    assert found.over == "" and found.nodes == ()


def test_a_new_size_costs_torch_at_least_its_floor(exports) -> None:
    """A size's torch run costs at least `torch_floor` (a new shape's start-up: the run's own
    torch time per set), however few its elements: 2.5 s at a floor of 1 s, two checks."""
    check = Counted()
    search(exports, counted(2.5, rate=0.0, floor=1.0), check)
    assert len(check.calls) == 2


def test_the_allowance_is_a_quarter_of_the_runs_torch_time(exports) -> None:
    """A real run of the hand-written mean (values only, no error): its allowance would be
    0.25 x its own torch time, with rates from its own timings, but a model this small keeps
    the full bound (and its Div is named); a run where ONNX Runtime raised (the Reshape frozen
    at 1 x 8 x 3072) keeps it too."""
    import parity
    from parity.run.frozen_search import (
        SMALL_WORK,
        input_elements,
        raised_or_reshaped,
        search_allowance,
        set_dims,
        values_allowance,
    )

    model = exports / "models.py"
    proto = onnx.load(str(exports / "pool_legacy.onnx"))
    run = parity.validate(f"{model}:pool", exports / "pool_legacy.onnx")
    assert not run.passed and not raised_or_reshaped(run)
    assert run.signature is not None
    allowance = values_allowance(run, run.signature, proto.ByteSize())
    assert allowance.seconds == pytest.approx(0.25 * run.timings["torch"])
    sizes = [input_elements(run.signature, set_dims(run.signature, s)) for s in run.input_sets]
    assert allowance.torch_rate == pytest.approx(run.timings["torch"] / sum(sizes))
    assert allowance.torch_floor == pytest.approx(run.timings["torch"] / len(sizes))
    assert allowance.elements({"batch": 1, "height": 64, "width": 48}) == 3 * 64 * 48
    # a model this small (8 x 3 x 3 x 3 conv weights, 4 x 3 x 64 x 64 inputs) keeps the full
    # bound: its checks cost start-up, not size; decided from its size, not from a clock
    size = (exports / "pool_legacy.onnx").stat().st_size
    assert size * max(sizes) <= SMALL_WORK
    assert search_allowance(run, run.signature, size) is None
    big = search_allowance(run, run.signature, 10**9)
    assert big is not None and big.seconds == allowance.seconds
    # two sets: a quarter of torch's time is less than one torch run at a new size, so a big
    # model's search on values only does not start (parity.run.frozen_search.with_frozen)
    assert len(run.input_sets) == 2 and big.seconds < big.torch_floor
    assert run.frozen and run.frozen[0].node == "/Div"
    raised = parity.validate(f"{model}:flatten", exports / "flatten_legacy.onnx")
    assert raised_or_reshaped(raised)
    assert raised.frozen and raised.frozen[0].node == "/Reshape"
