"""Session state and cached loaders shared by every page.

The current run lives in `st.session_state` (its arrays are big; Streamlit's caches would
pickle copies). Loaded ONNX signatures and demo exports live in `st.cache_resource`, keyed by
strings (a file's path, size and mtime, or a demo's name) — never by arrays, whose cache
hash Streamlit computes from a sample.
"""

from __future__ import annotations

import inspect
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import streamlit as st

from parity.dashboard.access import may_run
from parity.errors import ParityError, describe_error
from parity.results import ValidationRun
from parity.settings import Front
from parity.tolerances import Tolerances

DEMO_ENV = "PARITY_DEMO"
T = TypeVar("T")

# Every `st.session_state` key (widget keys too) is named here, and only this module touches
# `st.session_state` (tests/test_state_keys.py holds the pages to it): a page reads and writes
# through get/put/pop/has or a named helper below. The string values are what running sessions
# and tests use: never change one.

# --- the current run (every page)
RUN = "parity_run"  # the stored ValidationRun, as run or opened
TOLERANCES = "parity_tolerances"  # the session's Tolerances (the run is re-judged at them)
RUN_ERROR = "parity_run_error"  # RunFailure of the last failed run
SUSPECT = "parity_wrong_pair_run"  # a finished run that likely pairs the wrong files
TARGET = "parity_inspect_target"  # (input set, output) the Inspect page opens on
LAYER_TARGET = "parity_inspect_layer"  # (order, input set) of a layer value to inspect
GOTO_INSPECT = "parity_goto_inspect"  # set by a click on a grid: the Overview switches page
CANDIDATE = "parity_candidate"  # the candidate pages show, of a run with several
VIEWS = "parity_candidate_views"  # run_memo slot: the stored run as each candidate alone

# --- Run page and its form (run.py, run_form.py, running.py)
FORM = "parity_run_form"  # the Run form's widget values, kept while other pages are shown
RUN_CONFIG = "parity_run_config"  # (stored run, the RunConfig that made it): to run it again
FORM_BASE = "parity_run_form_base"  # the RunConfig of the run that filled the form
AUTORUN = "parity_autorun"  # the ?demo=NAME (or PARITY_DEMO) this session has run
RUN_LAYERS = "run_layers"  # widget: the "compare layers" checkbox
RUN_STAGES = "run_stages"  # widget: several ONNX files are one pipeline's stages
RUN_NOISE = "run_noise_floor"  # widget: the "noise floor" checkbox
RUN_JUDGE = "run_judge_cause"  # widget: the "judge by cause" checkbox
LAYERS_DONE = "parity_layers_done"  # a run compared layers: the Run page unticks its box
RUN_MODEL_SOURCE = "model_source"  # widget: where the model comes from (run_form.MODEL_SOURCES)
RUN_MODEL_DEMO = "model_demo"  # widget: the demo's name
RUN_MODEL_PATH = "model_path"  # widget: the model's path (or spec)
RUN_WEIGHTS_PATH = "weights_path"  # widget: the weights' path
RUN_MODEL_UPLOAD = "model_upload"  # widget: an uploaded model
RUN_WEIGHTS_UPLOAD = "w_up"  # widget: uploaded weights
RUN_HF_DIR = "hf_dir"  # widget: a Hugging Face model directory
RUN_HF_PROMPTS = "hf_prompts"  # widget: its prompts, one a line
RUN_HF_STEPS = "hf_steps"  # widget: tokens to generate
RUN_HF_RAND = "hf_rand"  # widget: random weights (config only)
RUN_HF_OVERRIDES = "hf_overrides"  # widget: config overrides, k=v, ...
RUN_HF_EXPORT = "hf_export"  # widget: where to keep Parity's export (typed only; else a temp)
RUN_REF_PATH = "ref_path"  # widget: stored reference outputs' path
RUN_REF_UPLOAD = "ref_upload"  # widget: uploaded reference outputs
RUN_ONNX_SOURCE_PREFIX = "onnx_source_"  # widget prefix: the ONNX file radio, one per model kind
RUN_ONNX_PATH = "onnx_path"  # widget: the ONNX file's path
RUN_ONNX_UPLOAD = "onnx_upload"  # widget: an uploaded ONNX file
RUN_ONNX_MORE = "onnx_more"  # widget: more ONNX files (candidates), one a line
RUN_ONNX_MORE_UPLOAD = "onnx_more_upload"  # widget: more uploaded ONNX files
RUN_DIM_PREFIX = "dim_"  # widget prefix: each symbolic dimension's size
RUN_N_SETS = "n_sets"  # widget: input sets to make
RUN_SEED = "seed"  # widget: their seed
RUN_PROVIDER = "provider"  # widget: execution providers
RUN_OPT = "opt"  # widget: ORT optimisation levels
RUN_LOW_PREFIX = "lo_"  # widget prefix: an integer input's low end
RUN_HIGH_PREFIX = "hi_"  # widget prefix: its high end
RUN_FEEDS_UPLOAD = "feeds_upload"  # widget: uploaded input .npz files
RUN_FEEDS_PATHS = "feeds_paths"  # widget: input .npz paths, one a line
RUN_FLOAT_RANGE = "float_range"  # widget: float inputs' range
RUN_TIMEOUT = "timeout"  # widget: the run's time limit (s)
RUN_DATA_PATH = "data_path"  # widget: the data set (--data)
RUN_DATA_LABELS = "data_labels"  # widget: its labels (--labels)
RUN_DATA_BATCH = "data_batch"  # widget: its batch size (--batch-size)
RUN_DATA_LIMIT = "data_limit"  # widget: samples to read, 0 = all (--limit)
RUN_DATA_PREPROCESS = "data_preprocess"  # widget: its preprocess FILE.py:FN (--preprocess)
RUN_DEMO_PREFIX = "demo_"  # widget prefix: each demo's Run button
RUN_CUSTOM = "run_custom"  # widget: the Run button
RUN_OPEN_WRONG_PAIR = "open_wrong_pair"  # widget: "Open this run anyway"

