"""Re-judging from the ErrorProfile alone: exact pass/fail and min atol, counts, storage.

Every answer of the profile is checked against a direct numpy judgement of the raw tensors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from parity.errors import UsageError
from parity.judge.compare import compare_outputs
from parity.judge.error_profile import ErrorProfile
from parity.results import Status, ValidationRun
from parity.tolerances import Tolerance, Tolerances

RUN_TOL = Tolerance(atol=1e-5, rtol=0.0)


def _data(kind: str, n: int = 40_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(n).astype(np.float32)
    if kind == "absolute":  # error independent of the value
        onnx = ref + rng.standard_normal(n).astype(np.float32) * np.float32(1e-5)
    elif kind == "relative":  # error proportional to the value
        onnx = ref * (1 + rng.standard_normal(n).astype(np.float32) * np.float32(1e-4))
    elif kind == "relu":  # many exact zeros on both sides
        ref = np.maximum(ref, 0)
        onnx = np.maximum(ref + rng.standard_normal(n).astype(np.float32) * np.float32(1e-5), 0)
    elif kind == "zeroed":  # an output the export zeroed: every point on the line d == |ref|
        onnx = np.zeros_like(ref)
    elif kind == "float16":
        onnx = ref.astype(np.float16).astype(np.float32)
    elif kind == "mixed":  # both kinds of error and a few big outliers
        onnx = ref * (1 + rng.standard_normal(n).astype(np.float32) * np.float32(1e-4))
        onnx += rng.standard_normal(n).astype(np.float32) * np.float32(1e-6)
        onnx[rng.choice(n, 7, replace=False)] += np.float32(0.3)
    else:
        raise ValueError(kind)
    return ref, onnx.astype(np.float32)


KINDS = ["absolute", "relative", "relu", "zeroed", "float16", "mixed"]


def _direct(ref: np.ndarray, onnx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = ref.astype(np.float64)
    return np.abs(onnx.astype(np.float64) - r), np.abs(r)


def _direct_count(d, r, atol, rtol) -> int:
    return int(np.count_nonzero(d > atol + rtol * r))


def _profile(ref, onnx, chunk=3000) -> ErrorProfile:
    return compare_outputs(
        ref, onnx, name="y", input_set=0, tolerance=RUN_TOL, chunk_elements=chunk
    ).profile


def _random_tolerances(d, r, count=300, seed=1):
    """Log-uniform tolerances around where this output's verdict flips."""
    rng = np.random.default_rng(seed)
    top = max(float(d.max()), 1e-12)
    atols = top * 10.0 ** rng.uniform(-4, 0.5, count)
    atols[::10] = 0.0
    rtols = 10.0 ** rng.uniform(-7, 0, count)
    rtols[::7] = 0.0
    return list(zip(atols.tolist(), rtols.tolist(), strict=True))


@pytest.mark.parametrize("kind", KINDS)
def test_passes_agrees_with_a_direct_judgement_for_random_tolerances(kind):
    ref, onnx = _data(kind)
    d, r = _direct(ref, onnx)
    profile = _profile(ref, onnx)
    for atol, rtol in _random_tolerances(d, r):
        want = _direct_count(d, r, atol, rtol) == 0
        assert profile.passes(Tolerance(atol, rtol)) == want, (atol, rtol)


@pytest.mark.parametrize("kind", KINDS)
def test_min_atol_is_the_exact_flip_point(kind):
    ref, onnx = _data(kind, seed=2)
    d, r = _direct(ref, onnx)
    profile = _profile(ref, onnx)
    for rtol in [0.0, 1e-7, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0, 10.0]:
        m = profile.min_atol(rtol)
        assert _direct_count(d, r, m, rtol) == 0, rtol
        want = max(0.0, float(np.max(d - rtol * r)))
        assert m == pytest.approx(want, rel=1e-12, abs=1e-300), rtol
        if m > 0:
            below = m - 1e-9 * m
            assert _direct_count(d, r, below, rtol) > 0, rtol
            assert not profile.passes(Tolerance(below, rtol))


