"""compare_outputs: statuses, the pass rule, NaN/Inf handling and every statistic.

Every statistic is checked against a plain float64 numpy computation of the same thing,
on random data with planted errors, in one chunk and in many small chunks.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from parity.judge.compare import compare_outputs
from parity.results import Status
from parity.tolerances import Tolerance

TOL = Tolerance(atol=1e-5, rtol=0.0)


def _compare(ref, onnx, tol=TOL, chunk=65536, name="out"):
    return compare_outputs(ref, onnx, name=name, input_set=0, tolerance=tol, chunk_elements=chunk)


def _planted(shape=(4, 50, 30), seed=0, dtype=np.float32):
    """Reference values and an ONNX side with small noise plus a few large planted errors."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(shape).astype(dtype)
    onnx = (ref + rng.standard_normal(shape).astype(dtype) * dtype(3e-6)).astype(dtype)
    flat = onnx.reshape(-1)
    planted = rng.choice(flat.size, size=5, replace=False)
    flat[planted] += np.array([0.5, -0.25, 1e-3, 2e-4, -7e-5], dtype=dtype)
    ref.reshape(-1)[rng.choice(flat.size, size=3, replace=False)] = 0.0  # exercise ref == 0
    return ref, onnx


def _plain(ref, onnx, tol):
    """The same numbers, written the obvious way in float64 (finite pairs only)."""
    r = ref.astype(np.float64).ravel()
    o = onnx.astype(np.float64).ravel()
    fin = np.isfinite(r) & np.isfinite(o)
    rf, of = r[fin], o[fin]
    d = of - rf
    ad = np.abs(d)
    nz = rf != 0
    w = int(np.flatnonzero(fin)[np.argmax(ad)])
    return {
        "max_abs": ad.max(),
        "worst_index": tuple(int(i) for i in np.unravel_index(w, ref.shape)),
        "ref_at_worst": r[w],
        "onnx_at_worst": o[w],
        "max_rel": (ad[nz] / np.abs(rf[nz])).max() if nz.any() else None,
        "mean_abs": ad.mean(),
        "rms": math.sqrt(np.mean(d * d)),
        "p99_abs": np.percentile(ad, 99),
        "cosine": float(rf @ of / (np.linalg.norm(rf) * np.linalg.norm(of))),
        "snr_db": 10 * math.log10(float(rf @ rf) / float(d @ d)),
        "n_mismatch_finite": int(np.count_nonzero(ad > tol.atol + tol.rtol * np.abs(rf))),
        "min_atol": max(0.0, float(np.max(ad - tol.rtol * np.abs(rf)))),
    }


@pytest.mark.parametrize("chunk", [7, 333, 4096, 1 << 20])
@pytest.mark.parametrize("tol", [Tolerance(1e-5, 0.0), Tolerance(1e-6, 1e-3)])
def test_every_statistic_matches_plain_float64_numpy(chunk, tol):
    ref, onnx = _planted()
    got = _compare(ref, onnx, tol=tol, chunk=chunk)
    want = _plain(ref, onnx, tol)
    s = got.stats
    assert got.status is Status.FAIL
    assert s.max_abs == want["max_abs"]
    assert s.worst_index == want["worst_index"]
    assert s.ref_at_worst == want["ref_at_worst"]
    assert s.onnx_at_worst == want["onnx_at_worst"]
    assert s.max_rel == want["max_rel"]
    assert s.mean_abs == pytest.approx(want["mean_abs"], rel=1e-12)
    assert s.rms == pytest.approx(want["rms"], rel=1e-12)
    assert s.p99_abs == want["p99_abs"]
    assert s.cosine == pytest.approx(want["cosine"], rel=1e-12)
    assert s.snr_db == pytest.approx(want["snr_db"], rel=1e-12)
    assert got.n_mismatch == want["n_mismatch_finite"]
    assert got.mismatch_fraction == want["n_mismatch_finite"] / ref.size
    assert s.n_nan_mismatch == 0 and s.n_inf_mismatch == 0
    assert got.min_atol_to_pass == pytest.approx(want["min_atol"], rel=1e-12)


def test_worst_index_is_multi_dimensional_and_both_values_are_read_there():
    ref = np.zeros((3, 4, 5), dtype=np.float32)
    onnx = ref.copy()
    onnx[2, 1, 3] = 0.75
    ref[2, 1, 3] = 0.25
    onnx[0, 0, 0] = 0.375  # second-largest error
    s = _compare(ref, onnx, chunk=8).stats
    assert s.worst_index == (2, 1, 3)
    assert (s.ref_at_worst, s.onnx_at_worst) == (0.25, 0.75)
    assert s.max_abs == 0.5


