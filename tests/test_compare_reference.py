"""The chunked pass against a whole-array numpy reference, on awkward random data.

The pass takes shortcuts (a two-comparison prefilter for max_rel and the hull, the histogram
binned up to its top bin, the cast fused into the subtraction); this holds every statistic,
count and profile answer to the obvious whole-array computation, in one chunk and in many,
with NaN/Inf on either side, zeros in the reference, tied errors, float16/float64 and ints.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from parity.judge.compare import compare_outputs
from parity.judge.error_profile import hist_edge
from parity.judge.exact_ints import exact_diff, is_integer_pair
from parity.tolerances import Tolerance

KINDS = [
    "noise32",
    "relative",
    "concave",
    "relu",
    "ties",
    "nonfinite",
    "float16",
    "float64",
    "ints",
    "exact",
    "exact_blocks",
    "ulp32",
]


def _data(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n)
    if kind == "noise32":
        return a.astype(np.float32), (a + rng.standard_normal(n) * 3e-6).astype(np.float32)
    if kind == "relative":
        return a.astype(np.float32), (a * (1 + rng.standard_normal(n) * 1e-4)).astype(np.float32)
    if kind == "concave":  # errors grow like sqrt|ref|: a curved hull
        ref = np.abs(a) * 10
        return ref, ref + np.sqrt(ref) * 1e-3 * rng.choice([-1.0, 1.0], n)
    if kind == "relu":  # half the reference is zero
        ref = np.maximum(a, 0).astype(np.float32)
        return ref, np.maximum(a + rng.standard_normal(n) * 1e-3, 0).astype(np.float32)
    if kind == "ties":  # few distinct errors, many zeros
        ref = np.round(a, 1)
        return ref, ref + rng.choice([0.0, 0.5, 1.0], n)
    if kind == "nonfinite":
        ref, onnx = a.copy(), a + rng.standard_normal(n) * 1e-3
        for side in (ref, onnx):
            for value in (np.nan, np.inf, -np.inf):
                side[rng.integers(0, n, max(1, n // 60))] = value
        ref[rng.integers(0, n, max(1, n // 20))] = 0.0
        return ref, onnx
    if kind in ("exact", "exact_blocks"):
        return _exact(kind, n, rng)
    if kind == "ulp32":  # a few exact float32 ulps: each histogram bin holds one value
        ref = (rng.uniform(1.0, 2.0, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
        ulps = rng.integers(-2, 3, n).astype(np.float32)
        return ref, ref + ulps * np.spacing(np.abs(ref))
    if kind == "float16":
        return a.astype(np.float16), (a + rng.standard_normal(n) * 1e-3).astype(np.float16)
    if kind == "float64":
        return a, a + rng.standard_normal(n) * 1e-9 * np.abs(a)
    ref = rng.integers(-100, 100, n)
    return ref, ref + rng.integers(-2, 3, n)


def _exact(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Outputs equal over whole blocks of the compiled loop (its exact-block path) and not
    over others. "exact": equal but for as many differences as lie above numpy's p99 rank
    (so p99 falls between the largest zero and the smallest difference: every zero must be
    counted); "exact_blocks": stretches of noise between equal stretches. Both: zeros in the
    reference, NaN and Inf on both sides, and a new smallest |ref| in an equal stretch."""
    ref = rng.standard_normal(n).astype(np.float32)
    ref[rng.random(n) < 0.3] = 0.0
    onnx = ref.copy()
    at = n // 2 + 17  # in an equal stretch of both kinds (see `noisy` below)
    ref[at] = onnx[at] = np.float32(1e-30)
    ref[n // 3] = onnx[n // 3] = np.inf
    ref[n // 3 + 1] = onnx[n // 3 + 1] = np.nan
    if kind == "exact":
        m = n - 2  # finite pairs
        above = (m - 1) - math.floor(0.99 * (m - 1))
        where = rng.choice(np.flatnonzero(np.isfinite(ref) & (np.arange(n) != at)), above, False)
        onnx[where] += np.float32(1e-3) * (1 + rng.random(above)).astype(np.float32)
    else:
        noisy = (np.arange(n) // 9000) % 3 == 0
        noisy[n // 3 : n // 3 + 2] = False
        onnx[noisy] += (rng.standard_normal(int(noisy.sum())) * 1e-4).astype(np.float32)
    return ref, onnx


def _reference(ref: np.ndarray, onnx: np.ndarray, tol: Tolerance) -> dict:
    """Every number, the obvious way over the whole array."""
    with np.errstate(invalid="ignore"):
        return _reference_numbers(ref, onnx, tol)


def _reference_numbers(ref: np.ndarray, onnx: np.ndarray, tol: Tolerance) -> dict:
    r, o = ref.astype(np.float64), onnx.astype(np.float64)
    if is_integer_pair(ref, onnx):
        mag, _, absref = exact_diff(ref, onnx)
        d_all = mag.astype(np.float64)
        fin = np.ones(r.shape, dtype=bool)
        fails = int(np.count_nonzero(d_all > tol.atol + tol.rtol * absref.astype(np.float64)))
    else:
        fin = np.isfinite(r) & np.isfinite(o)
        d_all = np.where(fin, np.abs(o - r), 0.0)
        fails = int(np.count_nonzero(fin & (d_all > tol.atol + tol.rtol * np.abs(r))))
    rn, on = np.isnan(r), np.isnan(o)
    ri, oi = np.isinf(r), np.isinf(o)
    n_nan = int(np.count_nonzero(rn != on))
    n_inf = int(np.count_nonzero((ri & ~oi & ~on) | (oi & ~ri & ~rn) | (ri & oi & (r != o))))
    d, rf = d_all[fin], np.abs(r[fin])
    w = int(np.flatnonzero(fin)[np.argmax(d)])
    nz = rf != 0
    bits = d.view(np.int64)
    bins = np.where(bits == 0, 0, (bits - 1) // 2**49 + 1)
    return {
        "d": d,
        "r": rf,
        "max_abs": float(d.max()),
        "worst": w,
        "max_rel": float((d[nz] / rf[nz]).max()) if nz.any() else None,
        "mean_abs": float(d.mean()),
        "rms": math.sqrt(float(np.mean(d * d))),
        "p99": float(np.percentile(d, 99)),
        "n_mismatch": fails + n_nan + n_inf,
        "n_nan": n_nan,
        "n_inf": n_inf,
        "zero_max": float(d[~nz].max()) if (~nz).any() else 0.0,
        "hist": np.bincount(bins),
    }


CASES = [(kind, n, chunk) for kind in KINDS for n, chunk in [(50_000, 1000), (70_000, 65536)]]


@pytest.mark.parametrize(("kind", "n", "chunk"), CASES)
@pytest.mark.parametrize("tol", [Tolerance(1e-5, 0.0), Tolerance(1e-4, 1e-3)])
def test_chunked_pass_matches_a_whole_array_numpy_reference(kind, n, chunk, tol):
    ref, onnx = _data(kind, n, seed=len(kind) + n)
    got = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol, chunk_elements=chunk)
    want = _reference(ref, onnx, tol)
    s, profile = got.stats, got.profile
    assert s.max_abs == want["max_abs"]
    assert s.worst_index == (want["worst"],)
    assert s.max_rel == want["max_rel"]
    assert s.mean_abs == pytest.approx(want["mean_abs"], rel=1e-12)
    assert s.rms == pytest.approx(want["rms"], rel=1e-12)
    assert s.p99_abs == want["p99"]
    assert (s.n_nan_mismatch, s.n_inf_mismatch) == (want["n_nan"], want["n_inf"])
    assert got.n_mismatch == want["n_mismatch"]
    # the profile: histogram exact, ref == 0 maximum exact, min_atol within its slack
    hist = want["hist"]
    assert np.array_equal(profile.hist_bins, np.flatnonzero(hist))
    assert np.array_equal(profile.hist_counts, hist[hist > 0])
    assert profile.zero_ref_max == want["zero_max"]
    d, r = want["d"], want["r"]
    nonfinite = want["n_nan"] + want["n_inf"]
    for rtol in [0.0, *np.geomspace(1e-6, 1e6, 25)]:  # large rtol: the hull's left end
        exact = max(0.0, float(np.max(d - rtol * r)))
        if nonfinite:
            assert profile.min_atol(rtol) is None
        else:
            assert exact - profile.hull_slack <= profile.min_atol(rtol) <= exact * (1 + 1e-12)
    # no point above the hull's envelope by more than the slack (nothing missed by the pass)
    pos = r > 0
    if pos.any():
        hr, hd = profile.hull_r, profile.hull_d
        assert hr[0] == r[pos].min()
        envelope = np.interp(r[pos], hr, hd)
        assert np.all(d[pos] <= envelope + profile.hull_slack + 1e-15 * hd[-1])
    # counts: exact at histogram edges (rtol 0) and above the kept largest errors (any rtol)
    for j in np.flatnonzero(hist)[:: max(1, hist.size // 40)]:
        atol = float(hist_edge(int(j)))
        count = profile.n_mismatch(Tolerance(atol, 0.0))
        assert count == int(np.count_nonzero(d > atol)) + nonfinite
    if profile.top_d.size:
        atol = float(profile.top_d[-1])
        for rtol in (0.0, 1e-3, 0.5):
            count = profile.n_mismatch(Tolerance(atol, rtol))
            assert count == int(np.count_nonzero(d > atol + rtol * r)) + nonfinite


def test_the_fast_path_sees_a_new_largest_relative_error_late():
    """A record max_rel and a new hull vertex in the last chunk, after the prefilter is set."""
    ref, onnx = _data("noise32", 200_000, seed=3)
    ref[-5] = np.float32(1e-9)
    onnx[-5] = np.float32(1e-9) + np.float32(2e-6)
    got = compare_outputs(
        ref, onnx, name="y", input_set=0, tolerance=Tolerance(1e-5, 0.0), chunk_elements=4096
    )
    want = _reference(ref, onnx, Tolerance(1e-5, 0.0))
    assert got.stats.max_rel == want["max_rel"]
    assert got.profile.hull_r[0] == np.float64(np.float32(1e-9))
    exact = float(np.max(want["d"] - 10.0 * want["r"]))
    assert exact - got.profile.hull_slack <= got.profile.min_atol(10.0) <= exact


@pytest.mark.parametrize("late", ["smallest_ref", "zero_ref", "relative"])
def test_relu_outputs_see_late_points_left_of_the_hull(late):
    """Half the reference is 0 (the fast path narrows its left part, see _Pass._left_bar):
    a new smallest |ref| > 0, a large error at ref == 0, or a new max_rel in the last chunk."""
    ref, onnx = _data("relu", 200_000, seed=5)
    if late == "smallest_ref":
        ref[-7], onnx[-7] = np.float32(1e-12), np.float32(3e-12)
    elif late == "zero_ref":  # every ref == 0 exact until a tiny error in the last chunk
        onnx[ref == 0] = 0.0
        ref[-3], onnx[-3] = np.float32(0.0), np.float32(1e-20)
    else:
        ref[-9] = np.float32(1e-3)
        onnx[-9] = ref[-9] + np.float32(5e-4)
    tol = Tolerance(1e-5, 0.0)
    got = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol, chunk_elements=4096)
    want = _reference(ref, onnx, tol)
    assert got.stats.max_rel == want["max_rel"]
    assert got.profile.zero_ref_max == want["zero_max"]
    d, r = want["d"], want["r"]
    assert got.profile.hull_r[0] == r[r > 0].min()
    for rtol in (0.0, 1e-2, 1e3, 1e9):
        exact = max(0.0, float(np.max(d - rtol * r)))
        assert exact - got.profile.hull_slack <= got.profile.min_atol(rtol) <= exact * (1 + 1e-12)


def test_blocks_with_nan_or_inf_are_summed_over_their_finite_pairs_only():
    """The compiled loop sums whole blocks at once and does a block holding NaN/Inf again
    element by element: the sums, counts and worst position over blocks of both kinds."""
    from parity.judge.compare_kernel import BLOCK

    ref, onnx = _data("noise32", 5 * BLOCK + 100, seed=11)
    ref[BLOCK + 3], onnx[3 * BLOCK + 5] = np.nan, np.inf  # two blocks of five
    onnx[3 * BLOCK + 9] = onnx[3 * BLOCK + 9] + np.float32(0.5)  # the worst, in such a block
    tol = Tolerance(1e-5, 0.0)
    got = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol)
    want = _reference(ref, onnx, tol)
    assert got.stats.worst_index == (3 * BLOCK + 9,) == (want["worst"],)
    assert (got.stats.n_nan_mismatch, got.stats.n_inf_mismatch) == (1, 1)
    assert got.n_mismatch == want["n_mismatch"]
    assert got.stats.mean_abs == pytest.approx(want["mean_abs"], rel=1e-12)
    assert got.stats.rms == pytest.approx(want["rms"], rel=1e-12)
    fin = np.isfinite(ref) & np.isfinite(onnx)
    r, o = ref[fin].astype(np.float64), onnx[fin].astype(np.float64)
    cosine = float(np.dot(r, o) / math.sqrt(np.dot(r, r) * np.dot(o, o)))
    assert got.stats.cosine == pytest.approx(cosine, rel=1e-12)


def test_finite_float64_values_whose_difference_overflows_are_an_infinite_error():
    """1e308 against -1e308: both finite, the float64 difference is inf (as numpy's)."""
    ref = np.zeros(10)
    onnx = np.zeros(10)
    ref[4], onnx[4] = 1e308, -1e308
    got = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=Tolerance(1e-5, 0.0))
    assert got.stats.max_abs == math.inf and got.stats.worst_index == (4,)
    assert got.n_mismatch == 1 and got.stats.n_inf_mismatch == 0


def test_p99_when_errors_pile_up_in_one_bin_past_the_candidate_buffer():
    """A third of the errors about 1.0 (a few values): more than the loop's p99 buffer holds
    above any histogram edge, so tp becomes a data value whose ties are counted (not kept)."""
    ref, onnx = _data("ties", 300_000, seed=2)
    tol = Tolerance(1e-5, 0.0)
    got = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol)
    want = _reference(ref, onnx, tol)
    assert got.stats.p99_abs == want["p99"]
    assert got.n_mismatch == want["n_mismatch"]
    assert np.array_equal(got.profile.top_d, np.sort(want["d"])[::-1][:512])


def test_max_rel_on_a_line_then_just_above_it():
    """An all-zero ONNX output puts every point on the line d = |ref| (max_rel 1, which the
    loop does not re-divide); one point a float32 ulp above it in the last chunk is seen."""
    ref = _data("noise32", 200_000, seed=4)[0]
    onnx = np.zeros_like(ref)
    tol = Tolerance(1e-5, 0.0)
    on_line = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol)
    assert on_line.stats.max_rel == 1.0 == _reference(ref, onnx, tol)["max_rel"]
    onnx[-5] = -ref[-5] * np.float32(2.0**-23)
    above = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol)
    assert above.stats.max_rel == _reference(ref, onnx, tol)["max_rel"] > 1.0


