"""Inspect page: one output of one input set, element by element.

Every view comes from parity.show.reductions (pooled slices, binned histograms, samples), so the
browser never receives a raw tensor; per-output results that do not depend on the widgets
(worst elements, histogram, sample) are kept per run in the session.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from parity.dashboard import routes, state
from parity.dashboard.candidates import candidate_selector, could_not_run
from parity.dashboard.frame import run_or_invite
from parity.dashboard.tables import NUMBER_FORMAT
from parity.dashboard.text import md_code, md_text
from parity.dashboard.where_views import where_for
from parity.judge.compare import compare_outputs
from parity.judge.where import where_profile
from parity.labels import set_label, status_label
from parity.results import Status, ValidationRun
from parity.show import figures as fg
from parity.show import reductions as ins
from parity.show.cause_labels import intended_outputs
from parity.show.format import sample_name
from parity.text import shape_text, tolerance_text

KIND_LABELS = {
    "ratio": "error ÷ allowed",
    "fails": "failing only",
    "abs": "|error|",
    "signed": "signed error",
    "rel": "relative error",
}
WORST_K = 25
WORST_COLUMN_CONFIG = {  # fits the page's right column (~354 px inside at 1280 px), no scrolling
    # the widths add up to 352: index 88 (a 4-d index with two-digit places), the two
    # values 72 each (up to ten characters), the errors 60 each (%.2e: "4.81e-1")
    "index": st.column_config.TextColumn("index", width=88),
    # text: as many digits as tell the two apart (parity.text.number_pair_text)
    "ref": st.column_config.TextColumn("ref", width=72),
    "onnx": st.column_config.TextColumn("onnx", width=72),
    "abs error": st.column_config.NumberColumn("|error|", format=NUMBER_FORMAT, width=60),
    "rel error": st.column_config.NumberColumn(
        "rel", format=NUMBER_FORMAT, width=60, help="relative error, |error| / |ref|"
    ),
}


def _cached(run: ValidationRun | None, key: tuple, compute):
    """Per-run memo of widget-independent views (kept in the session, not pickled).

    Keyed on the stored run (state.raw_run), not the one re-judged at the session's
    tolerances: a re-judge is a new object on every rerun, and these views read the
    tensors only, never the tolerances.
    """
    return state.run_memo(state.INSPECT_CACHE, run, key, compute)


def _choose_target(run: ValidationRun) -> tuple[int, str]:
    sets = [s.index for s in run.input_sets] or sorted({c.input_set for c in run.outputs})
    names = list(run.output_names)
    target = state.target()
    if target is not None and state.get(state.INSP_APPLIED) != target:
        state.put(state.INSP_APPLIED, target)
        if target[0] in sets:
            state.put(state.INSP_SET, target[0])
        if target[1] in names:
            state.put(state.INSP_OUT, target[1])
    if state.get(state.INSP_SET) not in sets:
        state.put(state.INSP_SET, sets[0])
    if state.get(state.INSP_OUT) not in names:
        failing = [c.name for c in run.outputs if not c.status.passed]
        state.put(state.INSP_OUT, failing[0] if failing else names[0])
    c1, c2 = st.columns(2)
    name = c1.selectbox("Output", names, key=state.INSP_OUT)
    set_index = c2.selectbox(
        "Input set", sets, key=state.INSP_SET, format_func=lambda i: set_label(run, i)
    )
    return int(set_index), str(name)


def _choose_slice(shape: tuple[int, ...], worst_index, key: str, names) -> ins.SliceSpec:
    full = ins.as_2d_shape(shape)
    nd = len(full)
    default = ins.default_slice(shape, at=worst_index)
    if nd == 2 and len(shape) == 2:
        return default
    if len(shape) < 2:
        return default
    c1, c2 = st.columns(2)
    axes = list(range(nd))
    titles = ins.axis_titles(shape, names)  # "height (axis 2, size 32)": options are plain text
    label = titles.__getitem__
    row = c1.selectbox("Rows: axis", axes, index=default.row_axis, key=f"{key}_row",
                       format_func=label)  # fmt: skip
    col_options = [a for a in axes if a != row]
    col_default = default.col_axis if default.col_axis != row else col_options[-1]
    col = c2.selectbox("Columns: axis", col_options, index=col_options.index(col_default),
                       key=f"{key}_col", format_func=label)  # fmt: skip
    others = [a for a in axes if a not in (row, col)]
    index = list(default.index)
    if others:
        st.caption("Index of every other axis (starts at the worst element)")
        cols = st.columns(min(len(others), 4))
        for i, ax in enumerate(others):
            with cols[i % len(cols)]:
                index[ax] = int(
                    st.number_input(
                        md_text(f"{titles[ax]}: index (0..{full[ax] - 1})"),
                        min_value=0,
                        max_value=max(full[ax] - 1, 0),
                        value=default.index[ax],
                        key=f"{key}_idx{ax}",
                    )  # fmt: skip
                )
    return ins.check_slice(ins.SliceSpec(row, col, tuple(index)), full)


def _layer_value(run: ValidationRun):
    """The intermediate value the Layers page opened here, compared like an output:
    (input set, cache name, comparison, torch array, ONNX array), or None."""
    from parity.layers.views import find_value, kept

    picked = state.layer_target()
    result = run.layers
    if picked is None or result is None:
        return None
    order, set_index = picked
    pair, found = kept(result, order, set_index), find_value(result, order, set_index)
    if pair is None or found is None:
        state.clear_layer_target()
        return None
    st.caption("Intermediate value, opened from the Layers page (its arrays were kept)")
    st.text(
        f"{found.onnx_value} · {found.onnx_op} node {found.onnx_node} · module "
        f"{found.torch_module or '-'} · {set_label(run, set_index)} · layers status {found.status}"
    )
    if st.button("Back to the outputs", key=state.INSP_LAYER_BACK, icon=":material/undo:"):
        state.clear_layer_target()
        st.rerun()
    name = f"layer {order}"
    # compared once per stored run (tensors), re-judged at the session's tolerance (profile)
    comp = _cached(
        state.raw_view(),
        (set_index, name, "comparison"),
        lambda: compare_outputs(
            pair.ref,
            pair.onnx,
            name=found.onnx_value,
            input_set=set_index,
            tolerance=run.tolerances.default,
        ),  # fmt: skip
    ).rejudge(run.tolerances.default)
    st.markdown(
        f"**{status_label(comp.status).upper()}** at the default tolerance "
        f"({tolerance_text(comp.tolerance)}) · torch {shape_text(comp.ref_shape)} "
        f"{comp.ref_dtype} · ONNX {shape_text(comp.onnx_shape)} {comp.onnx_dtype}"
    )
    return set_index, name, comp, pair.ref, pair.onnx


def _sample_value(run: ValidationRun):
    """The data sample the Samples page opened here (--data; its arrays kept by the run),
    compared like an output at that output's tolerance: (set key, view name, comparison,
    torch array, ONNX array), or None. Its inputs show as a thumbnail or their shapes."""
    from parity.data.figures import thumbnail

    picked = state.sample_target()
    data = run.data
    if picked is None or data is None:
        return None
    output, number = picked
    o = data.output(output)
    w = next((x for x in o.worst if x.sample == number), None) if o is not None else None
    if w is None or w.torch is None or w.onnx is None:
        state.clear_sample_target()
        return None
    st.caption("A sample of your data, one of the worst: the run kept its values")
    inputs = ", ".join(f"{k} {shape_text(a.shape)} {a.dtype}" for k, a in w.inputs.items())
    st.text(f"{sample_name(w.sample, w.id)} · output {output} · inputs: {inputs or 'not kept'}")
    image = next((i for i in map(thumbnail, w.inputs.values()) if i is not None), None)
    if image is not None:
        st.image(image, width=160, clamp=True, caption=f"sample {w.sample}")
    if st.button("Back to the outputs", key=state.INSP_SAMPLE_BACK, icon=":material/undo:"):
        state.clear_sample_target()
        st.rerun()
    name = f"sample {w.sample} {output}"
    tolerance = run.tolerances.for_output(output)
    comp = _cached(
        state.raw_view(),
        (-1, name, "comparison"),
        lambda: compare_outputs(w.torch, w.onnx, name=output, input_set=-1, tolerance=tolerance),
    ).rejudge(tolerance)
    st.markdown(
        f"**{status_label(comp.status).upper()}** at {md_text(output)}'s tolerance "
        f"({tolerance_text(comp.tolerance)}) · torch {shape_text(comp.ref_shape)} "
        f"{comp.ref_dtype} · ONNX {shape_text(comp.onnx_shape)} {comp.onnx_dtype}"
    )
    return -1, name, comp, np.asarray(w.torch), np.asarray(w.onnx)


def _where_section(run, stored, set_index, name, comp, ref, onnx, exclude, is_layer) -> None:
    """Where the mismatches are at the current tolerance (parity.judge.where): one sentence, and the
    per-axis profile folded below it."""
    if not comp.n_mismatch or ref.dtype.kind not in "biuf" or onnx.dtype.kind not in "biuf":
        return
    tol = comp.tolerance
    if is_layer:  # an intermediate value: its arrays come from the layers result
        where = _cached(
            stored,
            (set_index, name, "where", tol.atol, tol.rtol),
            lambda: where_profile(ref, onnx, tol, exclude=exclude),
        )
    else:
        where = where_for(run, comp)
    if where is None:
        return
    st.markdown(f"**Where:** {md_text(where.summary)}")
    with st.expander("Mismatches along each axis", expanded=False):
        st.caption(
            "Per index of each axis: the fraction of its elements that fail at this tolerance "
            "(bars; red where the mismatches concentrate: the few indices whose fraction is at "
            "least four times every other index's) and the "
            "largest error ÷ allowed error there (line; 1 is the pass line)."
        )
        st.plotly_chart(fg.where_figure(where), width="stretch", key=state.INSP_WHERE)


def page() -> None:
    st.title("Inspect an output")
    run = run_or_invite()
    if run is None:
        return
    run = candidate_selector(run, key=state.CANDIDATE_INSPECT)
    if could_not_run(run):
        return
    layer = _layer_value(run) or _sample_value(run)  # a layer value, a data sample
    if layer is not None:
        set_index, name, comp, ref, onnx = layer
    else:
        set_index, name = _choose_target(run)
        comp = run.comparison(set_index, name)
        ref, onnx = run.arrays(comp)
        cause = intended_outputs(run).get((comp.candidate, name), "")  # amber, as on the grid
        said = status_label(comp.status).upper() + (
            f" ({md_text(cause)}, what the file was meant to do)"
            if cause and comp.status is Status.FAIL
            else ""
        )
        st.markdown(
            f"**{said}** · {md_code(name)} in "
            f"{md_text(set_label(run, set_index))} · "
            f"torch {md_text(shape_text(comp.ref_shape))} {md_text(comp.ref_dtype)} · "
            f"ONNX {md_text(shape_text(comp.onnx_shape))} {md_text(comp.onnx_dtype)} · "
            f"{tolerance_text(comp.tolerance)}"
            + (f"  \n{md_text(comp.message)}" if comp.message else "")
        )
        if comp.noise is not None:
            from parity.judge.noise_floor import set_noise_line

            st.text(set_noise_line(run.outputs, comp, set_label(run, set_index)))
    if ref is None or onnx is None:
        if run.data is not None:  # a run on a data set keeps its worst samples, not its batches
            st.info(
                "A run on your data keeps the values of each output's worst samples, not of "
                "every batch: open one from the Samples page to see it element by element."
            )
            st.page_link(routes.SAMPLES, label="Go to Samples", icon=":material/photo_library:")
            return
        st.warning("This run holds no values for this output on both sides; nothing to draw.")
        return
    if ref.shape != onnx.shape:
        st.error(
            f"Shapes differ (torch {list(ref.shape)} vs ONNX {list(onnx.shape)}): the outputs "
            "cannot be compared element by element."
        )
        return

    exclude = run.exclusion(set_index, name)  # what the verdict did not judge
    if comp.n_excluded:
        st.caption(
            f"{comp.n_excluded:,} element(s) were not judged (the message above says why): "
            "they are blank in the error views and left out of the worst elements, the "
            "histogram and the scatter, as they were left out of the verdict."
        )
    key = f"{state.INSP_SLICE_PREFIX}{set_index}_{name}"
    stored = state.raw_view()
    _where_section(run, stored, set_index, name, comp, ref, onnx, exclude, layer is not None)
    worst = _cached(
        stored,
        (set_index, name, "worst"),
        lambda: ins.worst_elements(ref, onnx, k=WORST_K, exclude=exclude),
    )
    worst_index = worst.rows[0].index if worst.rows else None
    names = None if layer is not None else run.dim_names(name, ref.ndim)
    spec = _choose_slice(tuple(ref.shape), worst_index, key, names)
    c1, c2 = st.columns([3, 1])
    kind = c1.radio("Show", list(KIND_LABELS), format_func=KIND_LABELS.get, horizontal=True,
                    key=state.INSP_KIND)  # fmt: skip
    judged = kind in ins.JUDGED_KINDS  # always on the log ratio scale, the pass line at 1
    log_color = c2.toggle(
        "Log colour", value=True, key=state.INSP_LOG, disabled=kind == "signed" or judged
    )
    tol = comp.tolerance
    view, ms = state.timed(
        ins.slice_view, ref, onnx, spec, kind=kind, exclude=exclude, tolerance=tol
    )
    left, right = st.columns([5, 4])
    with left:
        st.plotly_chart(
            fg.error_heatmap(
                view,
                worst=worst,
                shape=ref.shape,
                log_color=log_color,
                tolerance=tol,
                names=names,
            ),  # fmt: skip
            width="stretch",
            theme=None,  # keep the figure's own colour scales
            key=state.INSP_HEATMAP,
        )
        st.caption(
            f"Slice {spec.describe(ref.shape)}: {view.pooling_text()}; computed in {ms:.0f} ms. "
            "Crosses mark the worst failing elements in this slice (the worst one alone "
            "when none fails). Hover a cell for its index, error and both values."
        )
    with right:
        st.markdown(f"**Worst {len(worst.rows)} elements** of {worst.n_total:,}")
        st.dataframe(
            worst.to_records(),
            hide_index=True,
            width="stretch",
            height=460,
            column_config=WORST_COLUMN_CONFIG,
        )

    st.subheader("Reference, ONNX and error side by side")
    small = ins.PANEL_MAX_CELLS
    ref_small, onnx_small = (
        ins.slice_view(ref, onnx, spec, kind=k, max_cells=small) for k in ("ref", "onnx")
    )
    err_small = ins.slice_view(
        ref, onnx, spec, kind=kind, max_cells=small, exclude=exclude, tolerance=tol
    )
    st.plotly_chart(
        fg.slice_panels(
            ref_small, onnx_small, err_small, log_color=log_color, tolerance=tol, names=names
        ),
        width="stretch",
        theme=None,
        key=state.INSP_SIDE,
    )

    h_col, s_col = st.columns(2)
    with h_col:
        hist = _cached(
            stored,
            (set_index, name, "hist"),
            lambda: ins.error_histogram(ref, onnx, exclude=exclude),
        )
        worst_abs = comp.stats.max_abs if comp.stats else hist.max_abs
        st.plotly_chart(
            fg.error_histogram(hist, atol=comp.tolerance.atol, worst=worst_abs),
            width="stretch",
            key=state.INSP_HIST,
        )
    with s_col:
        sample = _cached(
            stored,
            (set_index, name, "sample"),
            lambda: ins.sample_pairs(
                ref, onnx, include=[w.index for w in worst.rows], exclude=exclude
            ),
        )
        st.plotly_chart(
            fg.onnx_vs_ref_scatter(sample, tolerance=comp.tolerance),
            width="stretch",
            key=state.INSP_SCATTER,
        )


page()