# --- uploads (uploads.py)
UPLOADS = "parity_uploads"  # True once this session uploaded: its folder exists (or is remade)

# --- page frame (frame.py)
SWEEP_LANDED = "parity_sweep_landed"  # ?sweep=DIR has opened the Sweep page once

# --- candidates (candidates.py): the selector's widget key on each page, the Overview's views
CANDIDATE_OVERVIEW = "candidate_overview"  # widget: the Overview's candidate selectbox
CANDIDATE_INSPECT = "candidate_inspect"  # widget: the Inspect page's candidate selectbox
CANDIDATE_LAYERS = "candidate_layers"  # widget: the Layers page's candidate selectbox
CANDIDATE_TOLERANCES = "candidate_tolerances"  # widget: the Tolerances page's selectbox
CANDIDATE_GENERATION = "parity_generation_candidate"  # widget: the Generation page's one
CANDIDATES_TABLE = "candidates_table"  # widget: the candidates table
CANDIDATES_GRID = "candidates_grid"  # widget: the candidates x outputs grid (its selection)

# --- Samples (samples.py)
SAMPLES_OUTPUT = "parity_samples_output"  # widget: the Samples page's output selectbox
SAMPLES_FLIPS = "parity_samples_flips"  # widget prefix: the changed samples table (+ output)
SAMPLES_INSPECT = "parity_samples_inspect"  # widget prefix: a worst sample's Inspect button
SAMPLES_NOT_KEPT = "parity_samples_not_kept"  # the changed sample picked whose arrays are gone
SAMPLE_TARGET = "parity_inspect_sample"  # (output, sample number) the Inspect page opens on
INSP_SAMPLE_BACK = "insp_sample_back"  # widget: "Back to the outputs" from a data sample

# --- Overview (overview.py)
OVERVIEW_TABLE = "overview_table"  # widget: the outputs table (a selection opens Inspect)
OVERVIEW_GRID = "overview_grid"  # widget: the outputs x input sets grid (likewise)
INSPECT_WORST = "inspect_worst"  # widget: the "inspect the worst failure" button