def test_a_block_of_nan_on_both_sides_then_exact_values():
    """No finite pair in the first block, only exact ones after it: the worst is the first
    finite pair (error 0), as argmax over the finite errors says."""
    from parity.judge.compare_kernel import BLOCK

    ref = np.concatenate([np.full(BLOCK + 7, np.nan), np.arange(50.0)])
    got = compare_outputs(ref, ref.copy(), name="y", input_set=0, tolerance=Tolerance(0.0, 0.0))
    assert got.stats.max_abs == 0.0 and got.stats.worst_index == (BLOCK + 7,)
    assert got.n_mismatch == 0 and got.stats.p99_abs == 0.0


def test_p99_when_exact_ulp_errors_crowd_the_candidate_buffer():
    """Errors of -2..2 float32 ulps on |ref| in [1, 2): 40 % of them in the bin of the
    k-th largest, more than the loop's p99 buffer holds; the bin holds one value, which
    becomes tp with its ties counted (no partition), and p99 stays numpy's."""
    ref, onnx = _data("ulp32", 300_000, seed=7)
    tol = Tolerance(1e-7, 0.0)
    got = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol)
    want = _reference(ref, onnx, tol)
    assert got.stats.p99_abs == want["p99"]
    assert got.n_mismatch == want["n_mismatch"]
    assert np.array_equal(got.profile.hist_counts, want["hist"][want["hist"] > 0])
    assert np.array_equal(got.profile.top_d, np.sort(want["d"])[::-1][:512])


