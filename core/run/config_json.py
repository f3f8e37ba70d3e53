"""A run's settings as JSON, carried by the run (`Provenance.config`) and its saved file, so
that a run opened later (`parity dashboard RUN.parity.npz`, `--model ...`, a sweep pair) can be
shown in the dashboard's Run form and made again with what the user changes.

Only what defines the run is kept: the files as the user named them (no ONNX file for a demo's
or an hf: model's own export), the inputs' settings, the candidates, the switches. Arrays
given to the Python API as feeds are not (their count is: `given_feeds`). The tolerances are
the run's own (`ValidationRun.tolerances`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import parity.files.strict_json as sj
from parity.errors import ParityError
from parity.load.specs import demo_name, is_hf_spec
from parity.results import ValidationRun
from parity.run.config import RunConfig
from parity.run.hf_options import HfOptions
from parity.tolerances import Tolerances
from parity.verdict import Judge, judge_of


def config_json(config: RunConfig) -> dict[str, Any]:
    """`config` as JSON-native values (lists, dicts), equal to itself after a JSON round trip."""
    hf = config.hf
    return {
        "model": config.model,
        "onnx": list(config.onnx_files),
        "weights": config.weights,
        "dims": {str(k): int(v) for k, v in config.dims.items()},
        "n_input_sets": None if config.n_input_sets is None else int(config.n_input_sets),
        "seed": int(config.seed),
        "int_ranges": {str(k): [int(lo), int(hi)] for k, (lo, hi) in config.int_ranges.items()},
        "input_files": [str(p) for p in config.input_files],
        "given_feeds": len(config.feeds),
        "providers": list(config.providers),
        "ort_opt_levels": list(config.ort_opt_levels),
        "reference_file": config.reference_file,
        "hf": None
        if hf is None
        else {
            "prompts": list(hf.prompts),
            "max_new_tokens": int(hf.max_new_tokens),
            "random_weights": bool(hf.random_weights),
            "config_overrides": dict(hf.config_overrides),
            "export_path": hf.export_path,
            "task": hf.task,
        },
        "layers": bool(config.layers),
        "layers_memory_mb": int(config.layers_memory_mb),
        "noise_floor": bool(config.noise_floor),
        "noise_floor_default": bool(config.noise_floor_default),
        "suggest": bool(config.suggest),
        "quantized_reference": bool(config.quantized_reference),
        "judge": str(config.judge),
        "stages": bool(config.stages),
        "timeout": None if config.timeout is None else float(config.timeout),
        "max_memory": config.max_memory,
        # what --data read, for the record: a reopened run is not given it again (a
        # --preprocess file is code, and runs only from a path the user typed)
        "data": None if config.data is None else _data_json(config.data),
    }


def _data_json(data: Any) -> dict[str, Any]:
    from parity.files.uris import redacted_text  # a presigned URI's signature never stored

    return {
        "path": redacted_text(data.path),
        "batch_size": int(data.batch_size),
        "limit": data.limit,
        "preprocess": data.preprocess,
        "labels": None if data.labels is None else redacted_text(data.labels),
        "max_bad": float(data.max_bad),
        "tasks": dict(data.tasks),
        "min_agreement": {k: float(v) for k, v in data.min_agreement.items()},
    }


def config_from_json(data: Mapping[str, Any], tolerances: Tolerances | None = None) -> RunConfig:
    """The RunConfig `config_json` wrote (at `tolerances`); strict_json.FieldError names the
    first field that is not what it should be. Fields a newer Parity added are ignored."""
    data = sj.obj(dict(data), "config")

    def get(key: str, check, default: Any = None, **kwargs: Any) -> Any:
        return (
            sj.optional(check, data.get(key), f"config.{key}", **kwargs) if key in data else default
        )

    def texts(key: str) -> tuple[str, ...]:
        items = sj.array(data.get(key) or [], f"config.{key}")
        return tuple(sj.string(v, f"config.{key}[{i}]") for i, v in enumerate(items))

    dims = {
        sj.string(k, "config.dims"): sj.integer(v, f"config.dims.{k}", minimum=1)
        for k, v in sj.obj(data.get("dims") or {}, "config.dims").items()
    }
    ranges = {}
    for name, pair in sj.obj(data.get("int_ranges") or {}, "config.int_ranges").items():
        at = f"config.int_ranges.{name}"
        pair = sj.array(pair, at)
        if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in pair):
            raise sj.FieldError(f"{at}: expected [low, high], got {pair!r}")
        ranges[name] = (int(pair[0]), int(pair[1]))
    onnx = texts("onnx")
    providers = texts("providers") or ("CPUExecutionProvider",)
    levels = texts("ort_opt_levels") or ("all",)
    return RunConfig(
        model=get("model", sj.string),
        onnx=onnx or None,
        weights=get("weights", sj.string),
        dims=dims,
        n_input_sets=get("n_input_sets", sj.integer, None, minimum=1),
        seed=get("seed", sj.integer, 0) or 0,
        int_ranges=ranges,
        input_files=texts("input_files"),
        provider=providers,
        ort_opt_level=levels,
        tolerances=tolerances or Tolerances(),
        reference_file=get("reference_file", sj.string),
        hf=_hf_from_json(data.get("hf")),
        layers=bool(get("layers", sj.boolean, False)),
        layers_memory_mb=get("layers_memory_mb", sj.integer, 1024, minimum=1) or 1024,
        noise_floor=bool(get("noise_floor", sj.boolean, False)),
        noise_floor_default=bool(get("noise_floor_default", sj.boolean, True)),
        suggest=bool(get("suggest", sj.boolean, False)),
        quantized_reference=bool(get("quantized_reference", sj.boolean, True)),
        judge=_judge_from_json(data.get("judge", "tolerance")),
        stages=bool(get("stages", sj.boolean, False)),
        timeout=get("timeout", sj.number, None, minimum=0.0) or None,
        max_memory=get("max_memory", sj.integer),
    )


def _judge_from_json(raw: Any) -> Judge:
    text = sj.string(raw, "config.judge")
    try:
        return judge_of(text)
    except ValueError as exc:
        raise sj.FieldError(f"config.judge: {exc}") from None


def _hf_from_json(raw: Any) -> HfOptions | None:
    if raw is None:
        return None
    raw = sj.obj(raw, "config.hf")
    prompts = sj.array(sj.field(raw, "prompts", "config.hf"), "config.hf.prompts")
    return HfOptions(
        prompts=tuple(sj.string(p, f"config.hf.prompts[{i}]") for i, p in enumerate(prompts)),
        max_new_tokens=sj.integer(raw.get("max_new_tokens", 1), "config.hf.max_new_tokens"),
        random_weights=sj.boolean(raw.get("random_weights", False), "config.hf.random_weights"),
        config_overrides=sj.obj(raw.get("config_overrides") or {}, "config.hf.config_overrides"),
        export_path=sj.optional(sj.string, raw.get("export_path"), "config.hf.export_path"),
        task=sj.optional(sj.string, raw.get("task"), "config.hf.task"),
    )


def config_of_run(run: ValidationRun) -> RunConfig | None:
    """The settings that made `run`, at its tolerances: the ones it carries, else (a run saved
    before runs carried them) what its files, candidates and input sets tell. None when they
    cannot be read (a hand-edited file); the run itself still opens."""
    from parity.load.specs import onnx_reference_path, reference_path

    carried = run.provenance.config
    if carried is not None:
        try:
            config = config_from_json(carried, run.tolerances)
        except (sj.FieldError, ParityError):
            return None
        if config.model is not None and config.model != run.model:
            return None  # it would run another model than the one the run names
        return config
    p = run.provenance
    infos = run.infos
    files = tuple(dict.fromkeys(i.onnx for i in infos))
    model: str | None = run.model
    reference = reference_path(run.model)
    if reference is not None or onnx_reference_path(run.model) is not None:
        model = None
    if (reference_onnx := onnx_reference_path(run.model)) is not None:
        files = (reference_onnx, *files)
    if demo_name(model) is not None and all(is_demo_export(f) for f in files):
        files = ()  # the demo's own export: made (or found in the cache) again
    return RunConfig(
        model=model,
        onnx=files or None,
        weights=p.weights_file,
        n_input_sets=max(len(run.input_sets), 1),
        seed=p.seed or 0,
        provider=tuple(dict.fromkeys(i.provider for i in infos)) or ("CPUExecutionProvider",),
        ort_opt_level=tuple(dict.fromkeys(i.ort_opt_level for i in infos)) or ("all",),
        tolerances=run.tolerances,
        reference_file=reference,
        layers=run.layers is not None,
    )


def is_demo_export(path: str) -> bool:
    """A file in Parity's demo cache: a demo's own export, made again when missing."""
    from parity.load.demos import demo_cache_dir

    return Path(path).parent == demo_cache_dir()


def reopened(config: RunConfig) -> RunConfig:
    """What a run opened from a file (a saved run, a sweep pair) may ask of a new run: only
    what the Run form shows and the user can edit. The budgets (`max_memory`,
    `layers_memory_mb`, the time limit) are the server's own, never a file's; an hf: export
    goes to a private temporary folder (a file's `export_path` would overwrite any file its
    author named) and its task is found again from the model's config; a factory's weights
    only where the form has a weights field (a path model)."""
    hf = config.hf if config.hf is None else replace(config.hf, export_path=None, task=None)
    plain = demo_name(config.model) is None and not is_hf_spec(config.model)
    return replace(
        config,
        hf=hf,
        weights=config.weights if plain else None,
        max_memory=None,
        layers_memory_mb=RunConfig.layers_memory_mb,
        timeout=None,
    )