# --- Inspect (inspect_page.py, where_views.py)
INSPECT_CACHE = "parity_inspect_cache"  # run_memo slot: the Inspect page's tensor views
WHERE_CACHE = "parity_where_cache"  # run_memo slot: where-the-errors-are profiles
INSP_APPLIED = "insp_applied"  # the TARGET last applied to the two selectboxes
INSP_OUT = "insp_out"  # widget: the output selectbox
INSP_SET = "insp_set"  # widget: the input set selectbox
INSP_LAYER_BACK = "insp_layer_back"  # widget: "Back to the outputs" from a layer value
INSP_WHERE = "insp_where"  # widget: the where-the-errors-are chart
INSP_KIND = "insp_kind"  # widget: which error the heatmap shows
INSP_LOG = "insp_log"  # widget: log colour scale
INSP_HEATMAP = "insp_heatmap"  # widget: the heatmap
INSP_SIDE = "insp_side"  # widget: the side-by-side view's choice
INSP_HIST = "insp_hist"  # widget: the error histogram
INSP_SCATTER = "insp_scatter"  # widget: the ref vs onnx scatter
INSP_SLICE_PREFIX = "insp_"  # widget prefix: the slice choosers, + "{set}_{output}_row", ...

# --- Layers (layers.py)
LAYERS_GOTO_INSPECT = "parity_layers_goto_inspect"  # a picked row: the page opens Inspect
FIXED_FP16 = "parity_fixed_fp16"  # (what it was made from, its bytes): the Layers page's fix
LAYERS_FRAME = "parity_layers_frame"  # the Layers page's table as shown (filtered)
LAYERS_PICKED = "parity_layers_picked"  # (order, input set) of the row selected in it
LAYERS_TABLE = "layers_table"  # widget: the values table (its selection)
LAYERS_RERUN = "layers_rerun"  # widget: the "run again with layers" button
LAYERS_REPRO_ZIP = "layers_repro_zip"  # widget: the repro zip download
LAYERS_MAKE_FIXED = "layers_make_fixed"  # widget: "Make the fixed float16 file"
LAYERS_FIXED_DOWNLOAD = "layers_fixed_download"  # widget: its download
LAYERS_STATUS = "layers_status"  # widget: the status filter
LAYERS_SET = "layers_set"  # widget: the input set filter
LAYERS_TEXT = "layers_text"  # widget: the "contains" filter
LAYERS_ME_DOWNLOAD = "layers_me_download"  # widget: the Model Explorer data download
LAYERS_METRIC = "layers_metric"  # widget: the metric the figures show
LAYERS_DEPTH = "layers_depth"  # widget: the module tree's depth
LAYERS_TREE = "layers_tree"  # widget: the module tree

# --- Saved runs (saved_runs.py, in the sidebar)
SAVED_OPEN_PATH = "parity_saved_open_path"  # widget: the path of a saved run to open
SAVED_UPLOAD = "parity_saved_upload"  # widget: an uploaded saved run
SAVED_SAVE_PATH = "parity_saved_save_path"  # widget: where to save the current run
SAVED_OPEN = "parity_saved_open"  # widget: the Open button
SAVED_SAVE = "parity_saved_save"  # widget: the Save button
SAVED_MESSAGE = "parity_saved_message"  # the sidebar's word on the saved run last opened
SAVED_OPENED = "parity_saved_initial"  # the ?run=PATH this session has opened
TAB_TOKEN = "parity_tab_token"  # this tab's key to its kept run (parity.dashboard.keep)
TAB_RESTORED = "parity_tab_restored"  # the session has looked for a kept run once
LINKED_RUN = "parity_linked_run"  # a run a ?run= link opened, read-only until confirmed
LINK_CONFIRM = "parity_link_confirm"  # widget: "Use this run's settings in the Run form"

