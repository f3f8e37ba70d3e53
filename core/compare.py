"""Compare one output of one input set: its status, then its statistics and profile.

``compare_outputs(ref, onnx, *, name, input_set, tolerance)`` judges one (input set, output)
by the pass rule ``|onnx - ref| <= atol + rtol * |ref|`` (ref = torch) and returns an
:class:`~core.results.OutputComparison`: missing, shape and dtype are decided here; the
numbers come from one chunked pass (:mod:`core.compare_pass`), which also builds the
:class:`~core.error_profile.ErrorProfile` that re-judges the output at any tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.compare_pass import DEFAULT_CHUNK_ELEMENTS, empty_stats, measure
from core.error_profile import ErrorProfile
from core.messages import failure_message, mismatch_message
from core.results import OutputComparison, Status
from core.tolerances import Tolerance

__all__ = ["DEFAULT_CHUNK_ELEMENTS", "compare_outputs"]


def _numeric(a: np.ndarray) -> bool:
    return a.dtype.kind in "biuf"


def compare_outputs(
    ref: np.ndarray | None,
    onnx: np.ndarray | None,
    *,
    name: str,
    input_set: int,
    tolerance: Tolerance,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> OutputComparison:
    """Compare one output of one input set (ref = torch) and judge it at ``tolerance``.

    Integer and bool outputs (both sides) are judged exactly in integers (core.exact_ints);
    their statistics are float64. Other dtypes (strings, complex) are compared for equality
    only, without statistics or profile.
    """

    def result(status: Status, **kw: Any) -> OutputComparison:
        return OutputComparison(
            input_set=input_set,
            name=name,
            status=status,
            tolerance=tolerance,
            ref_shape=None if ref is None else tuple(int(s) for s in ref.shape),
            onnx_shape=None if onnx is None else tuple(int(s) for s in onnx.shape),
            ref_dtype=None if ref is None else str(ref.dtype),
            onnx_dtype=None if onnx is None else str(onnx.dtype),
            **kw,
        )

    if ref is None or onnx is None:
        side = (
            "both sides"
            if ref is None and onnx is None
            else ("the torch side" if ref is None else "the ONNX side")
        )
        present = onnx if ref is None else ref
        n = 0 if present is None else int(present.size)
        return result(Status.MISSING, n_elements=n, message=f"output {name!r} missing on {side}")
    if ref.shape != onnx.shape:
        return result(
            Status.SHAPE_MISMATCH,
            n_elements=int(ref.size),
            message=f"shape {tuple(ref.shape)} vs ONNX {tuple(onnx.shape)}",
        )
    n = int(ref.size)
    dtype_ok = ref.dtype == onnx.dtype
    if not (_numeric(ref) and _numeric(onnx)):  # e.g. string outputs: equal or not
        n_mismatch = int(np.count_nonzero(np.asarray(ref != onnx))) if dtype_ok else n
        status = Status.PASS if n_mismatch == 0 else Status.FAIL
        if not dtype_ok:
            status = Status.DTYPE_MISMATCH
        message = "" if n_mismatch == 0 else mismatch_message(n_mismatch, n)
        if not dtype_ok:
            message = f"dtype {ref.dtype} vs ONNX {onnx.dtype}"
        return result(status, n_elements=n, n_mismatch=n_mismatch, message=message)
    if n == 0:
        return result(
            Status.PASS if dtype_ok else Status.DTYPE_MISMATCH,
            n_elements=0,
            stats=empty_stats(),
            profile=ErrorProfile.empty(0, tolerance),
            n_mismatch=0,
            message="" if dtype_ok else f"dtype {ref.dtype} vs ONNX {onnx.dtype}",
        )

    stats, profile, n_mismatch = measure(ref, onnx, tolerance, chunk_elements)
    passed = n_mismatch == 0
    if not dtype_ok:
        status = Status.DTYPE_MISMATCH
        message = f"dtype {ref.dtype} vs ONNX {onnx.dtype}"
        if not passed:
            message += "\n" + failure_message(n_mismatch, n, stats)
    else:
        status = Status.PASS if passed else Status.FAIL
        message = "" if passed else failure_message(n_mismatch, n, stats)
    return result(
        status,
        n_elements=n,
        stats=stats,
        profile=profile,
        n_mismatch=n_mismatch,
        message=message,
    )
