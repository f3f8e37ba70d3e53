"""Compare one output of one input set: its status, then its statistics and profile.

``compare_outputs(ref, onnx, *, name, input_set, tolerance)`` judges one (input set, output)
by the pass rule ``|onnx - ref| <= atol + rtol * |ref|`` (ref = torch) and returns an
:class:`~parity.results.OutputComparison`: missing, shape and dtype are decided here; the
numbers come from one chunked pass (:mod:`parity.judge.compare_pass`), which also builds the
:class:`~parity.judge.error_profile.ErrorProfile` that re-judges the output at any tolerance.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from parity.judge.compare_pass import DEFAULT_CHUNK_ELEMENTS, empty_stats, measure
from parity.judge.error_profile import ErrorProfile
from parity.messages import failure_message, mismatch_message
from parity.results import OutputComparison, Status
from parity.tolerances import Tolerance

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
    exclude: np.ndarray | None = None,
) -> OutputComparison:
    """Compare one output of one input set (ref = torch) and judge it at ``tolerance``.

    Integer and bool outputs (both sides) are judged exactly in integers (parity.judge.exact_ints);
    their statistics are float64. Other dtypes (strings, complex) are compared for equality
    only, without statistics or profile.

    ``exclude`` (bool, broadcastable to the output; True = not judged) leaves elements out
    of the verdict and of every statistic (``n_elements`` still counts the whole output;
    the excluded ones are counted apart in ``n_excluded``, with ``excluded_max_abs``) and
    the worst index still points into the full output.
    """
    if exclude is not None and ref is not None and onnx is not None and ref.shape == onnx.shape:
        return _compare_excluding(
            ref,
            onnx,
            np.broadcast_to(np.asarray(exclude, dtype=bool), ref.shape),
            name=name,
            input_set=input_set,
            tolerance=tolerance,
            chunk_elements=chunk_elements,
        )

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


def _compare_excluding(
    ref: np.ndarray,
    onnx: np.ndarray,
    exclude: np.ndarray,
    *,
    name: str,
    input_set: int,
    tolerance: Tolerance,
    chunk_elements: int,
) -> OutputComparison:
    """compare_outputs on the judged elements only (flattened), mapped back to the shape."""
    flat_excluded = exclude.reshape(-1)
    n_excluded = int(np.count_nonzero(flat_excluded))
    if n_excluded == 0:
        return compare_outputs(
            ref, onnx, name=name, input_set=input_set, tolerance=tolerance,
            chunk_elements=chunk_elements,
        )  # fmt: skip
    keep = np.flatnonzero(~flat_excluded)
    fr, fo = ref.reshape(-1), onnx.reshape(-1)
    inner = compare_outputs(
        fr[keep], fo[keep], name=name, input_set=input_set, tolerance=tolerance,
        chunk_elements=chunk_elements,
    )  # fmt: skip
    stats = inner.stats
    if stats is not None and stats.worst_index is not None:
        full = np.unravel_index(int(keep[stats.worst_index[0]]), ref.shape)
        stats = replace(stats, worst_index=tuple(int(i) for i in full))
    excluded_max_abs = None
    if _numeric(ref) and _numeric(onnx):
        with np.errstate(invalid="ignore", over="ignore"):
            gone = np.flatnonzero(flat_excluded)
            diff = np.abs(fr[gone].astype(np.float64) - fo[gone].astype(np.float64))
        finite = diff[np.isfinite(diff)]
        excluded_max_abs = float(finite.max()) if finite.size else None
    return replace(
        inner,
        n_elements=int(ref.size),
        ref_shape=tuple(int(d) for d in ref.shape),
        onnx_shape=tuple(int(d) for d in onnx.shape),
        stats=stats,
        n_excluded=n_excluded,
        excluded_max_abs=excluded_max_abs,
    )