# --- Sweep (sweep.py)
SWEEP_FOLDER = "parity_sweep_folder"  # the SweepFolder opened
SWEEP_PATH = "parity_sweep_path"  # widget: the folder's path
SWEEP_OPEN = "parity_sweep_open"  # widget: the Open button
SWEEP_ERROR = "parity_sweep_error"  # why the last open failed (one line)
SWEEP_OPENED = "parity_sweep_initial"  # the ?sweep=DIR this session has opened
SWEEP_ONLY_BAD = "parity_sweep_only_bad"  # widget: "Only failing and error pairs"
SWEEP_TABLE = "parity_sweep_table"  # widget: the pairs table (its selection)
SWEEP_PICKED = "parity_sweep_picked"  # the pair picked in it
SWEEP_GOTO_OVERVIEW = "parity_sweep_goto_overview"  # a pair opened: the page goes to Overview

# --- Tolerances (tolerances.py)
TOL_EDITOR_PREFIX = "tol_editor_"  # widget prefix: the per-output editor (+ a nonce)
TOL_EDIT_ERROR = "tol_edit_error"  # the lines a refused edit left
TOL_EDIT_NONCE = "tol_edit_nonce"  # bumped on each edit: the editor is drawn afresh
TOL_ATOL = "tol_atol"  # widget: the default atol slider
TOL_RTOL = "tol_rtol"  # widget: the default rtol slider
TOL_SUGGEST_NOISE = "tol_suggest_noise"  # widget: "suggest from the noise floor"
TOL_PASS_TABLE = "tol_pass_table"  # widget: the pass table
TOL_MARGIN = "tol_margin"  # widget: the suggestion's margin
TOL_SUGGEST = "tol_suggest"  # widget: the suggest button
TOL_DOWNLOAD = "tol_download"  # widget: the tolerances file download
TOL_CURVE_PREFIX = "tol_curve_"  # widget prefix: each output's pass-rate curve
TOL_CURVES = "tol_curves"  # run_memo slot: mismatch-vs-atol curves
TOL_SUGGESTED = "tol_suggested"  # the last checked suggestion (SuggestedTolerances)

# --- Generation (generation.py)
GEN_TOKENS_PREFIX = "parity_generation_tokens_"  # widget prefix: each prompt's token table
GEN_KV_PREFIX = "parity_generation_kv_"  # widget prefix: each KV-cache figure
GEN_PADDED = "parity_generation_padded"  # the left-padded batch's table


@dataclass(frozen=True)
class RunFailure:
    """The last failed run: one line on screen, the rest folded away."""

    kind: str
    message: str
    detail: str


# ------------------------------------------------------------------------- plain access


def get(key: str, default: object = None):
    """The value under `key` (a constant above), else `default`."""
    return st.session_state.get(key, default)


def put(key: str, value: object) -> None:
    st.session_state[key] = value


def pop(key: str, default: object = None):
    """Remove `key`; its value, else `default`."""
    return st.session_state.pop(key, default)


def has(key: str) -> bool:
    return key in st.session_state


def put_if_changed(key: str, value: object) -> None:
    """Set `key` only when it differs: writing a widget's key on every rerun would make
    Streamlit log a Session State API warning for a widget given a default."""
    if st.session_state.get(key) != value:
        st.session_state[key] = value


# ------------------------------------------------------------------------- the current run


def current_run() -> ValidationRun | None:
    """The run as judged at the session's tolerances (a re-judge: milliseconds)."""
    run: ValidationRun | None = st.session_state.get(RUN)
    if run is None:
        return None
    tolerances = st.session_state.get(TOLERANCES, run.tolerances)
    return run if tolerances == run.tolerances else run.rejudge(tolerances)


def raw_run() -> ValidationRun | None:
    return st.session_state.get(RUN)


def set_run(run: ValidationRun) -> None:
    """Make `run` the current run; its own tolerances become the session's."""
    st.session_state[RUN] = run
    st.session_state[TOLERANCES] = run.tolerances
    st.session_state.pop(RUN_ERROR, None)
    st.session_state.pop(SUSPECT, None)
    st.session_state.pop(TARGET, None)
    st.session_state.pop(LAYER_TARGET, None)
    st.session_state.pop(SAMPLE_TARGET, None)
    st.session_state.pop(VIEWS, None)
    st.session_state.pop(SAVED_MESSAGE, None)  # "Opened FILE" is stale once another run shows
    st.session_state[CANDIDATE] = _first_bad_candidate(run)