def test_first_of_equal_largest_errors_is_reported_like_argmax():
    ref = np.zeros(100, dtype=np.float32)
    onnx = ref.copy()
    onnx[[70, 30, 90]] = 1.0
    assert _compare(ref, onnx, chunk=16).stats.worst_index == (30,)


def test_max_rel_ignores_elements_where_ref_is_zero():
    ref = np.array([0.0, 2.0, 4.0], dtype=np.float32)
    onnx = np.array([5.0, 2.5, 4.0], dtype=np.float32)
    s = _compare(ref, onnx).stats
    assert s.max_rel == 0.25
    assert s.max_abs == 5.0


def test_max_rel_is_none_when_every_ref_is_zero():
    ref = np.zeros(10, dtype=np.float32)
    onnx = np.full(10, 1e-3, dtype=np.float32)
    assert _compare(ref, onnx).stats.max_rel is None


def test_p99_is_exact_across_many_chunks():
    rng = np.random.default_rng(3)
    for n in (1, 2, 99, 101, 1000, 25_001):
        ref = rng.standard_normal(n)
        onnx = ref + rng.standard_cauchy(n) * 1e-4  # heavy tail: the top 1 % spreads wide
        got = _compare(ref, onnx, chunk=97).stats.p99_abs
        assert got == np.percentile(np.abs(onnx - ref), 99), n


def test_p99_is_exact_when_most_errors_are_tied():
    rng = np.random.default_rng(4)
    ref = rng.standard_normal(300_000).astype(np.float32)
    onnx = ref + np.float32(1e-6)  # float32 rounding leaves a handful of distinct errors
    got = _compare(ref, onnx, chunk=4096).stats.p99_abs
    want = np.percentile(np.abs(onnx.astype(np.float64) - ref.astype(np.float64)), 99)
    assert got == want


def test_p99_with_many_tied_and_zero_errors():
    ref = np.zeros(5000)
    onnx = np.zeros(5000)
    onnx[:40] = 1.0
    onnx[40:60] = 0.5
    got = _compare(ref, onnx, chunk=64).stats.p99_abs
    assert got == np.percentile(np.abs(onnx - ref), 99)


def test_multi_chunk_and_single_chunk_agree():
    ref, onnx = _planted(shape=(7, 301), seed=5)
    one = _compare(ref, onnx, tol=Tolerance(1e-6, 1e-4), chunk=1 << 20)
    many = _compare(ref, onnx, tol=Tolerance(1e-6, 1e-4), chunk=50)
    assert one.stats.max_abs == many.stats.max_abs
    assert one.stats.worst_index == many.stats.worst_index
    assert one.stats.p99_abs == many.stats.p99_abs
    assert one.stats.max_rel == many.stats.max_rel
    assert one.stats.mean_abs == pytest.approx(many.stats.mean_abs, rel=1e-12)
    assert one.n_mismatch == many.n_mismatch
    assert one.min_atol_to_pass == many.min_atol_to_pass
    assert np.array_equal(one.profile.hull_r, many.profile.hull_r)
    assert np.array_equal(one.profile.hist_counts, many.profile.hist_counts)


# -- NaN and Inf -------------------------------------------------------------------------


def test_nans_on_both_sides_are_equal():
    ref = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    onnx = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    got = _compare(ref, onnx, tol=Tolerance(0.0, 0.0))
    assert got.status is Status.PASS
    assert got.n_mismatch == 0
    assert got.stats.n_nan_mismatch == 0
    assert got.stats.max_abs == 0.0


def test_one_sided_nan_fails_at_any_tolerance():
    ref = np.array([1.0, 2.0, np.nan, 4.0], dtype=np.float32)
    onnx = np.array([1.0, np.nan, 3.0, 4.0], dtype=np.float32)
    got = _compare(ref, onnx, tol=Tolerance(1e30, 1e30))
    assert got.status is Status.FAIL
    assert got.n_mismatch == 2
    assert got.stats.n_nan_mismatch == 2
    assert got.stats.n_inf_mismatch == 0
    assert got.min_atol_to_pass is None
    assert not got.profile.passes(Tolerance(1e300, 1e300))
    assert "Mismatched elements: 2 / 4 (50%)" in got.message
    assert "2 NaN" in got.message