@pytest.mark.parametrize("start", ["relu", "zeros"])
@pytest.mark.parametrize("chunk", [1000, 65536])
def test_an_exact_output_gives_the_general_paths_figures(chunk, start):
    """Equal outputs (every error 0, zeros in the reference; or zeros only, then values
    none of which is left of the hull: the first relative error, 0, in an exact block),
    then one difference in the last element: the same figures as numpy's, exact blocks
    taken in one step or not."""
    from parity.judge.compare_kernel import BLOCK

    n = 40 * BLOCK
    if start == "relu":
        ref = _data("relu", n, seed=9)[0]
    else:
        ref = np.random.default_rng(9).choice(np.float32([-1.0, 1.0, 2.0]), n)
        ref[: 5 * BLOCK] = 0.0
    onnx = ref.copy()
    tol = Tolerance(1e-5, 0.0)
    for last in (0.0, 1e-3):
        onnx[-1] = ref[-1] + np.float32(last)
        got = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol, chunk_elements=chunk)
        want = _reference(ref, onnx, tol)
        s = got.stats
        assert (s.max_abs, s.worst_index, s.max_rel) == (
            want["max_abs"],
            (want["worst"],),
            want["max_rel"],
        )
        assert (s.p99_abs, got.n_mismatch) == (want["p99"], want["n_mismatch"])
        assert np.array_equal(got.profile.hist_counts, want["hist"][want["hist"] > 0])
        assert s.rms == pytest.approx(want["rms"], rel=1e-12, abs=0.0)
        assert got.profile.hull_r[0] == want["r"][want["r"] > 0].min()
        r, o = ref.astype(np.float64), onnx.astype(np.float64)
        cosine = float(np.dot(r, o) / math.sqrt(np.dot(r, r) * np.dot(o, o)))
        assert s.cosine == pytest.approx(cosine, rel=1e-12)
        if last:
            snr = 10 * math.log10(float(np.dot(r, r)) / float(np.sum(want["d"] ** 2)))
            assert s.snr_db == pytest.approx(snr, rel=1e-12)