def _first_bad_candidate(run: ValidationRun) -> int:
    """Pages open on the first candidate that fails by something the file did not mean (red:
    a bug, an error, a difference nothing explains), else the first that does not pass (amber:
    its precision's rounding, ...), else the first."""
    from parity.show.cause_labels import run_cause

    views = run.candidates
    bad = [v.index for v in views if v.verdict == "fail"]
    red = [i for i in bad if not run_cause(run, i).intended] if len(bad) > 1 else bad
    return (red or bad or [views[0].index])[0]


def candidate_index(run: ValidationRun) -> int:
    """The candidate the pages show (a valid index of `run`)."""
    chosen = st.session_state.get(CANDIDATE)
    indices = [i.index for i in run.infos]
    return chosen if chosen in indices else indices[0]


def set_candidate(index: int) -> None:
    st.session_state[CANDIDATE] = int(index)


def current_view() -> ValidationRun | None:
    """The current run (re-judged) as the chosen candidate alone: what single-candidate
    views read. The same as current_run() for a run with one candidate."""
    run = current_run()
    return None if run is None else run.for_candidate(candidate_index(run))


def raw_view() -> ValidationRun | None:
    """The stored run as the chosen candidate alone, the same object on every rerun (pages
    key per-run caches on it)."""
    run = raw_run()
    if run is None:
        return None
    index = candidate_index(run)
    return run_memo(VIEWS, run, index, lambda: run.for_candidate(index))