@pytest.mark.parametrize("kind", KINDS)
def test_counts_are_exact_at_histogram_edges_when_rtol_is_zero(kind):
    ref, onnx = _data(kind, seed=3)
    d, r = _direct(ref, onnx)
    profile = _profile(ref, onnx)
    edges, _ = profile.abs_error_histogram()
    for atol in edges[:: max(1, edges.size // 40)]:
        tol = Tolerance(float(atol), 0.0)
        assert profile.n_mismatch(tol) == _direct_count(d, r, atol, 0.0), atol
        lo, hi = profile.n_mismatch_bounds(tol)
        assert lo == hi


@pytest.mark.parametrize("kind", KINDS)
def test_counts_are_exact_above_the_kept_largest_errors_for_any_rtol(kind):
    ref, onnx = _data(kind, seed=4)
    d, r = _direct(ref, onnx)
    profile = _profile(ref, onnx)
    cutoff = float(profile.top_d[-1])
    rng = np.random.default_rng(0)
    for _ in range(100):
        atol = cutoff * 10.0 ** rng.uniform(0, 0.5)
        rtol = 10.0 ** rng.uniform(-6, 0)
        assert profile.n_mismatch(Tolerance(atol, rtol)) == _direct_count(d, r, atol, rtol)


@pytest.mark.parametrize("kind", KINDS)
def test_estimated_counts_lie_within_exact_bounds_and_near_the_truth(kind):
    ref, onnx = _data(kind, seed=5)
    d, r = _direct(ref, onnx)
    profile = _profile(ref, onnx)
    for atol, rtol in _random_tolerances(d, r, count=200, seed=6):
        tol = Tolerance(atol, rtol)
        truth = _direct_count(d, r, atol, rtol)
        lo, hi = profile.n_mismatch_bounds(tol)
        got = profile.n_mismatch(tol)
        assert lo <= truth <= hi, (atol, rtol)
        assert lo <= got <= hi
        # documented accuracy: a 2048-pair sample, i.e. within a few % of the element count
        assert abs(got - truth) <= 0.04 * d.size, (atol, rtol, got, truth)


def test_count_at_the_runs_own_tolerance_is_exact():
    ref, onnx = _data("mixed", seed=7)
    d, r = _direct(ref, onnx)
    tol = Tolerance(3e-6, 2e-5)
    c = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol, chunk_elements=999)
    assert c.n_mismatch == _direct_count(d, r, tol.atol, tol.rtol)
    assert c.profile.n_mismatch(tol) == c.n_mismatch


def test_small_outputs_are_re_judged_exactly_everywhere():
    ref, onnx = _data("mixed", n=400, seed=8)
    d, r = _direct(ref, onnx)
    profile = _profile(ref, onnx, chunk=50)
    for atol, rtol in _random_tolerances(d, r, count=300, seed=9):
        assert profile.n_mismatch(Tolerance(atol, rtol)) == _direct_count(d, r, atol, rtol)


def test_one_sided_nan_never_passes_and_has_no_min_atol():
    ref, onnx = _data("absolute", n=5000)
    onnx[17] = np.nan
    profile = _profile(ref, onnx, chunk=1000)
    assert profile.min_atol(0.0) is None
    assert not profile.passes(Tolerance(1e30, 1e30))
    assert profile.n_mismatch(Tolerance(1e30, 0.0)) == 1


def test_mismatch_curve_falls_with_atol_and_matches_the_counts():
    ref, onnx = _data("mixed", seed=10)
    profile = _profile(ref, onnx)
    atols = np.logspace(-9, 0, 60)
    for rtol in (0.0, 1e-4):
        curve = profile.mismatch_curve(atols, rtol)
        assert curve.shape == atols.shape
        assert np.all(np.diff(curve) <= 1e-12)
        assert curve[-1] == 0.0 and curve[0] > 0.25
        want = [profile.n_mismatch(Tolerance(a, rtol)) / ref.size for a in atols[::7]]
        assert np.allclose(curve[::7], want)


def test_abs_error_histogram_counts_every_nonzero_error_in_its_bin():
    ref, onnx = _data("mixed", seed=11)
    d, _ = _direct(ref, onnx)
    profile = _profile(ref, onnx)
    edges, counts = profile.abs_error_histogram()
    assert edges.size == counts.size + 1 and np.all(np.diff(edges) > 0)
    assert np.all(edges[1:] / edges[:-1] < 1.13)  # eight bins per octave
    nz = d[d > 0]
    assert counts.sum() == nz.size
    assert profile.n_zero_error == np.count_nonzero(d == 0)
    # bins are (edges[i], edges[i+1]]
    want = np.diff(np.searchsorted(np.sort(nz), edges, side="right"))
    assert np.array_equal(counts, want)


def test_profile_round_trips_through_npz_without_pickle(tmp_path):
    ref, onnx = _data("mixed", seed=12)
    onnx[3] = np.inf
    profile = _profile(ref, onnx)
    path = tmp_path / "profile.npz"
    np.savez(path, **profile.to_arrays())
    with np.load(path, allow_pickle=False) as data:
        back = ErrorProfile.from_arrays(dict(data))
    for a, b in zip(profile.to_arrays().values(), back.to_arrays().values(), strict=True):
        assert np.array_equal(a, b)
    for atol, rtol in [(1e-6, 0.0), (1e-5, 1e-4), (0.5, 0.0), (1e-3, 0.1)]:
        tol = Tolerance(atol, rtol)
        assert back.n_mismatch(tol) == profile.n_mismatch(tol)
        assert back.passes(tol) == profile.passes(tol)
    assert back.min_atol(0.0) is None


def test_profile_stays_small_for_a_large_output():
    rng = np.random.default_rng(13)
    ref = rng.standard_normal(2_000_000).astype(np.float32)
    onnx = ref * (1 + rng.standard_normal(ref.size).astype(np.float32) * np.float32(1e-5))
    profile = _profile(ref, onnx, chunk=65536)
    size = sum(a.nbytes for a in profile.to_arrays().values())
    assert size < 64 * 1024, size


def _comparison(kind="mixed", tol=RUN_TOL):
    ref, onnx = _data(kind, n=20_000, seed=14)
    return compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol), ref, onnx


