"""Integer and boolean outputs, compared exactly in their own type.

A float64 copy of an int64 holds 53 bits: ``2**60`` and ``2**60 + 1`` become the same number
and would pass at atol 0. Here the difference is taken in 64-bit unsigned arithmetic (exact
for every pair of int64 / uint64 / bool values); the pass rule then decides on it without
rounding (:func:`parity.judge.pass_rule.exact_int_mismatch`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["exact_diff", "is_integer_pair"]

_I64_MAX = int(np.iinfo(np.int64).max)


def is_integer_pair(ref: np.ndarray, onnx: np.ndarray) -> bool:
    """Both sides hold integers or booleans: compared by :func:`exact_diff`."""
    return ref.dtype.kind in "biu" and onnx.dtype.kind in "biu"


def exact_diff(ref: np.ndarray, onnx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``|onnx - ref|``, ``onnx >= ref``, ``|ref|``): the magnitudes as exact uint64 (as
    Python ints in the rare case of uint64 above int64 against negative values)."""
    r, o = _common(ref, onnx)
    if r.dtype == object:  # uint64 beyond int64 on one side, negatives on the other: rare
        diff = o - r
        ge = np.asarray(diff >= 0, dtype=bool)
        return np.abs(diff), ge, np.abs(r)  # Python ints: |d| may reach 2**64 + 2**63
    ge = o >= r
    ru, ou = r.view(np.uint64), o.view(np.uint64)
    mag = np.where(ge, ou - ru, ru - ou)  # modulo 2**64, exact since 0 <= |o - r| < 2**64
    # |int64 min| is 2**63: exact in uint64
    absref = ru if r.dtype == np.uint64 else np.where(r < 0, np.uint64(0) - ru, ru)
    return mag, ge, absref


def _common(ref: np.ndarray, onnx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both as int64 when the values allow it, else both uint64, else Python ints."""
    big = [a.dtype == np.uint64 and a.size and int(a.max()) > _I64_MAX for a in (ref, onnx)]
    if not any(big):
        return ref.astype(np.int64, copy=False), onnx.astype(np.int64, copy=False)
    if all(a.size == 0 or a.dtype.kind in "bu" or int(a.min()) >= 0 for a in (ref, onnx)):
        return ref.astype(np.uint64, copy=False), onnx.astype(np.uint64, copy=False)
    return ref.astype(object), onnx.astype(object)