@pytest.mark.parametrize(
    ("kind", "n"), [("exact", 70_000), ("equal", 70_000), ("ulp32", 300_000), ("ties", 300_000)]
)
def test_the_p99_threshold_keeps_every_error_above_it_and_counts_those_equal(kind, n):
    """The invariant p99 rests on, after the pass: every error above tp is kept, and when
    tp is a data value (TIES >= 0) the errors equal to it are counted, exactly ("equal":
    exact blocks, counted in one step, but for the last element)."""
    from parity.judge.chunks import flat_chunks
    from parity.judge.compare_kernel import F, S
    from parity.judge.compare_pass import _Pass

    if kind == "equal":
        ref = _data("relu", n, seed=8)[0]
        onnx = ref.copy()
        onnx[-1] += np.float32(1e-3)
    else:
        ref, onnx = _data(kind, n, seed=8)
    acc = _Pass(n, Tolerance(1e-5, 0.0))
    with np.errstate(invalid="ignore", over="ignore"):
        for start, rc, oc in flat_chunks(ref, onnx, 65536):
            acc.feed(rc, oc, start)
    d = _reference(ref, onnx, Tolerance(1e-5, 0.0))["d"]
    tp, ties = float(acc.fs[F.TP]), int(acc.st[S.TIES])
    kept = acc.buf_top[: int(acc.st[S.N_TOP])]
    assert np.array_equal(np.sort(kept[kept > tp]), np.sort(d[d > tp]))
    assert ties == np.count_nonzero(d == tp)  # each of these ends with tp on a data value


