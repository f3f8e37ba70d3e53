"""The Run form is the run on screen: a run opened from elsewhere (`parity dashboard --model
...`, a saved run, a sweep pair, an upload) fills the form with the settings that made it
(`parity.run.config_json.config_of_run`), so Run makes it again with what the user changed.

The form's widget keys live here, beside the one function that maps a RunConfig onto them;
the Run page draws the widgets under these keys. An opened run can change only what the form
shows (`parity.run.config_json.reopened`): its budgets, an hf: export path and task are
dropped; its tolerances are the ones the Tolerances page shows.
"""

from __future__ import annotations

import json
from typing import Any

from parity.dashboard import state
from parity.load.specs import demo_name, is_hf_spec
from parity.results import RunKind, ValidationRun
from parity.run.config_json import is_demo_export

N_SETS_DEFAULT = 2
LIMITS = {  # (min, max) of the form's number inputs: a run opened from elsewhere is clamped
    "n_sets": (1, 16),
    "seed": (0, 2**31 - 1),
    "timeout": (0, 86400),
    "dim": (1, 1 << 20),
    "hf_steps": (1, 64),
    "batch": (1, 1 << 16),
    "limit": (0, 1 << 40),
}

MODEL_SOURCES = (
    DEMO := "Built-in demo",
    PATH := "Path on this machine",
    UPLOAD := "Upload",
    HF := "Hugging Face directory (LLM)",
    REFERENCE := "Stored reference outputs",
    ONNX_ONLY := "None: ONNX against ONNX",
)
DEMO_EXPORT = "The demo's export"
HF_EXPORT_CHOICE = "Let Parity export it"
ONNX_PATH = "Path on this machine"


def onnx_source_key(*, demo: bool, hf: bool) -> str:
    """The key of the "ONNX file" radio: one per kind of model (their options differ)."""
    return f"{state.RUN_ONNX_SOURCE_PREFIX}{'hf' if hf else bool(demo)}"


def form_values(config) -> dict[str, Any]:
    """The Run form's widget values that show `config` (a parity.run.config.RunConfig)."""
    values: dict[str, Any] = {
        state.RUN_LAYERS: bool(config.layers),
        state.RUN_STAGES: bool(getattr(config, "stages", False)),
        state.RUN_NOISE: bool(config.noise_floor),
        state.RUN_JUDGE: config.judge == "cause",
        state.RUN_N_SETS: _clamped(config.n_input_sets or N_SETS_DEFAULT, "n_sets"),
        state.RUN_SEED: _clamped(config.seed, "seed"),
        state.RUN_PROVIDER: list(config.providers),
        state.RUN_OPT: list(config.ort_opt_levels),
        state.RUN_TIMEOUT: _clamped(round(config.timeout or 0), "timeout"),
        state.RUN_FEEDS_PATHS: "\n".join(config.input_files),
        **{state.RUN_DIM_PREFIX + n: _clamped(size, "dim") for n, size in config.dims.items()},
        **data_values(config.data),
    }
    for name, (low, high) in config.int_ranges.items():
        values.update(
            {state.RUN_LOW_PREFIX + name: int(low), state.RUN_HIGH_PREFIX + name: int(high)}
        )
    files = list(config.onnx_files)
    first, more = (files[0], files[1:]) if files else (None, [])
    if demo_name(config.model) is not None and first is not None and is_demo_export(first):
        first = None  # "The demo's export": the form gives the cached file's path
    values[state.RUN_ONNX_MORE] = "\n".join(more)
    if first is not None:
        values[state.RUN_ONNX_PATH] = first
    demo = demo_name(config.model)
    hf = is_hf_spec(config.model)
    kind = config.kind
    if kind is RunKind.ONNX:
        values[state.RUN_MODEL_SOURCE] = ONNX_ONLY
    elif kind is RunKind.REFERENCE:
        values.update(
            {state.RUN_MODEL_SOURCE: REFERENCE, state.RUN_REF_PATH: config.reference_file or ""}
        )
    elif hf:
        values.update(
            {state.RUN_MODEL_SOURCE: HF, state.RUN_HF_DIR: config.model.removeprefix("hf:")}
        )
        values.update(_hf_values(config.hf))
    elif demo is not None:
        values.update({state.RUN_MODEL_SOURCE: DEMO, state.RUN_MODEL_DEMO: demo})
    else:
        path = {state.RUN_MODEL_PATH: config.model, state.RUN_WEIGHTS_PATH: config.weights or ""}
        values.update({state.RUN_MODEL_SOURCE: PATH, **path})
    own_export = DEMO_EXPORT if demo is not None else HF_EXPORT_CHOICE
    key = onnx_source_key(demo=demo is not None, hf=hf)
    values[key] = own_export if first is None and (demo or hf) else ONNX_PATH
    return values


def data_values(data) -> dict[str, Any]:
    """The data set fields' values that show `data` (a DataOptions, or None: the fields
    emptied, so a run on generated inputs is not made on the last data set typed)."""
    if data is None:
        return {state.RUN_DATA_PATH: ""}
    return {
        state.RUN_DATA_PATH: data.path,
        state.RUN_DATA_LABELS: data.labels or "",
        state.RUN_DATA_BATCH: _clamped(data.batch_size, "batch"),
        state.RUN_DATA_LIMIT: _clamped(data.limit or 0, "limit"),
        state.RUN_DATA_PREPROCESS: data.preprocess or "",
    }


def _clamped(value: int, key: str) -> int:
    low, high = LIMITS[key]
    return min(max(int(value), low), high)


def _hf_values(options) -> dict[str, Any]:
    if options is None:
        return {}
    overrides = ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        for k, v in options.config_overrides.items()
    )
    return {
        state.RUN_HF_PROMPTS: "\n".join(options.prompts),
        state.RUN_HF_STEPS: _clamped(options.max_new_tokens, "hf_steps"),
        state.RUN_HF_RAND: bool(options.random_weights),
        state.RUN_HF_OVERRIDES: overrides,
        state.RUN_HF_EXPORT: "",  # an opened run's export path is never kept
    }


def fill_from_run(run: ValidationRun, own=None) -> bool:
    """Make the Run form show the settings that made `run` (call before the form is drawn on
    this rerun: from a callback, or before the page runs). False when the run does not say
    them; the form is then left as it was. `own`: the RunConfig this dashboard made `run`
    with (a reloaded tab's), which also gives its data set: a run's own record does not
    give that again (a file names it, the user did not type it here)."""
    from parity.run.config_json import config_of_run, reopened

    config = own if own is not None else config_of_run(run)
    if config is None:
        state.pop(state.FORM_BASE)
        return False
    config = reopened(config)
    values = form_values(config)
    providers = [p for p in values[state.RUN_PROVIDER] if p in state.available_providers()]
    values[state.RUN_PROVIDER] = providers or ["CPUExecutionProvider"]  # what this machine has
    state.set_form(values)
    state.put(state.FORM_BASE, config)
    return True


def kept_settings(model: str | None) -> dict[str, Any]:
    """The tolerances the Tolerances page shows (the ones tuned there, else the run's own),
    for a Run of the same model as the run that filled the form (another model starts at the
    defaults: its outputs have other names). Nothing else: budgets are the server's own,
    never an opened file's."""
    base = state.run_config_of(state.raw_run()) or state.get(state.FORM_BASE)
    if base is None or base.model != model:
        return {}
    return {"tolerances": state.tolerances()}