def test_output_comparison_rejudge_flips_fail_to_pass_and_back():
    c, ref, onnx = _comparison()
    d, r = _direct(ref, onnx)
    assert c.status is Status.FAIL
    loose = c.rejudge(Tolerance(1.0, 0.0))
    assert loose.status is Status.PASS and loose.message == "" and loose.n_mismatch == 0
    tight = loose.rejudge(Tolerance(1e-7, 0.0))
    assert tight.status is Status.FAIL
    assert tight.n_mismatch == _direct_count(d, r, 1e-7, 0.0) or tight.n_mismatch > 0
    assert tight.message.startswith(f"Mismatched elements: {tight.n_mismatch} / {ref.size} (")
    assert "Max absolute difference" in tight.message
    assert tight.stats == c.stats  # statistics do not depend on the tolerance


def test_rejudge_at_the_min_atol_passes():
    c, _, _ = _comparison()
    m = c.min_atol_to_pass
    assert c.rejudge(Tolerance(m, 0.0)).status is Status.PASS
    assert c.rejudge(Tolerance(m * (1 - 1e-9), 0.0)).status is Status.FAIL


def test_rejudge_leaves_shape_and_missing_statuses_alone():
    c = compare_outputs(np.zeros(3), np.zeros(4), name="y", input_set=0, tolerance=RUN_TOL)
    assert c.rejudge(Tolerance(1.0, 1.0)).status is Status.SHAPE_MISMATCH