def test_tp_becomes_the_one_value_of_a_crowded_bin():
    """raise_tp: the k-th largest error's bin holds one value (read off the kept errors only
    when they crowd the buffer; bin 0 holds exact zeros and is never read): tp becomes it,
    its count the ties; a bin of two values, one that is not crowded, or tp's own bin (its
    errors at or below tp are not kept) leaves tp at an edge or where it was."""
    from parity.judge.compare_kernel import N_F, N_S, F, S, raise_tp
    from parity.judge.error_profile import HIST_BINS, hist_bin

    edges = hist_edge(np.arange(HIST_BINS))
    value = 2.0**-22  # a histogram edge: the upper end of its bin

    def raised(kept, crowded, k=3, tp=-math.inf, ties=-1, not_kept=()):
        fs, st = np.zeros(N_F), np.zeros(N_S, dtype=np.int64)
        hist = np.zeros(HIST_BINS, dtype=np.int64)
        for x in [*kept, *not_kept]:
            hist[hist_bin(x)] += 1
        fs[F.TP], st[S.TIES], st[S.K_KEEP] = tp, ties, k
        st[S.TP_BIN] = hist_bin(tp) if tp >= 0 else 0
        st[S.N_FINITE], st[S.TOP_BIN] = hist.sum(), max(hist_bin(x) for x in kept)
        top = np.array(kept)
        raise_tp(fs, st, hist, edges, top, top.size, crowded)
        return float(fs[F.TP]), int(st[S.TIES])

    below = float(edges[hist_bin(value) - 1])
    assert raised([value] * 6 + [0.0] * 4, True) == (value, 6)
    assert raised([value] * 6 + [0.0] * 4, False) == (below, -1)
    assert raised([value] * 5 + [value * 0.99, 0.0], True) == (below, -1)
    assert raised([0.0] * 9 + [value], False) == (0.0, 9)
    assert raised([value] * 2 + [value / 2] * 3, True) == (value / 2, 3)
    v = value * 0.99  # tp, in value's bin, its 4 ties counted; 2 errors below it
    own = raised([value] * 3, True, k=5, tp=v, ties=4, not_kept=[v] * 4 + [value * 0.98] * 2)
    assert own == (v, 4)
