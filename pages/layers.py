"""Layers page: where inside the graph the export starts to diverge.

Reads the current run's layers comparison (RunConfig.layers / `parity validate --layers`):
the first divergence in words, the error along the graph's depth, the module tree coloured by
error, every compared value in graph order, and a value's arrays in the Inspect page's views
when the engine kept them. Every name on this page is the user's: shown as text or in a
dataframe, never as markdown.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from parity.dashboard import routes, state
from parity.dashboard.candidates import candidate_selector
from parity.dashboard.frame import run_or_invite
from parity.dashboard.tables import NUMBER_FORMAT, status_style
from parity.dashboard.text import md_text
from parity.labels import OUTSIDE_MODULES
from parity.layers import birth_words, views
from parity.layers import figures as lf
from parity.results import ValidationRun
from parity.show.births import born_before, feeding_count, feeding_words
from parity.text import ratio_text


def _status_text(v) -> str:
    """✓ pass, ✗ for a status where an error is born, · for the rest (carried, not compared)."""
    s = str(v.status)
    mark = "✓" if s == "pass" else ("✗" if views.is_divergent(v) else "·")
    return f"{mark} {s.replace('_', ' ')}"


def value_rows(result) -> pd.DataFrame:
    rows = [
        {
            "order": v.order,
            "set": v.input_set,
            "status": _status_text(v),
            "module": v.torch_module or "",
            "op": v.onnx_op,
            "node": v.onnx_node,
            "value": v.onnx_value,
            "shape": "[" + ", ".join(str(d) for d in (v.shape or ())) + "]",
            "error ratio": views.metric_of(v, "error_ratio"),
            "jump": _float(getattr(v, "jump", None)),
            "max abs": views.metric_of(v, "max_abs"),
            "max rel": views.metric_of(v, "max_rel"),
            "cosine": _float(getattr(v, "cosine", None)),
            "arrays": "kept" if views.kept(result, v.order, v.input_set) is not None else "",
            "not comparable": getattr(v, "reason", None) or "",  # a fused value: why
            "fused: covers": ", ".join(getattr(v, "covers", ()) or ()),
        }
        for v in views.ordered(result.values)
    ]
    return pd.DataFrame(rows)


def _float(x) -> float | None:
    return None if x is None else float(x)


COLUMN_CONFIG = {
    "order": st.column_config.NumberColumn("order", width="small"),
    "set": st.column_config.NumberColumn("set", width="small"),
    **{
        k: st.column_config.NumberColumn(k, format=NUMBER_FORMAT)  # the Overview's style
        for k in ("error ratio", "jump", "max abs", "max rel")
    },
    "cosine": st.column_config.NumberColumn("cosine", format="%.6f"),
    "arrays": st.column_config.TextColumn(
        "arrays", help="kept: select the row to open it in the Inspect page"
    ),
    "fused: covers": st.column_config.TextColumn(
        "fused: covers",
        help="a fused node (ONNX Runtime's contrib op): the torch modules it stands for",
    ),
    "not comparable": st.column_config.TextColumn(
        "not comparable",
        help="why no torch value stands for this ONNX value (a fusion moved its bias, ...)",
    ),
}


def layers_config(run: ValidationRun):
    """The config that made `run` (this session ran it, or the settings an opened run
    carries), again with layers compared: for a run with several candidates, the one the
    pages show. None when the run does not say how it was made or there is nothing to compare
    layers against (no PyTorch model)."""
    from dataclasses import replace

    from parity.dashboard.saved_runs import linked_run
    from parity.results import RunKind
    from parity.run.config_json import config_of_run, reopened

    raw = state.raw_run()
    if linked_run() is not None:  # opened by a link: nothing re-runs it until confirmed
        return None
    config = state.run_config_of(raw)
    if config is None and raw is not None:  # an opened run: only what it may ask of a new one
        config = config_of_run(raw)
        config = None if config is None else reopened(config)
    if config is None or config.kind not in (RunKind.TORCH, RunKind.HF_GENERATE):
        return None
    if config.n_candidates > 1:
        info = run.candidate(state.candidate_index(run)).info
        config = replace(
            config, onnx=info.onnx, provider=info.provider, ort_opt_level=info.ort_opt_level
        )
    return replace(config, layers=True, tolerances=state.tolerances())


def _no_layers(run: ValidationRun) -> None:
    from parity.dashboard.running import execute

    config = layers_config(run)
    if config is None:
        st.info(
            "This run compared the model's outputs only. To find the op where the export "
            "starts to diverge, tick **Compare layers** on the Run page and run again."
        )
        st.page_link(routes.RUN, label="Go to Run", icon=":material/play_arrow:")
        return
    which = ""
    if run.is_multi_candidate:
        info = run.candidate(state.candidate_index(run)).info
        which = f" (candidate {md_text(info.label)})"
    st.info(
        "This run compared the model's outputs only. Run it again comparing every "
        f"intermediate value{which} to find the op where the export starts to diverge "
        "(slower than the outputs alone)."
    )
    clicked = st.button(
        "Compare layers for this run",
        type="primary",
        icon=":material/account_tree:",
        key=state.LAYERS_RERUN,
    )
    if clicked and execute(config, label=f"{run.model} with layers"):
        st.rerun()
    failure = state.last_failure()
    if failure is not None:
        st.error(f"**Run failed** ({failure.kind}): {md_text(failure.message)}")


def verdict(result) -> None:
    first = result.first_divergence
    with st.container(border=True):
        if first is not None:
            st.markdown(":red-background[**DIVERGES**] &nbsp; where the error is born:")
        elif result.matched:
            st.markdown(":green-background[**NO DIVERGENCE**] &nbsp; among the matched values")
        else:
            st.markdown(":orange-background[**NOTHING COMPARED**]")
        st.text(views.divergence_sentence(result))
        sentence = birth_words.birth_sentence(result)
        if sentence:
            st.text(sentence)
        for line in birth_words.other_lines(result):
            st.text(f"• {line}")
        if first is not None:
            if first.torch_module is None and first.torch_node is None:  # ONNX against ONNX
                st.code(f"{first.onnx_node} -> {first.onnx_value}", language=None)
            else:
                st.code(first.torch_module or OUTSIDE_MODULES, language=None)
            cols = st.columns(4)
            if born_before(first):  # a mover is not the place: the nodes feeding it are
                cols[0].metric(
                    "op",
                    f"before {first.onnx_op}",
                    help=f"{feeding_count(first)} unmatched nodes feed this {first.onnx_op}, "
                    f"which only moves data: {feeding_words(first)}",
                )
            else:
                cols[0].metric("op", first.onnx_op)
            cols[1].metric("jump", ratio_text(first.jump), help=views.jump_words(first))
            cols[2].metric("error ratio", views.fmt(first.error_ratio))
            cols[3].metric("max |error|", views.fmt(first.max_abs))
        st.text(f"Criterion: {result.criterion}")
        st.text(f"Matched by {result.matching or '?'}: {result.matched} values compared.")


def repro_download(run: ValidationRun, result) -> None:
    """The confirmed first divergence as a standalone repro folder (.zip), as --repro DIR."""
    from parity.layers.repro import no_repro_reason, repro_zip

    reason = no_repro_reason(result)
    if reason is not None:
        if result.first_divergence is not None:
            st.caption(reason)
        return
    try:
        data = repro_zip(result, command="the Parity dashboard (Layers page)", onnx_path=run.onnx)
    except Exception as exc:  # the file moved since the run: say so, keep the page
        st.caption(f"no repro: {type(exc).__name__}: {exc}")
        return
    st.download_button(
        "Download a standalone repro (.zip)",
        data=data,
        file_name="repro.zip",
        mime="application/zip",
        help="model.onnx (this node alone), test_data_set_0/*.pb (torch's values), repro.py "
        "(numpy + onnx + onnxruntime only; exit 1 while it disagrees) and README.md",
        key=state.LAYERS_REPRO_ZIP,
    )


def show_limits(result) -> None:
    """Unmatched values and the engine's notes (how it matched, what it left out), as text."""
    lines = views.limits(result)
    if not lines:
        return
    with st.container(border=True):
        st.markdown("**What was compared, and what was not**")
        for line in lines:
            st.text(f"• {line}")