def run_memo(slot: str, run: object, key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()` once per `key` for as long as `run` is the run held in session slot `slot`
    (a new run starts the slot over): the per-run memo of views that read tensors, kept in
    the session (not pickled). Key on the stored run (raw_run, raw_view), the same object on
    every rerun, never on one re-judged for this rerun."""
    box = st.session_state.get(slot)
    if box is None or box["run"] is not run:
        box = {"run": run, "entries": {}}
        st.session_state[slot] = box
    entries = box["entries"]
    if key not in entries:
        entries[key] = compute()
    return entries[key]


def tolerances() -> Tolerances:
    run = raw_run()
    default = run.tolerances if run is not None else Tolerances()
    return st.session_state.get(TOLERANCES, default)


def set_tolerances(value: Tolerances) -> None:
    st.session_state[TOLERANCES] = value


def set_suspect(run: ValidationRun) -> None:
    """A finished run that likely pairs a model with another model's ONNX file
    (parity.labels.wrong_pair_note): held aside, the last good run stays current."""
    st.session_state[SUSPECT] = run
    st.session_state.pop(RUN_ERROR, None)


def suspect_run() -> ValidationRun | None:
    return st.session_state.get(SUSPECT)


def set_failure(error: BaseException) -> None:
    """Remember why the last run failed; the previous good run stays current."""
    kind, message = describe_error(error)
    if isinstance(error, ParityError):  # the form's widgets, not the CLI's flags
        message = error.words(Front.DASHBOARD)
    detail = isinstance(error, ParityError) and error.detail
    detail = detail or "".join(traceback.format_exception(error)).strip()
    st.session_state[RUN_ERROR] = RunFailure(kind, message, detail)


def last_failure() -> RunFailure | None:
    return st.session_state.get(RUN_ERROR)


def set_target(input_set: int, name: str) -> None:
    """The (input set, output) the Inspect page opens on."""
    st.session_state[TARGET] = (int(input_set), str(name))
    st.session_state.pop(LAYER_TARGET, None)
    st.session_state.pop(SAMPLE_TARGET, None)


def target() -> tuple[int, str] | None:
    return st.session_state.get(TARGET)


def set_sample_target(output: str, sample: int) -> None:
    """A data sample (--data: one whose arrays the run kept) for the Inspect page to open."""
    st.session_state[SAMPLE_TARGET] = (str(output), int(sample))
    st.session_state.pop(LAYER_TARGET, None)


def sample_target() -> tuple[str, int] | None:
    return st.session_state.get(SAMPLE_TARGET)


def clear_sample_target() -> None:
    st.session_state.pop(SAMPLE_TARGET, None)


def set_layer_target(order: int, input_set: int) -> None:
    """An intermediate value (of the run's layers comparison) for the Inspect page to open."""
    st.session_state[LAYER_TARGET] = (int(order), int(input_set))
    st.session_state.pop(SAMPLE_TARGET, None)


def layer_target() -> tuple[int, int] | None:
    return st.session_state.get(LAYER_TARGET)


def clear_layer_target() -> None:
    st.session_state.pop(LAYER_TARGET, None)


def selected_rows(widget_key: str) -> list[int]:
    """The rows selected in the dataframe drawn under `widget_key` (on_select)."""
    event = st.session_state.get(widget_key)
    return list(event.selection.rows) if event is not None else []


def selected_points(widget_key: str) -> list:
    """The points selected in the plotly chart drawn under `widget_key` (on_select)."""
    event = st.session_state.get(widget_key)
    return list(event.selection.points) if event is not None else []


# ------------------------------------------------------------------------- the Run form


def form_widget(widget: Callable[..., T], *args, key: str, default: object = None, **kwargs) -> T:
    """Draw the Run form's widget `key` (`widget(*args, key=key, **kwargs)`: `st.number_input`,
    a column's `checkbox`, ...) with its value kept across pages; return the widget's value.

    Streamlit drops a widget's key at the end of a rerun that does not draw it (another page
    was shown), so the form would come back at its defaults. Its value lives on in a plain
    key (FORM, refreshed by `keep_form` each time the form is drawn) and is put back in the
    widget's key before it is drawn; a key never seen takes `default`.

    The widget's own default (value, default or index) is always its current value, so a
    widget the browser mounts afresh shows what the form holds instead of the call's
    literal. It is given even on the rerun that set the key through the Session State API
    (Streamlit then sends that value, and only logs that both were given: the dashboard
    turns that log off, `global.disableWidgetStateDuplicationWarning`). It was left out on
    such a rerun before, by bookkeeping that a rerun cut short (by st.rerun or a click)
    could leave stale, so that the next rerun mounted the widget with neither: the suspected
    cause (not reproduced) of an emptied providers list that left Run off. Defaults are
    not part of these widgets' identity (Streamlit's key_as_main_identity), so this makes no
    new widget. A number_input given no value takes its type from its other numbers: give
    an integer one an int min_value, max_value or step.
    """
    kept = st.session_state.setdefault(FORM, {})
    if key not in st.session_state:
        value = kept.get(key)
        value = default if value is None else value
        if value is not None:
            st.session_state[key] = value
    kept.setdefault(key, st.session_state.get(key))
    call = inspect.signature(widget).bind_partial(*args, key=key, **kwargs)
    if key in st.session_state:
        own_default(call, st.session_state[key])
    return widget(*call.args, **call.kwargs)


def own_default(call: inspect.BoundArguments, value: Any) -> None:
    """Make `value` the widget's own default in `call` (its value, default or index
    argument, whichever its function takes), or leave that argument out (a value its
    options cannot show)."""
    params = call.signature.parameters
    name = next((n for n in ("index", "default", "value") if n in params), None)
    if name is None:
        return
    call.arguments.pop(name, None)
    options = list(call.arguments.get("options", ()))
    if name == "index":  # radio, selectbox: the position of the value among the options
        if value not in options:
            return
        value = options.index(value)
    elif name == "default":  # multiselect: only what it can show
        value = [v for v in value if v in options]
    call.arguments[name] = value


def keep_form() -> None:
    """Remember every seeded form widget's value as it is now (call after the form)."""
    kept = st.session_state.setdefault(FORM, {})
    for key in list(kept):
        if key in st.session_state:
            kept[key] = st.session_state[key]


def set_form(values: dict) -> None:
    """Make the form show `values` (a demo that ran, a layers re-run): set before the form
    is drawn on this rerun."""
    st.session_state.setdefault(FORM, {}).update(values)
    st.session_state.update(values)


def set_run_config(run: ValidationRun, config) -> None:
    """The RunConfig that made the current run (None for a reopened saved run)."""
    st.session_state[RUN_CONFIG] = (run, config)


def run_config_of(run: ValidationRun | None):
    """The RunConfig behind `run` when this session made it, else None."""
    kept = st.session_state.get(RUN_CONFIG)
    return kept[1] if kept is not None and run is not None and kept[0] is run else None


# ------------------------------------------------------------------------- files and caches


def upload_limit_mb() -> int:
    return int(st.get_option("server.maxUploadSize"))


def file_key(path: str) -> str:
    """Cheap identity of a file on disk for cache keys: path, size and mtime."""
    stat = Path(path).stat()
    return f"{Path(path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


@st.cache_resource(show_spinner=False, max_entries=16)
def _load_onnx(path: str, key: str):  # noqa: ARG001 - key is the cache key
    from parity.load.onnx_model import load_onnx

    return load_onnx(path)


def load_onnx_cached(path: str):
    """`parity.load.onnx_model.load_onnx`, cached per file identity (raises OnnxLoadError)."""
    from parity.errors import OnnxLoadError

    try:
        key = file_key(path)
    except OSError as exc:
        raise OnnxLoadError(f"cannot load ONNX file {path}: {exc.strerror or exc}") from exc
    with _REFUSED_LOCK:
        said = _REFUSED.get(key)
    if said is not None:  # refused before, unchanged since: not read again on every rerun
        raise OnnxLoadError(said)
    try:
        return _load_onnx(path, key)
    except OnnxLoadError as exc:
        with _REFUSED_LOCK:
            _REFUSED[key] = exc.message
            while len(_REFUSED) > _MAX_REFUSED:
                _REFUSED.pop(next(iter(_REFUSED)))
        raise


_REFUSED: dict[str, str] = {}
"""Files refused as ONNX, by identity (path, size, mtime) -> the one line: a 2 GB file that
is not ONNX is read once, not on every rerun of every session (Streamlit caches no failure)."""
_REFUSED_LOCK = threading.Lock()
_MAX_REFUSED = 64


@st.cache_resource(show_spinner=False, max_entries=8)
def _session(_model, sha256: str, provider: str, opt_level: str):  # noqa: ARG001 - cache key
    from parity.load.onnx_model import make_session

    return make_session(_model, provider=provider, opt_level=opt_level)


def _session_cached(model, *, provider: str, opt_level: str):
    """One ONNX Runtime session per (ONNX content hash, provider, optimisation level)."""
    return _session(model, model.sha256, provider, opt_level)


@st.cache_resource(show_spinner=False, max_entries=8)
def _torch_model(
    spec: str,
    weights: str | None,
    key: str,  # noqa: ARG001
    allow_code: bool,
    max_memory: int | None = None,
):
    from parity.load.torch_model import load_torch_model

    return load_torch_model(spec, weights=weights, allow_code=allow_code, max_memory=max_memory)


def _torch_model_cached(spec: str, *, weights: str | None = None, max_memory: int | None = None):
    """The loaded torch model, reused while the files behind `spec` and `weights` are unchanged.

    TorchScript and Python factories are refused (one line) unless the app trusts code, or
    the spec is the one its command line validated (parity.dashboard.access.may_run).
    """
    parts = [spec]
    for path in (spec.rpartition(":")[0] if ".py:" in spec else spec, weights):
        if path and Path(path).is_file():
            parts.append(file_key(path))
    return _torch_model(spec, weights, "|".join(parts), may_run(spec), max_memory)


def cached_loaders():
    """`parity.pipeline.Loaders` backed by this process's caches (shared across sessions)."""
    from parity.pipeline import Loaders

    return Loaders(
        load_onnx=load_onnx_cached,
        make_session=_session_cached,
        load_torch_model=_torch_model_cached,
    )


@st.cache_resource(show_spinner="Exporting the demo model (first use only)...")
def demo_onnx_path(name: str) -> str:
    from parity.load.demos import demo_onnx_path as export

    return str(export(name))


def demo_names() -> list[str]:
    from parity.load.demos import DEMOS

    return list(DEMOS)


def available_providers() -> list[str]:
    import onnxruntime

    return list(onnxruntime.get_available_providers())


def timed(fn, *args, **kwargs):
    """(result, milliseconds)."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, (time.perf_counter() - t0) * 1000.0