def test_validation_run_rejudge_uses_per_output_tolerances():
    a, _, _ = _comparison("mixed")
    b = compare_outputs(np.ones(10), np.ones(10) + 1e-3, name="z", input_set=0, tolerance=RUN_TOL)
    run = ValidationRun.from_rows(
        model="m",
        onnx="o",
        signature=None,
        tolerances=Tolerances(),
        environment={},
        input_sets=(),
        outputs=(a, b),
    )
    assert run.verdict == "fail"
    loose = Tolerances(default=Tolerance(1.0, 0.0), outputs={"z": Tolerance(1e-4, 0.0)})
    again = run.rejudge(loose)
    assert again.comparison(0, "y").status is Status.PASS
    assert again.comparison(0, "z").status is Status.FAIL
    assert math.isclose(again.comparison(0, "z").mismatch_fraction, 1.0)
    with pytest.raises(UsageError, match=r"'zz'.*'y', 'z'"):  # a typo is refused, not ignored
        run.rejudge(Tolerances(outputs={"zz": Tolerance(1.0, 0.0)}))


def test_errors_on_a_concave_curve_keep_the_profile_small_and_min_atol_within_its_slack():
    # every point is a vertex of the exact hull: the profile must simplify it, and say by how much
    rng = np.random.default_rng(15)
    ref = np.abs(rng.standard_normal(300_000))
    onnx = ref + np.sqrt(ref) * 1e-3
    d, r = _direct(ref, onnx)
    profile = _profile(ref, onnx, chunk=8192)
    assert profile.hull_r.size <= 2048
    assert sum(a.nbytes for a in profile.to_arrays().values()) < 96 * 1024
    assert 0 < profile.hull_slack < 1e-4 * d.max()
    for rtol in [0.0, 1e-4, 1e-3, 1e-2, 0.1, 1.0]:
        exact = max(0.0, float(np.max(d - rtol * r)))
        m = profile.min_atol(rtol)
        assert exact - profile.hull_slack <= m <= exact, rtol
        assert profile.passes(Tolerance(exact + profile.hull_slack, rtol))
        if m > 0:
            assert not profile.passes(Tolerance(m * (1 - 1e-9), rtol))


def test_pooled_mismatch_curve_is_the_judged_elements_mismatching_over_every_set():
    """parity.judge.suggest.pooled_mismatch_curve (the Tolerances page's curve): over input
    sets of different sizes, one with excluded elements, against a direct numpy count."""
    from parity.judge.suggest import pooled_mismatch_curve

    sets = [_data("mixed", n=400, seed=11), _data("relative", n=150, seed=12)]
    exclude = np.zeros(150, dtype=bool)
    exclude[:40] = True  # padding: never judged, never counted
    comparisons = tuple(
        compare_outputs(
            ref, onnx, name="y", input_set=k, tolerance=RUN_TOL, chunk_elements=50, exclude=ex
        )
        for k, ((ref, onnx), ex) in enumerate(zip(sets, (None, exclude), strict=True))
    ) + (compare_outputs(np.ones(10), np.zeros(10), name="z", input_set=0, tolerance=RUN_TOL),)
    run = ValidationRun.from_rows(
        model="m",
        onnx="o",
        signature=None,
        tolerances=Tolerances(),
        environment={},
        input_sets=(),
        outputs=comparisons,
    )
    judged = [_direct(*sets[0]), tuple(a[~exclude] for a in _direct(*sets[1]))]
    atols = np.logspace(-9, 0, 19)
    for rtol in (0.0, 1e-4):
        curve = pooled_mismatch_curve(run, "y", atols, rtol)
        want = [sum(_direct_count(d, r, a, rtol) for d, r in judged) / (400 + 110) for a in atols]
        np.testing.assert_allclose(curve, want, rtol=0, atol=1e-12)
    assert pooled_mismatch_curve(run, "z", atols, 0.0)[0] == 1.0  # |1 - 0| > 1e-9
    assert pooled_mismatch_curve(run, "absent", atols, 0.0) is None
