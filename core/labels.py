"""How statuses and input sets are named, and which failure is the worst: decided once for the
terminal, the HTML report, the dashboard's pages and the figures."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from parity.results import OutputComparison, Status, ValidationRun
from parity.verdict import Verdict

__all__ = [
    "INTENDED_MARK",
    "OUTSIDE_MODULES",
    "WORST_WORDS",
    "StatusStyle",
    "badness",
    "badness_of",
    "set_label",
    "status_label",
    "verdict_label",
    "worst_first",
    "wrong_pair_note",
]

StatusStyle = Literal["terminal", "words", "marked", "mark"]

OUTSIDE_MODULES = "(outside any module)"
"""The one name of a model's part that no torch submodule holds (ops of the top-level
forward, or values no module claims): in sentences, tables, the module tree and the terminal."""

_WORDS = {
    Status.PASS: "pass",
    Status.FAIL: "fail",
    Status.SHAPE_MISMATCH: "shape mismatch",
    Status.DTYPE_MISMATCH: "dtype mismatch",
    Status.MISSING: "missing",
    Status.ERROR: "ONNX Runtime error",
}
_TERMINAL = {  # capitals draw the eye down a plain-text column
    Status.PASS: "pass",
    Status.FAIL: "FAIL",
    Status.SHAPE_MISMATCH: "SHAPE",
    Status.DTYPE_MISMATCH: "DTYPE",
    Status.MISSING: "MISSING",
    Status.ERROR: "ERROR",
}
_MARK = {  # one grid cell: a tick, a cross, or what kind of mismatch
    Status.PASS: "✓",
    Status.FAIL: "✗",
    Status.SHAPE_MISMATCH: "shape",
    Status.DTYPE_MISMATCH: "dtype",
    Status.MISSING: "missing",
    Status.ERROR: "error",
}


INTENDED_MARK = "≈"
"""A cell readable without colour: beyond the tolerance by what the file was meant to do."""


def status_label(status: Status, style: StatusStyle = "words", intended: str = "") -> str:
    """``terminal`` (pass / FAIL / SHAPE ...), ``words`` (HTML: pass / FAIL / shape mismatch),
    ``marked`` (tables: ✓ pass / ✗ shape mismatch), ``mark`` (grid cells: ✓ / ✗ / shape).

    `intended`: the cause's label of an output whose failure is intended (parity.show.
    cause_labels: "float16 rounding"); a FAIL then reads as it (``≈ float16 rounding``)."""
    if intended and status is Status.FAIL:
        if style == "mark":
            return INTENDED_MARK
        return f"{INTENDED_MARK} {intended}" if style == "marked" else intended
    if style == "terminal":
        return _TERMINAL[status]
    if style == "mark":
        return _MARK[status]
    words = _WORDS[status]
    if style == "marked":
        return f"{'✓' if status.passed else '✗'} {words}"
    return "FAIL" if status is Status.FAIL else words  # the one word a reader looks for


def verdict_label(verdict: str) -> str:
    """A verdict in capitals, the word a reader looks for: ``PASS``, ``FAIL``, ``ERROR`` (the
    terminal's headline, the HTML report's banner, the dashboard's badge)."""
    return Verdict(verdict).name


WORST_WORDS = "the most elements out of tolerance, then the largest error"
"""What "worst" means wherever a failure is called the worst (parity.labels.badness), said
beside it so a reader never takes it for the largest error alone."""


def badness(c: OutputComparison) -> tuple[bool, bool, float, float]:
    """Sort key, larger is worse: failing; judged element by element (something to look at);
    mismatch fraction; max |error| (non-finite counts as infinite)."""
    max_abs = c.stats.max_abs if c.stats is not None else None
    return badness_of(c.status, c.mismatch_fraction, max_abs)


def badness_of(
    status: Status, mismatch_fraction: float | None, max_abs: float | None
) -> tuple[bool, bool, float, float]:
    """:func:`badness` from the values themselves (a table row has them without the stats)."""
    elementwise = status in (Status.FAIL, Status.DTYPE_MISMATCH, Status.PASS)
    max_abs = 0.0 if max_abs is None else float(max_abs)
    return (
        not status.passed,
        elementwise,
        mismatch_fraction or 0.0,
        (max_abs if math.isfinite(max_abs) else math.inf),
    )


def worst_first(comparisons: Iterable[OutputComparison]) -> list[OutputComparison]:
    """Comparisons ordered by :func:`badness`, worst first (stable among equals)."""
    return sorted(comparisons, key=badness, reverse=True)


def set_label(run: ValidationRun, index: int) -> str:
    """An input set as rows and menus name it: an LLM run's step label ("step 2 · decode"),
    else ``set N (shapes)``."""
    for s in run.input_sets:
        if s.index != index:
            continue
        if run.is_generation and s.label:
            return s.label
        shapes = ", ".join("x".join(str(d) for d in shp) for shp in s.shapes().values())
        return f"set {index} ({shapes})" if shapes else f"set {index}"
    return f"set {index}"


def wrong_pair_note(run: ValidationRun) -> str | None:
    """The sentence every reader shows when the model and the ONNX file likely do not belong
    together, else None.

    Decided on shapes: outputs are paired by name, else by position, so a wrong pair still
    yields comparisons under the ONNX file's names; what gives it away is that no pair in
    any input set has the same shape on both sides (or one side is missing throughout), and
    no frozen size (confirmed) explains the shapes instead."""
    if any(f.confirmed for f in run.frozen):
        return None  # a size frozen at export explains the shapes: the pair is right
    comps = [c for c in run.outputs if c.status is not Status.ERROR]  # raised: no shape to say
    if not comps or any(c.ref_shape is not None and c.ref_shape == c.onnx_shape for c in comps):
        return None
    names = ", ".join(dict.fromkeys(c.name for c in comps))
    return (
        "likely a wrong pair: no output of the model has the shape of the ONNX output it was "
        f"paired with (by name, else by position) in any input set ({names}). Check that "
        "the ONNX file was exported from this model."
    )


def set_noun(run: ValidationRun) -> str:
    """What one of the run's input sets is, in words: a generate() step (an encoder's
    captured forward call), a batch of the user's samples (--data), else an input set
    (count_text / plural_text say several)."""
    if run.generation is not None:
        encoder = run.generation.summary.get("kind") == "encoder"
        return "captured call" if encoder else "step"
    return "batch" if run.data is not None else "input set"