def precision(run: ValidationRun, result) -> None:
    """What to keep in higher precision (a quantized or float16 candidate), checked, with
    the Python that does it; a fixed float16 file to download."""
    from parity.layers.precision_view import fix_call, precision_lines, quantize_call

    lines = precision_lines(result)
    if not lines:
        return
    with st.container(border=True):
        st.markdown("**What to keep in higher precision**")
        for line in lines:
            st.text(f"• {line}")
        call = quantize_call(result) or fix_call(result)
        if call:
            st.code(call, language="python")
        reference = run.provenance.reference_file
        if fix_call(result) and reference:
            key = (state.FIXED_FP16, reference, tuple(result.findings["keep_float32"]))
            if st.button("Make the fixed float16 file", key=state.LAYERS_MAKE_FIXED):
                from parity.layers.fp16 import convert

                check = result.findings["keep_float32_check"]
                model = convert(reference, bool(check["keep_io_types"]), check["node_block_list"])
                state.put(state.FIXED_FP16, (key, model.SerializeToString()))
            made = state.get(state.FIXED_FP16)
            if made and made[0] == key:
                st.download_button(
                    "Download fixed.onnx",
                    data=made[1],
                    file_name="fixed.onnx",
                    mime="application/octet-stream",
                    key=state.LAYERS_FIXED_DOWNLOAD,
                )


def _on_select() -> None:
    rows = state.selected_rows(state.LAYERS_TABLE)
    frame = state.get(state.LAYERS_FRAME)
    if rows and frame is not None and rows[0] < len(frame):
        row = frame.iloc[rows[0]]
        state.put(state.LAYERS_PICKED, (int(row["order"]), int(row["set"])))