def test_one_sided_inf_fails_and_is_counted_apart():
    ref = np.array([1.0, np.inf, 3.0], dtype=np.float32)
    onnx = np.array([1.0, 5.0, -np.inf], dtype=np.float32)
    got = _compare(ref, onnx, tol=Tolerance(1e30, 0.0))
    assert got.status is Status.FAIL
    assert got.stats.n_inf_mismatch == 2
    assert got.stats.n_nan_mismatch == 0
    assert got.n_mismatch == 2


def test_opposite_infs_mismatch():
    ref = np.array([np.inf, -np.inf, 0.0])
    onnx = np.array([-np.inf, np.inf, 0.0])
    got = _compare(ref, onnx, tol=Tolerance(1e30, 1e30))
    assert got.status is Status.FAIL
    assert got.stats.n_inf_mismatch == 2
    assert got.n_mismatch == 2


def test_equal_signed_infs_are_equal():
    ref = np.array([np.inf, -np.inf, 1.0], dtype=np.float32)
    onnx = np.array([np.inf, -np.inf, 1.0], dtype=np.float32)
    got = _compare(ref, onnx, tol=Tolerance(0.0, 0.0))
    assert got.status is Status.PASS
    assert got.stats.n_inf_mismatch == 0


def test_inf_against_nan_counts_as_a_nan_mismatch():
    got = _compare(np.array([np.inf]), np.array([np.nan]))
    assert (got.stats.n_nan_mismatch, got.stats.n_inf_mismatch, got.n_mismatch) == (1, 0, 1)


def test_statistics_cover_finite_pairs_only():
    ref, onnx = _planted(shape=(2000,), seed=9)
    ref = ref.astype(np.float64)
    onnx = onnx.astype(np.float64)
    ref[[5, 600, 1500]] = [np.nan, np.inf, 1.0]
    onnx[[5, 600, 1500, 1700]] = [np.nan, np.inf, np.nan, -np.inf]
    got = _compare(ref, onnx, chunk=128)
    want = _plain(ref, onnx, TOL)
    assert got.stats.max_abs == want["max_abs"]
    assert got.stats.worst_index == want["worst_index"]
    assert got.stats.p99_abs == want["p99_abs"]
    assert got.stats.mean_abs == pytest.approx(want["mean_abs"], rel=1e-12)
    assert got.stats.n_nan_mismatch == 1 and got.stats.n_inf_mismatch == 1
    assert got.n_mismatch == want["n_mismatch_finite"] + 2


def test_all_nonfinite_output_has_no_statistics():
    got = _compare(np.full(4, np.nan), np.ones(4))
    assert got.status is Status.FAIL
    assert got.stats.max_abs is None and got.stats.p99_abs is None
    assert got.stats.n_nan_mismatch == 4


# -- statuses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "onnx", "side"),
    [
        (None, np.ones(3), "torch side"),
        (np.ones(3), None, "ONNX side"),
        (None, None, "both sides"),
    ],
)
def test_missing_output_says_which_side_lacks_it(ref, onnx, side):
    got = _compare(ref, onnx, name="logits")
    assert got.status is Status.MISSING
    assert side in got.message and "logits" in got.message
    assert got.stats is None


def test_shape_mismatch_has_a_message_like_optimums_and_no_statistics():
    got = _compare(np.zeros((2, 8), np.float32), np.zeros((2, 7), np.float32))
    assert got.status is Status.SHAPE_MISMATCH
    assert got.message == "shape (2, 8) vs ONNX (2, 7)"
    assert got.stats is None and got.profile is None
    assert (got.ref_shape, got.onnx_shape) == ((2, 8), (2, 7))


def test_dtype_mismatch_still_computes_statistics():
    ref = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    onnx = np.array([1.0, 2.5, 3.0], dtype=np.float16)
    got = _compare(ref, onnx)
    assert got.status is Status.DTYPE_MISMATCH
    assert "float32" in got.message and "float16" in got.message
    assert got.stats.max_abs == 0.5
    assert got.n_mismatch == 1
    assert (got.ref_dtype, got.onnx_dtype) == ("float32", "float16")


