"""core.figures: trace types, what each figure marks, and the size sent to the browser."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core import figures as fg
from core import views as ins
from core.results import ErrorStats, InputSet, OutputComparison, Status, ValidationRun
from core.tolerances import Tolerance, Tolerances

MAX_FIGURE_BYTES = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def big_pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4096, 4096), dtype=np.float32)
    onnx = ref + rng.standard_normal((4096, 4096), dtype=np.float32) * np.float32(1e-6)
    onnx[2500, 700] += 3.0
    onnx[10, 10] = np.nan
    return ref, onnx


def test_heatmap_of_a_4096_square_is_pooled_and_under_2mb(big_pair):
    ref, onnx = big_pair
    view = ins.slice_view(ref, onnx, ins.default_slice(ref.shape), kind="abs")
    worst = ins.worst_elements(ref, onnx, k=10)
    fig = fg.error_heatmap(view, worst=worst, shape=ref.shape)
    payload = fig.to_json()
    assert len(payload) <= MAX_FIGURE_BYTES
    heat, marks = fig.data
    assert heat.type == "heatmap" and marks.type == "scatter"
    assert np.asarray(heat.z).shape == view.values.shape == (293, 293)
    assert "block max-pooled 14x14" in fig.layout.title.text
    assert "1 NaN/Inf cells" in fig.layout.title.text
    # the worst elements are placed at their own (col, row) element coordinates
    assert (700, 2500) in set(zip(marks.x, marks.y, strict=True))
    assert (10, 10) in set(zip(marks.x, marks.y, strict=True))
    # colour is log10 |error|: the injected error of 3 is the top of the scale
    assert float(np.nanmax(heat.z)) == pytest.approx(math.log10(3.0), abs=1e-3)


def test_side_by_side_panels_share_one_value_scale_and_stay_under_2mb(big_pair):
    ref, onnx = big_pair
    spec = ins.default_slice(ref.shape)
    views = [ins.slice_view(ref, onnx, spec, kind=k) for k in ("ref", "onnx", "abs")]
    fig = fg.slice_panels(*views)
    assert [t.type for t in fig.data] == ["heatmap"] * 3
    assert fig.data[0].coloraxis == fig.data[1].coloraxis == "coloraxis"
    assert fig.data[2].coloraxis == "coloraxis2"
    assert len(fig.to_json()) <= MAX_FIGURE_BYTES


def test_signed_error_heatmap_is_centred_on_zero():
    ref = np.zeros((4, 5))
    onnx = np.array([[-2.0, 0, 0, 0, 1.0]] * 4)
    view = ins.slice_view(ref, onnx, ins.default_slice(ref.shape), kind="signed")
    heat = fg.error_heatmap(view).data[0]
    assert heat.zmid == 0 and heat.zmin == -2.0 and heat.zmax == 2.0
    assert "every element drawn" in fg.error_heatmap(view).layout.title.text


def test_histogram_draws_bins_cumulative_and_atol_and_worst_lines():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal(10_000)
    onnx = ref + rng.standard_normal(10_000) * 1e-4
    hist = ins.error_histogram(ref, onnx)
    fig = fg.error_histogram(hist, atol=1e-5, worst=hist.max_abs)
    kinds = [t.type for t in fig.data]
    assert kinds[:2] == ["bar", "scatter"]
    assert int(np.sum(fig.data[0].y)) == 10_000
    lines = {t.name.split(" =")[0]: t for t in fig.data[2:]}
    assert set(lines) == {"atol", "worst"}
    assert lines["atol"].x[0] == pytest.approx(-5.0)
    assert lines["worst"].x[0] == pytest.approx(math.log10(hist.max_abs))


def test_scatter_marks_points_outside_the_pass_band_as_failing():
    ref = np.linspace(-1, 1, 100)
    onnx = ref.copy()
    onnx[:3] += 0.5
    sample = ins.sample_pairs(ref, onnx)
    fig = fg.onnx_vs_ref_scatter(sample, tolerance=Tolerance(atol=1e-3, rtol=0.0))
    names = [t.name for t in fig.data]
    assert names[0].startswith("pass band") and "fail (3)" in names and "pass (97)" in names
    band = fig.data[0]
    assert max(np.asarray(band.y) - np.concatenate([band.x])) == pytest.approx(1e-3)


def test_mismatch_curve_has_one_line_per_output_and_the_current_atol():
    atols = np.logspace(-8, 0, 17)
    curves = {"a": np.linspace(1, 0, 17), "b": np.zeros(17)}
    fig = fg.mismatch_curve(atols, curves, atol=1e-5)
    assert [t.name for t in fig.data] == ["a", "b", "atol 1e-05"]
    assert fig.layout.xaxis.type == "log"


def _comparison(input_set: int, name: str, max_abs: float, status: Status) -> OutputComparison:
    stats = ErrorStats(
        max_abs=max_abs,
        worst_index=(0,),
        ref_at_worst=0.0,
        onnx_at_worst=max_abs,
        max_rel=None,
        mean_abs=max_abs,
        rms=max_abs,
        p99_abs=max_abs,
        n_nan_mismatch=0,
        n_inf_mismatch=0,
        cosine=1.0,
        snr_db=None,
    )
    return OutputComparison(
        input_set=input_set,
        name=name,
        status=status,
        tolerance=Tolerance(),
        ref_shape=(4,),
        onnx_shape=(4,),
        ref_dtype="float32",
        onnx_dtype="float32",
        n_elements=4,
        stats=stats,
    )


def test_verdict_grid_colours_by_log_max_abs_and_marks_each_cell_clickably():
    comps = (
        _comparison(0, "mask", 1e-7, Status.PASS),
        _comparison(0, "embedding", 1e-6, Status.PASS),
        _comparison(1, "mask", 0.5, Status.FAIL),
        _comparison(1, "embedding", 2e-6, Status.PASS),
    )
    sets = tuple(InputSet(i, {"image": np.zeros((1, 3, 8 * (i + 1), 8))}) for i in range(2))
    run = ValidationRun(
        model="m", onnx="m.onnx", signature=None, tolerances=Tolerances(), environment={},
        input_sets=sets, comparisons=comps,
    )  # fmt: skip
    fig = fg.verdict_grid(run)
    heat, marks = fig.data
    assert heat.type == "heatmap" and marks.type == "scatter"
    z = np.asarray(heat.z)
    assert z.shape == (2, 2) and z[1, 0] == pytest.approx(math.log10(0.5))
    assert list(heat.x) == ["mask", "embedding"] and heat.y[1] == "set 1 (1x3x16x8)"
    assert [list(c) for c in marks.customdata][2] == [1, "mask"]
    assert list(marks.text) == ["✓", "✓", "✗", "✓"]
