"""parity.show.figures: trace types, what each figure marks, and the size sent to the browser."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parity.judge.compare import compare_outputs
from parity.results import InputSet, OutputComparison, ValidationRun
from parity.show import figures as fg
from parity.show import reductions as ins
from parity.tolerances import Tolerance, Tolerances

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
    assert np.asarray(heat.z).shape == view.values.shape == (256, 256)
    assert "block max-pooled 16x16" in fig.layout.title.text
    assert "1 NaN/Inf cells" in fig.layout.title.text
    # the worst elements are placed at their own (col, row) element coordinates
    assert (700, 2500) in set(zip(marks.x, marks.y, strict=True))
    assert (10, 10) in set(zip(marks.x, marks.y, strict=True))
    # colour is log10 |error|: the injected error of 3 is the top of the scale
    assert float(np.nanmax(heat.z)) == pytest.approx(math.log10(3.0), abs=1e-3)


def test_side_by_side_panels_share_one_value_scale_and_stay_under_2mb(big_pair):
    ref, onnx = big_pair
    spec = ins.default_slice(ref.shape)
    small = ins.PANEL_MAX_CELLS  # as the Inspect page draws them
    views = [
        ins.slice_view(ref, onnx, spec, kind=k, max_cells=small) for k in ("ref", "onnx", "abs")
    ]
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


def _run(comparisons: tuple[OutputComparison, ...], n_sets: int = 2) -> ValidationRun:
    sets = tuple(InputSet(i, {"image": np.zeros((1, 3, 8 * (i + 1), 8))}) for i in range(n_sets))
    return ValidationRun.from_rows(
        model="m", onnx="m.onnx", signature=None, tolerances=Tolerances(), environment={},
        input_sets=sets, outputs=comparisons,
    )  # fmt: skip


def _compared(input_set: int, name: str, error: float, *, atol: float = 1e-5) -> OutputComparison:
    ref = np.linspace(-1, 1, 64, dtype=np.float64).reshape(8, 8)
    onnx = ref.copy()
    onnx[3, 4] += error
    return compare_outputs(ref, onnx, name=name, input_set=input_set, tolerance=Tolerance(atol))


def test_verdict_grid_colours_by_error_over_allowed_and_marks_each_cell_clickably():
    comps = (
        _compared(0, "mask", 1e-7),
        _compared(0, "embedding", 0.0),
        _compared(1, "mask", 0.5),
        _compared(1, "embedding", 2e-6),
    )
    fig = fg.verdict_grid(_run(comps))
    heat, marks = fig.data
    assert heat.type == "heatmap" and marks.type == "scatter"
    z = np.asarray(heat.z, dtype=float)
    # error ÷ allowed on the fixed scale: 1e-7 / 1e-5 = 0.01 -> -2; 0.5 / 1e-5 clipped at +3
    assert z[0, 0] == pytest.approx(-2.0, abs=1e-6) and z[1, 0] == 3.0
    assert z[0, 1] == -3.0  # zero error: the bottom of the scale, never a blank cell
    assert (z[[0, 0, 1], [0, 1, 1]] < 0).all() and heat.zmin == -3 and heat.zmax == 3
    assert "pass line" in " ".join(heat.colorbar.ticktext)
    assert list(heat.x) == ["mask", "embedding"] and heat.y[1] == "set 1 (1x3x16x8)"
    assert [list(c) for c in marks.customdata][2] == [1, "mask"]
    assert list(marks.text) == ["✓", "✓", "✗", "✓"]
    assert marks.textfont.color[2] == "#ffffff" and marks.textfont.color[0] != "#ffffff"


def test_a_passing_runs_largest_error_is_green_and_a_failing_cell_red():
    from parity.show.colors import cell_look

    near_line = cell_look(_compared(0, "y", 9.9e-6))
    just_over = cell_look(_compared(0, "y", 1.2e-5))
    assert near_line.ratio < 1 < just_over.ratio
    red, green, _ = (int(just_over.fill[i : i + 2], 16) for i in (1, 3, 5))
    assert red > 180 and green < 90  # an unmistakable red, even 1.2x over the line
    r, g, b = (int(near_line.fill[i : i + 2], 16) for i in (1, 3, 5))
    assert g > 180 and b < 160  # yellow-green: passing, close to the line
    # the same ratio has the same colour whatever the tolerance and the output's scale
    assert (
        cell_look(_compared(0, "y", 1e-3, atol=1e-2)).fill
        == cell_look(_compared(0, "y", 1e-6, atol=1e-5)).fill
    )


def test_shape_and_missing_cells_are_drawn_and_named_not_left_empty():
    ref = np.zeros((2, 3), dtype=np.float32)
    shape = compare_outputs(ref, np.zeros((3, 2), np.float32), name="a", input_set=0,
                            tolerance=Tolerance())  # fmt: skip
    missing = compare_outputs(ref, None, name="b", input_set=0, tolerance=Tolerance())
    fig = fg.verdict_grid(_run((shape, missing), n_sets=1))
    judged, other, marks = fig.data
    assert np.isnan(np.asarray(judged.z, dtype=float)).all()
    assert np.asarray(other.z, dtype=float).tolist() == [[1.0, 1.0]]
    assert list(marks.text) == ["shape", "missing"]
    assert "shape (2, 3) vs ONNX (3, 2)" not in " ".join(marks.hovertext)  # words, not message
    assert all("mismatch" in t or "missing" in t for t in marks.hovertext)


def test_ratio_and_fails_only_views_use_the_pass_line():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((40, 30)).astype(np.float32)
    onnx = ref + np.float32(1e-6)
    onnx[5, 7] += 1.0
    tol = Tolerance(1e-5)
    spec = ins.default_slice(ref.shape)
    ratio = ins.slice_view(ref, onnx, spec, kind="ratio", tolerance=tol)
    fails = ins.slice_view(ref, onnx, spec, kind="fails", tolerance=tol)
    assert ratio.values[5, 7] > 1 and (np.delete(ratio.values.ravel(), 5 * 30 + 7) <= 1).all()
    assert np.isnan(fails.values).sum() == ref.size - 1 and fails.values[5, 7] > 1
    fig = fg.error_heatmap(fails, tolerance=tol)
    heat = fig.data[0]
    assert heat.zmin == -3 and heat.zmax == 3 and "1× pass line" in heat.colorbar.ticktext
    assert "blank: passes at this tolerance" in fig.layout.title.text
    assert "error ÷ allowed" in heat.hovertemplate
    with pytest.raises(ValueError, match="tolerance"):
        ins.slice_view(ref, onnx, spec, kind="ratio")


def test_abs_error_colour_bar_marks_atol():
    ref = np.zeros((10, 10), dtype=np.float32)
    onnx = ref + np.float32(1e-7)
    onnx[2, 2] = 1e-3
    view = ins.slice_view(ref, onnx, ins.default_slice(ref.shape), kind="abs")
    heat = fg.error_heatmap(view, tolerance=Tolerance(1e-5)).data[0]
    assert "atol 1e-05 ◀" in heat.colorbar.ticktext
    assert heat.colorbar.tickvals[list(heat.colorbar.ticktext).index("atol 1e-05 ◀")] == -5


# --------------------------------------------------------------------------- Inspect on demos


@pytest.fixture(scope="module")
def demo_runs() -> dict[str, ValidationRun]:
    from parity.pipeline import run_validation
    from parity.run.config import RunConfig

    return {d: run_validation(RunConfig(model=f"demo:{d}", onnx=None)) for d in ("broken", "fp16")}


def _demo_view(run: ValidationRun, name: str, kind: str = "ratio"):
    c = run.comparison(0, name)
    ref, onnx = run.arrays(c)
    worst = ins.worst_elements(ref, onnx, k=25)
    spec = ins.default_slice(ref.shape, at=worst.rows[0].index)
    view = ins.slice_view(ref, onnx, spec, kind=kind, tolerance=c.tolerance)
    return c, ref, onnx, worst, view


def _custom(trace) -> np.ndarray:
    return np.asarray(trace.customdata, dtype=np.float64)


def test_heatmap_axes_and_hover_carry_the_onnx_dim_names_and_both_values(demo_runs):
    run = demo_runs["broken"]
    c, ref, onnx, worst, view = _demo_view(run, "mask")
    names = run.dim_names("mask", ref.ndim)
    assert names == ("batch", None, "height", "width")
    fig = fg.error_heatmap(view, worst=worst, shape=ref.shape, tolerance=c.tolerance, names=names)
    assert fig.layout.xaxis.title.text == "width (axis 3, size 32)"
    assert fig.layout.yaxis.title.text == "height (axis 2, size 32)"
    heat = fig.data[0]
    hover = heat.hovertemplate
    b = view.spec.index[0]
    assert f"index [{b}, 0, %{{y}}, %{{x}}]" in hover and "height %{y}, width %{x}" in hover
    assert "error ÷ allowed %{customdata[0]:.3~g}×" in hover
    assert "ref %{customdata[1]:.6~g}" in hover and "ONNX %{customdata[2]:.6~g}" in hover
    data = _custom(heat)  # [ratio, ref, onnx] per cell, the values of this very slice
    np.testing.assert_allclose(data[..., 1], ref[b, 0], rtol=1e-6)
    np.testing.assert_allclose(data[..., 2], onnx[b, 0], rtol=1e-6)
    assert data[0, 0, 0] > 1 and data[16, 16, 0] < 1  # the border fails, the middle passes


def test_log_coloured_error_hovers_the_error_itself_never_its_log(demo_runs):
    run = demo_runs["broken"]
    c, ref, onnx, worst, view = _demo_view(run, "mask", kind="abs")
    heat = fg.error_heatmap(view, tolerance=c.tolerance, log_color=True).data[0]
    assert "log10" not in heat.hovertemplate and "|error| %{customdata[0]" in heat.hovertemplate
    b = view.spec.index[0]
    np.testing.assert_allclose(
        _custom(heat)[..., 0], np.abs(onnx[b, 0].astype(np.float64) - ref[b, 0]), rtol=1e-6
    )
    assert float(np.nanmax(np.asarray(heat.z))) < 0  # the colour is log10, the hover is not


def test_pooled_cells_hover_the_values_of_the_element_they_show(big_pair):
    ref, onnx = big_pair
    view = ins.slice_view(ref, onnx, ins.default_slice(ref.shape), kind="abs")
    heat = fg.error_heatmap(view).data[0]
    assert "index ≈[%{y:.0f}, %{x:.0f}]" in heat.hovertemplate
    assert "worst of a 16×16 block" in heat.hovertemplate
    data = _custom(heat)
    i, j = 2500 // 16, 700 // 16
    assert data[i, j, 0] == pytest.approx(3.0, rel=1e-4)
    assert (data[i, j, 1], data[i, j, 2]) == pytest.approx((ref[2500, 700], onnx[2500, 700]))


def test_dim_names_and_titles_are_text_not_plotly_markup(demo_runs):
    import dataclasses

    from parity.signature import OnnxSignature, TensorSpec

    run = demo_runs["broken"]
    c, ref, onnx, worst, view = _demo_view(run, "mask")
    spec = TensorSpec("mask", "float32", ("batch", 1, "<b>h&w</b>", "w"))
    signature = OnnxSignature((), (spec,), 17, "test", 8)
    names = dataclasses.replace(run, signature=signature).dim_names("mask", 4)
    fig = fg.error_heatmap(view, title="<i>mask</i>", names=names)
    assert fig.layout.yaxis.title.text == "&lt;b&gt;h&amp;w&lt;/b&gt; (axis 2, size 32)"
    assert "&lt;b&gt;h&amp;w&lt;/b&gt; %{y}" in fig.data[0].hovertemplate
    assert fig.layout.title.text.startswith("&lt;i&gt;mask&lt;/i&gt; [")


def test_square_slices_keep_square_cells_and_long_ones_fill_the_width(demo_runs):
    _, ref, _, _, square = _demo_view(demo_runs["broken"], "mask")  # 32 x 32
    fig = fg.error_heatmap(square)
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.yaxis.constrain == "domain"
    assert list(fig.layout.xaxis.range) == [-0.5, 31.5]  # no grey bands past the cells
    assert list(fig.layout.yaxis.range) == [31.5, -0.5]  # row 0 at the top
    _, _, _, _, wide = _demo_view(demo_runs["fp16"], "pooled")  # 2 x 32: a strip
    assert wide.slice_shape == (2, 32)
    fig_wide = fg.error_heatmap(wide)
    assert fig_wide.layout.yaxis.scaleanchor is None  # cells stretch to fill the width
    assert fig_wide.layout.height < fig.layout.height
    assert fig_wide.layout.xaxis.title.text == "axis 1 (size 32)"
    assert fig_wide.layout.yaxis.title.text == "axis 0 (size 2)"


def test_small_outputs_mark_only_the_worst_failing_elements(demo_runs):
    run = demo_runs["broken"]
    c, ref, onnx, worst, view = _demo_view(run, "embedding")  # passes; (2, 16)
    marks = fg.error_heatmap(view, worst=worst, shape=ref.shape, tolerance=c.tolerance).data[1]
    assert len(worst.rows) == 25 and len(marks.x) == 1  # the single worst, not 25 crosses
    assert "worst element" in marks.hovertext[0] and "ONNX" in marks.hovertext[0]

    c, ref, onnx, worst, view = _demo_view(demo_runs["fp16"], "pooled")  # fails everywhere
    marks = fg.error_heatmap(view, worst=worst, shape=ref.shape, tolerance=c.tolerance).data[1]
    assert 1 <= len(marks.x) <= 6  # at most a tenth of the slice's 64 elements

    c, ref, onnx, worst, view = _demo_view(run, "mask")  # 32 x 32, failing border
    marks = fg.error_heatmap(view, worst=worst, shape=ref.shape, tolerance=c.tolerance).data[1]
    kept = fg.marked_worst(view, worst, ref.shape, c.tolerance)
    assert len(marks.x) == len(kept) > 1
    assert all(w.abs_error > c.tolerance.atol for w in kept)  # every cross fails


def test_the_palette_is_typed_once() -> None:
    """Pass, fail and error colours come from parity.show.colors: the HTML report's CSS uses
    its custom properties and the dashboard's tables its status style; neither retypes them."""
    from pathlib import Path

    from parity.show.colors import ERROR_COLOR, FAIL_COLOR, PASS_COLOR, css_palette

    root = Path(__file__).resolve().parents[1]
    palette = css_palette()
    assert all(c in palette for c in (PASS_COLOR, FAIL_COLOR, ERROR_COLOR))
    for path in (root / "core" / "reports" / "html_report.py", root / "pages" / "tables.py"):
        text = path.read_text(encoding="utf-8").lower()
        assert not [c for c in (PASS_COLOR, FAIL_COLOR, ERROR_COLOR) if c.lower() in text], path