def test_bool_and_int_outputs_compare_as_numbers():
    got = _compare(np.array([True, False, True]), np.array([True, True, True]))
    assert got.status is Status.FAIL
    assert got.stats.max_abs == 1.0 and got.n_mismatch == 1
    ints = _compare(np.array([3, -4, 10], np.int64), np.array([3, -4, 12], np.int64))
    assert ints.stats.max_abs == 2.0
    assert ints.stats.max_rel == 0.2
    assert ints.stats.worst_index == (2,)


def test_string_outputs_are_compared_for_equality():
    same = _compare(np.array(["a", "b"]), np.array(["a", "b"]))
    assert same.status is Status.PASS and same.stats is None
    differ = _compare(np.array(["a", "b", "c"]), np.array(["a", "x", "c"]))
    assert differ.status is Status.FAIL and differ.n_mismatch == 1
    assert differ.message == "Mismatched elements: 1 / 3 (33.3%)"


def test_empty_tensor_passes_with_no_statistics():
    got = _compare(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    assert got.status is Status.PASS
    assert got.n_elements == 0 and got.n_mismatch == 0
    assert got.stats.max_abs is None and got.stats.n_nan_mismatch == 0
    assert got.profile.passes(Tolerance(0.0, 0.0))
    assert got.mismatch_fraction == 0.0


def test_identical_outputs_pass_at_zero_tolerance():
    ref, _ = _planted()
    got = _compare(ref, ref.copy(), tol=Tolerance(0.0, 0.0), chunk=1000)
    assert got.status is Status.PASS and got.message == ""
    assert got.stats.snr_db == math.inf
    assert got.stats.cosine == pytest.approx(1.0, abs=1e-15)
    assert got.min_atol_to_pass == 0.0


def test_cosine_is_none_for_a_zero_reference():
    got = _compare(np.zeros(5), np.ones(5))
    assert got.stats.cosine is None
    assert got.stats.snr_db == -math.inf


# -- the pass rule -------------------------------------------------------------------------


def test_pass_rule_boundary_is_inclusive():
    ref = np.array([1.0, 2.0])
    onnx = np.array([1.5, 2.0])
    assert _compare(ref, onnx, tol=Tolerance(0.5, 0.0)).status is Status.PASS
    assert _compare(ref, onnx, tol=Tolerance(0.25, 0.25)).status is Status.PASS
    assert _compare(ref, onnx, tol=Tolerance(0.25, 0.2)).status is Status.FAIL


def test_rtol_scales_with_the_reference_not_the_onnx_value():
    ref = np.array([100.0, 1.0])
    onnx = np.array([101.0, 0.0])  # |d| = 1 both; ref decides the allowance
    got = _compare(ref, onnx, tol=Tolerance(0.0, 0.01))
    assert got.n_mismatch == 1
    assert got.min_atol_to_pass == 1.0 - 0.01 * 1.0  # the small ref needs the larger atol


def test_fail_message_uses_numpy_testing_wording():
    ref = np.zeros(1000, np.float32)
    onnx = ref.copy()
    onnx[[1, 2, 3]] = [0.5, 0.25, 0.125]
    ref[1] = 1.0
    onnx[1] = 1.5
    msg = _compare(ref, onnx).message
    lines = msg.splitlines()
    assert lines[0] == "Mismatched elements: 3 / 1000 (0.3%)"
    assert lines[1] == "Max absolute difference: 0.5"
    assert lines[2] == "Max relative difference: 0.5"


# -- inputs ---------------------------------------------------------------------------------


def test_memmap_inputs_give_the_same_result(tmp_path):
    ref, onnx = _planted(shape=(40, 250), seed=11)
    paths = []
    for label, arr in (("ref", ref), ("onnx", onnx)):
        mm = np.lib.format.open_memmap(
            tmp_path / f"{label}.npy", mode="w+", dtype=arr.dtype, shape=arr.shape
        )
        mm[...] = arr
        mm.flush()
        paths.append(tmp_path / f"{label}.npy")
    mref, monnx = (np.load(p, mmap_mode="r") for p in paths)
    got = _compare(mref, monnx, chunk=999)
    want = _compare(ref, onnx, chunk=999)
    assert got.stats == want.stats
    assert got.n_mismatch == want.n_mismatch


def test_non_contiguous_inputs_are_compared_in_logical_order():
    ref, onnx = _planted(shape=(60, 70), seed=12)
    got = _compare(ref.T, onnx.T, chunk=500)
    want = _compare(np.ascontiguousarray(ref.T), np.ascontiguousarray(onnx.T), chunk=500)
    assert got.stats == want.stats
    assert got.stats.worst_index == want.stats.worst_index


def test_float16_outputs_are_judged_in_float64():
    ref = np.array([1.0, 2.0], np.float16)
    onnx = np.array([1.0009765625, 2.0], np.float16)  # one float16 ulp at 1.0
    got = _compare(ref, onnx, tol=Tolerance(1e-3, 0.0))
    assert got.stats.max_abs == 0.0009765625
    assert got.status is Status.PASS


def test_inputs_are_not_modified():
    ref, onnx = _planted(seed=13, dtype=np.float64)
    before = (ref.copy(), onnx.copy())
    _compare(ref, onnx, chunk=100)
    assert np.array_equal(ref, before[0]) and np.array_equal(onnx, before[1])


def test_extra_memory_is_bounded_independent_of_output_size():
    rng = np.random.default_rng(0)
    n = 4_000_000  # 16 MB per side in float32; a float64 copy of one side would be 32 MB
    ref = rng.standard_normal(n, dtype=np.float32)
    onnx = ref + np.float32(1e-6)
    _compare(ref[:100], onnx[:100])  # the compiled loop loaded once per process, not per output
    tracemalloc.start()
    try:
        _compare(ref, onnx)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 * 2**20, f"peak extra memory {peak / 2**20:.1f} MiB"


def test_int64_outputs_are_compared_exactly_in_integers():
    # 2**60 and 2**60 + 1 are the same float64: compared as floats they passed at atol 0
    ref = np.array([2**60, 5], np.int64)
    onnx = np.array([2**60 + 1, 5], np.int64)
    got = _compare(ref, onnx, tol=Tolerance(0.0, 0.0))
    assert got.status is Status.FAIL and got.n_mismatch == 1
    assert got.stats.max_abs == 1.0 and got.stats.worst_index == (0,)
    assert got.min_atol_to_pass == 1.0
    assert not got.rejudge(Tolerance(0.0, 0.0)).status.passed
    assert got.rejudge(Tolerance(1.0, 0.0)).status.passed


def test_integer_pass_rule_with_rtol_is_decided_without_rounding():
    # |d| = 2**62 + 1 against rtol*|ref| = 2**62 - 0.5: fails. In float64 both round to 2**62
    # and it passed.
    ref = np.array([2**63 - 1, -(2**63)], np.int64)
    onnx = np.array([2**62 - 2, -(2**62) - 1], np.int64)
    assert [abs(int(o) - int(r)) for r, o in zip(ref, onnx, strict=True)] == [2**62 + 1, 2**62 - 1]
    got = _compare(ref, onnx, tol=Tolerance(0.0, 0.5))
    assert got.n_mismatch == 1 and got.status is Status.FAIL
    assert not got.rejudge(Tolerance(0.0, 0.5)).status.passed
    at_edge = _compare(ref[1:], np.array([-(2**62)], np.int64), tol=Tolerance(0.0, 0.5))
    assert at_edge.status is Status.PASS  # |d| = 2**62 = rtol*|ref| exactly: inclusive


def test_uint64_and_bool_outputs_are_exact_too():
    big = np.array([2**64 - 1, 0], np.uint64)
    got = _compare(big, np.array([2**64 - 2, 0], np.uint64), tol=Tolerance(0.0, 0.0))
    assert got.n_mismatch == 1 and got.stats.max_abs == 1.0
    mixed = _compare(big, np.array([-1, 0], np.int64), tol=Tolerance(0.0, 0.0))
    assert mixed.status is Status.DTYPE_MISMATCH and mixed.n_mismatch == 1
    assert mixed.stats.max_abs == float(2**64)
    flags = _compare(np.array([True, False]), np.array([True, True]), tol=Tolerance(0.9, 0.0))
    assert flags.n_mismatch == 1


def test_max_rel_is_exact_when_errors_lie_on_a_concave_curve():
    # error = 1e-3 * sqrt(ref - 1) puts every point on the hull, which is then simplified:
    # max_rel read off the simplified hull was 0.000499999466 (exact: 0.000499999999999...)
    n = 2_000_000
    ref = np.linspace(1.0, 5.0, n)
    onnx = ref + 1e-3 * np.sqrt(ref - 1.0)
    got = _compare(ref, onnx, tol=Tolerance(1e-2, 0.0))
    exact = float(np.max(np.abs(onnx - ref) / np.abs(ref)))
    assert got.profile.hull_r.size <= 1024  # the regime where the hull is simplified
    assert got.stats.max_rel == exact
