"""Where a result type's JSON differs from its fields: each one's `Form` (parity.files.derived_json
derives the rest from the type). A type not named here is written field by field, and a field
added to any type is carried with no edit here.

What differs, and why: keys the report has always named otherwise (a generation's "note");
properties written for readers of the report (a weight's "status", a prompt's "match_ratio");
fields kept elsewhere (a comparison's profile is a saved run's members) or recomputed on
load (a signature's calibration); texts from a closed list; what a file's fields must agree
on (statistics a run can have, counts within the elements); a token margin written as null
where it was infinite."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import parity.files.strict_json as sj
from parity.files.derived_json import MAX_TOKENS, Form, register
from parity.files.json_output import exact, plain
from parity.results import (
    SUGGESTION_BASES,
    ApproximatedOutput,
    ApproximationResult,
    ErrorStats,
    GenerationInfo,
    InputSet,
    OutputComparison,
    OutputSet,
    PaddedPrompt,
    PromptGeneration,
    QuantizationResult,
    QuantizedOutput,
    QuantizedTokens,
    QuantizedWeight,
    SuggestedTolerances,
    TokenDivergence,
)
from parity.results.noise import noise_from_json, noise_to_json
from parity.signature import OnnxSignature, TensorSpec
from parity.tolerances import Tolerance

__all__ = ["check_comparison", "register_forms"]

_SIZES = ("max_abs", "max_rel", "mean_abs", "rms", "p99_abs")  # >= 0 (inf: a float64 overflow)


def _check_stats(stats: ErrorStats, at: str) -> None:
    """Never NaN (undefined is null), sizes of errors >= 0, the cosine within [-1, 1]."""
    for name in (*_SIZES, "ref_at_worst", "onnx_at_worst", "cosine", "snr_db"):
        number = getattr(stats, name)
        if number is not None and (
            math.isnan(number)
            or (name in _SIZES and number < 0)
            or (name == "cosine" and not -1 <= number <= 1)
        ):
            shown = exact(number)  # as the file wrote it: 'nan', -1.0
            raise sj.FieldError(f"{at}.{name}: {shown!r} is not a statistic a run can have")


def check_comparison(c: OutputComparison, at: str) -> None:
    """What a comparison's own fields must agree on: counts within its elements, the worst
    element inside the compared shape (a page indexes the arrays with it)."""
    if c.n_mismatch is not None and not 0 <= c.n_mismatch <= c.n_elements:
        raise sj.FieldError(f"{at}.n_mismatch: {c.n_mismatch} of {c.n_elements} elements")
    worst = c.stats.worst_index if c.stats is not None else None
    if worst is None:
        return
    shape = c.ref_shape if c.ref_shape is not None else c.onnx_shape
    inside = shape is not None and len(worst) == len(shape)
    if not inside or any(i >= d for i, d in zip(worst, shape or (), strict=True)):
        raise sj.FieldError(
            f"{at}.stats.worst_index: {list(worst)} is not an index of the compared shape "
            f"{None if shape is None else list(shape)}"
        )


def _check_weight(w: QuantizedWeight, at: str) -> None:
    if w.bits < 1:
        raise sj.FieldError(f"{at}.bits: expected an integer >= 1, got {w.bits}")


def _margin(value: Any, at: str) -> float:
    """A token margin or logits error: null where it was infinite (a generation's JSON is
    plain: no "inf")."""
    number = sj.optional(sj.number, value, at)
    return math.inf if number is None else number


def _plain(value: Any, exact: bool) -> Any:
    return plain(value)


def _summary(value: Any, at: str) -> dict[str, Any]:
    summary = sj.obj(value, at)
    sj.check_depth(summary)
    return dict(summary)


def _row_form() -> Form:
    """A report's ``outputs[]`` row: a report written before a figure existed lacks it (null,
    zero, empty); `n_judged` and `can_rejudge` are not in the report."""
    from parity.show.rows import ComparisonRow

    zeros = {"n_elements": 0, "n_excluded": 0, "atol": 0.0, "rtol": 0.0, "message": ""}
    absent = {f.name: zeros.get(f.name) for f in fields(ComparisonRow)}
    for name in ("name", "status"):
        del absent[name]
    return Form(skip=frozenset({"n_judged", "can_rejudge"}), absent=absent)


def register_forms() -> None:
    """Register every form (parity.reports.report_json and parity.reports.codec do, when
    imported; registering twice is the same)."""
    from parity.show.rows import ComparisonRow

    register(ComparisonRow, _row_form())
    register(ErrorStats, Form(check=_check_stats))
    register(Tolerance, Form(required=frozenset({"atol", "rtol"})))
    register(
        OutputComparison,
        Form(
            skip=frozenset({"profile"}),  # arrays: a saved run's members (parity.reports.codec)
            encoders={"noise": lambda n, exact: noise_to_json(n)},
            decoders={"noise": noise_from_json},
            check=check_comparison,
        ),
    )
    # arrays: a saved run's members (parity.reports.codec reads them and gives them; the
    # layers' kept values: parity.layers.result)
    register(InputSet, Form(skip=frozenset({"feeds"})))
    register(OutputSet, Form(skip=frozenset({"arrays"})))
    weight = Form(
        extra={"status": lambda w: w.status}, check=_check_weight, absent={"parameter": None}
    )
    register(QuantizedWeight, weight)
    none = ("export_max_abs", "export_passed", "sqnr_db", "top1_agreement", "kl_mean")
    for cls in (QuantizedOutput, QuantizedTokens, ApproximatedOutput):  # lacking: not measured
        names = {f.name for f in fields(cls)}
        absent = {k: None for k in (*none, "cost_max_abs") if k in names}
        register(cls, Form(absent=absent))
    register(TensorSpec, Form(decoders={"shape": lambda v, at: sj.shape(v, at, named=True)}))
    # recomputed from the file when it is opened again (parity.load), never saved
    register(OnnxSignature, Form(skip=frozenset({"calibrated", "index_limits"})))
    register(
        TokenDivergence,
        Form(
            decoders={"torch_margin": _margin, "logits_error": _margin},
            # saved before near ties were judged; inf: no margin measured
            absent={"logits_passed": False, "torch_margin": math.inf, "logits_error": math.inf},
        ),
    )
    register(
        PromptGeneration,
        Form(
            extra={"match_ratio": lambda p: p.match_ratio},
            # one piece per token: as many as a generation makes (the file's size bounds them)
            limits={"torch_pieces": MAX_TOKENS, "onnx_pieces": MAX_TOKENS},
        ),
    )
    register(
        GenerationInfo,
        Form(
            keys={"free_run_note": "note"},
            omit=frozenset({"free_run_note", "padded_batch"}),
            encoders={"summary": _plain},
            decoders={"summary": _summary},
        ),
    )
    # a left-padded batch's errors: null where one was not finite (plain JSON)
    register(PaddedPrompt, Form(decoders={"batch_error": _margin, "shift": _margin}))
    register(
        SuggestedTolerances, Form(choices={"basis": SUGGESTION_BASES}, omit=frozenset({"default"}))
    )
    register(QuantizationResult, Form(extra={"bits": lambda q: q.width}))
    register(
        ApproximationResult,
        Form(encoders={"precision": lambda v, exact: v or None}),  # "" is written null
    )