def values_table(run: ValidationRun, result) -> None:
    frame = value_rows(result)
    c1, c2, c3 = st.columns([2, 1, 2])
    statuses = sorted(frame["status"].unique())
    chosen = c1.multiselect("Status", statuses, default=statuses, key=state.LAYERS_STATUS)
    sets = ["all"] + sorted(int(s) for s in frame["set"].unique())
    which = c2.selectbox("Input set", sets, key=state.LAYERS_SET)
    text = c3.text_input("Module, op, node or value contains", key=state.LAYERS_TEXT).strip()
    shown = frame[frame["status"].isin(chosen)]
    if which != "all":
        shown = shown[shown["set"] == which]
    if text:
        hay = shown[["module", "op", "node", "value"]].astype(str)
        hit = hay.apply(lambda col: col.str.contains(text, case=False, regex=False)).any(axis=1)
        shown = shown[hit]
    shown = shown.reset_index(drop=True)
    state.put(state.LAYERS_FRAME, shown)
    st.caption(
        f"{len(shown):,} of {len(frame):,} rows (value × input set), in graph order; click a "
        "header to sort. Select a row whose arrays are kept to open it in the Inspect page."
    )
    st.dataframe(
        status_style(shown),
        hide_index=True,
        width="stretch",
        height=420,
        column_config=COLUMN_CONFIG,
        on_select=_on_select,
        selection_mode="single-row",
        key=state.LAYERS_TABLE,
    )
    picked = state.pop(state.LAYERS_PICKED)
    if picked is None:
        return
    order, input_set = picked
    if views.kept(result, order, input_set) is not None:
        state.set_layer_target(order, input_set)
        state.put(state.LAYERS_GOTO_INSPECT, True)
        st.rerun()
    st.info(
        "The arrays of this value were not kept (the comparison streams every value and keeps "
        "only its statistics; arrays are kept for the first divergence and a few values around "
        "it, to bound memory). Its statistics are in the row above."
    )
    v = views.find_value(result, order, input_set)
    st.text(f"value: {v.onnx_value if v else order} · input set {input_set}")


def model_explorer_download(run: ValidationRun, result, metric: str, pass_line) -> None:
    from parity.layers.model_explorer import node_data

    data = node_data(result, metric=metric, pass_line=pass_line, graph=_graph_name(run.onnx))
    st.download_button(
        f"Download Model Explorer node data ({views.METRICS[metric]})",
        data=data.to_json(),
        file_name=f"parity-layers-{metric}.json",
        mime="application/json",
        icon=":material/download:",
        key=state.LAYERS_ME_DOWNLOAD,
    )
    skipped = f"; {data.skipped} unnamed node(s) left out" if data.skipped else ""
    st.caption(
        f"{data.n_nodes} ONNX nodes coloured{skipped}. In Model Explorer (with "
        "`model_explorer_onnx`), open the ONNX file, then load this file with "
        '"Add per-node data"; purple marks where a divergence starts.'
    )


@st.cache_resource(show_spinner=False, max_entries=8)
def _graph_name_cached(path: str, key: str) -> str:  # noqa: ARG001 - key is the cache key
    from parity.layers.model_explorer import graph_name

    return graph_name(path)


def _graph_name(path: str) -> str:
    from parity.layers.model_explorer import DEFAULT_GRAPH

    try:
        return _graph_name_cached(path, state.file_key(path))
    except OSError:
        return DEFAULT_GRAPH


def page() -> None:
    st.title("Layers")
    if state.pop(state.LAYERS_GOTO_INSPECT, False):
        st.switch_page(routes.INSPECT)
    run = run_or_invite()
    if run is None:
        return
    run = candidate_selector(run, key=state.CANDIDATE_LAYERS)  # each candidate's own layers
    result = getattr(run, "layers", None)
    if result is None:
        _no_layers(run)
        return
    verdict(result)
    repro_download(run, result)
    show_limits(result)
    precision(run, result)
    if not result.values:
        st.warning("No intermediate value was compared, so there is nothing to draw.")
        return

    metric = st.radio(
        "Error measure",
        ["error_ratio", "max_abs"],
        format_func=lambda m: {
            "error_ratio": "error ratio (the criterion's number)",
            "max_abs": "max |error|",
        }[m],
        horizontal=True,
        key=state.LAYERS_METRIC,
    )
    pass_line = views.pass_line(result, metric, run.tolerances.default.atol)
    st.plotly_chart(
        lf.depth_plot(result, metric=metric, threshold=pass_line),
        width="stretch",
        key=state.LAYERS_DEPTH,
    )
    st.subheader("Module tree")
    st.plotly_chart(
        lf.module_tree(result, metric=metric, threshold=pass_line),
        width="stretch",
        key=state.LAYERS_TREE,
    )
    st.subheader("Values in graph order")
    values_table(run, result)
    st.subheader("Model Explorer")
    model_explorer_download(run, result, metric, pass_line)


page()
