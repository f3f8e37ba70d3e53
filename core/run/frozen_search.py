"""The frozen-at-export search wired to real runs (parity.judge.frozen decides what to try):
each check makes an input set at the asked sizes, runs torch and ONNX Runtime (the file, or
the graph with a constant changed) and judges every output at the run's tolerances.

Looked for when a generated run of a torch model on a file with dynamic axes fails at some
size (a passing run costs nothing). Legacy exports carry no source line: the torch model is
re-traced (torch.jit.trace) at the size where the file works and each traced op's source
range is matched to the ONNX node by scope, op and order.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from parity.errors import ParityError
from parity.judge.compare import compare_outputs
from parity.judge.frozen import find_frozen
from parity.judge.frozen_graph import load, user_frame
from parity.limits.budget import MemoryBudget
from parity.results import InputSet, StaticAxis, Status, ValidationRun
from parity.run.config import RunConfig
from parity.run.inputs import has_dynamic_axes, make_input_sets
from parity.signature import OnnxSignature

SEARCH_TIMES = 4  # the search may take this many times the run's own torch + ORT time
MIN_SEARCH_SECONDS = 10.0


def dynamic_dims(signature: OnnxSignature) -> list[str]:
    """Every dynamic dim by the name --dim takes: a symbolic dim's, or ``INPUT:AXIS``."""
    names: dict[str, None] = {}
    for spec in signature.inputs:
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str):
                names[d] = None
            elif d is None:
                names[f"{spec.name}:{axis}"] = None
    return list(names)


def first_axis_dims(signature: OnnxSignature) -> set[str]:
    """Dynamic dims at axis 0 of an input (a batch, whatever its name)."""
    found = set()
    for spec in signature.inputs:
        if spec.shape and isinstance(spec.shape[0], str):
            found.add(spec.shape[0])
        elif spec.shape and spec.shape[0] is None:
            found.add(f"{spec.name}:0")
    return found


def set_dims(signature: OnnxSignature, input_set: InputSet) -> dict[str, int]:
    """The size of every dynamic dim in one input set."""
    sizes: dict[str, int] = {}
    for spec in signature.inputs:
        array = input_set.feeds.get(spec.name)
        if array is None:
            continue
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str):
                sizes.setdefault(d, int(array.shape[axis]))
            elif d is None:
                sizes[f"{spec.name}:{axis}"] = int(array.shape[axis])
    return sizes


def should_look(run: ValidationRun, config: RunConfig) -> bool:
    """A generated run of a torch model, on a file with dynamic axes, that failed somewhere."""
    return (
        config.model is not None
        and not config.n_given_sets
        and run.signature is not None
        and has_dynamic_axes(run.signature)
        and not run.passed
        and not run.is_multi_candidate
        and any(c.error is None for c in run.infos)
    )


def with_frozen(
    run: ValidationRun, config: RunConfig, source: Any, candidate: Any
) -> ValidationRun:
    """`run` with `frozen` filled (confirmed nodes only); the run itself unchanged."""
    signature = run.signature
    assert signature is not None
    failing: list[InputSet] = []
    passing: list[InputSet] = []
    for s in run.input_sets:
        rows = [c for c in run.outputs if c.input_set == s.index]
        (passing if rows and all(c.status.passed for c in rows) else failing).append(
            set_dims(signature, s)
        )
    model = load(candidate.path)
    from parity.load.sessions import open_session

    folder = str(_folder(candidate.path))
    refs: dict[tuple, Any] = {}  # torch's outputs by size: each size is run once
    budget = MemoryBudget.of(config.max_memory)

    def check(dims: Mapping[str, int], patched: bytes | None) -> bool | None:
        try:
            input_set = make_input_sets(
                signature,
                dims=dict(dims),
                n_sets=1,
                seed=config.seed,
                int_ranges=config.int_ranges,
                float_ranges=config.float_ranges,
                float_range=config.float_range,
                budget=budget,
            )[0]
            key = tuple(sorted(dims.items()))
            if key not in refs:
                refs[key] = source.reference_at(input_set, signature)
            ref = refs[key]
        except ParityError:
            return None
        try:
            session = (
                candidate.session
                if patched is None
                else open_session(patched, provider=candidate.provider, external_folder=folder)
            )
            names = [o.name for o in session.get_outputs()]
            values = session.run(names, dict(input_set.feeds))
        except Exception:
            return False
        for name, value in zip(names, values, strict=True):
            if name not in ref.arrays:
                continue
            c = compare_outputs(
                ref.arrays[name],
                np.asarray(value),
                name=name,
                input_set=0,
                tolerance=config.tolerances.for_output(name),
            )
            if c.status is not Status.PASS:
                return False
        return True

    def retrace(dims: Mapping[str, int]) -> dict[str, str]:
        return _retrace(source, signature, model, dims, config)

    spent = run.timings.get("torch", 0.0) + run.timings.get("onnxruntime", 0.0)
    seconds = max(MIN_SEARCH_SECONDS, SEARCH_TIMES * spent)
    nodes = find_frozen(
        model,
        dynamic_dims(signature),
        failing,
        passing,
        check,
        retrace,
        seconds=seconds,
        batch=first_axis_dims(signature),
    )
    return replace(run, frozen=nodes)


MAX_STATIC_CHECKS = 3  # torch runs spent asking whether a fixed axis takes other sizes
STATIC_MIN = 8  # smaller fixed axes (channels, a batch of 1) are the model's own, not asked
STATIC_STEP = 16
_PROBE = "parity_static_axis"


def static_axes(run: ValidationRun, config: RunConfig, source: Any) -> tuple[StaticAxis, ...]:
    """Input axes the file fixes (at STATIC_MIN or more) where the torch model also runs at
    the size + STATIC_STEP: one torch run each, at most MAX_STATIC_CHECKS."""
    signature = run.signature
    if (
        signature is None
        or config.model is None
        or config.n_given_sets
        or not run.input_sets
        or not source.runs_other_sizes
    ):
        return ()
    base = set_dims(signature, run.input_sets[0])
    found: list[StaticAxis] = []
    checks = 0
    for k, spec in enumerate(signature.inputs):
        for axis, d in enumerate(spec.shape):
            if not isinstance(d, int) or d < STATIC_MIN or checks >= MAX_STATIC_CHECKS:
                continue
            checks += 1
            shape = tuple(_PROBE if a == axis else x for a, x in enumerate(spec.shape))
            probe = replace(
                signature,
                inputs=tuple(
                    replace(t, shape=shape) if i == k else t for i, t in enumerate(signature.inputs)
                ),
            )
            size = d + STATIC_STEP
            try:
                input_set = make_input_sets(
                    probe, dims={**base, _PROBE: size}, n_sets=1, seed=config.seed
                )[0]
                source.reference_at(input_set, probe)
            except ParityError:
                continue
            except Exception:
                continue
            found.append(
                StaticAxis(spec.name, axis, d, size, static_text(spec.name, axis, d, size))
            )
    return tuple(found)


def static_text(name: str, axis: int, size: int, other: int) -> str:
    return (
        f"Input {name!r} is fixed at {size} on axis {axis} in the ONNX file, though the torch "
        f"model also runs at {other}: the file takes only that size (export it with a dynamic "
        "dim there if it should take any)."
    )


def _folder(path: str):
    from pathlib import Path

    return Path(path).resolve().parent


# ONNX op -> the aten ops a re-trace names for it
_ATEN = {
    "Div": ("aten::div",),
    "Mul": ("aten::mul",),
    "Reshape": ("aten::reshape", "aten::view", "aten::flatten"),
    "Resize": ("aten::upsample_bilinear2d", "aten::upsample_nearest2d", "aten::upsample_bicubic2d"),
    "Upsample": ("aten::upsample_bilinear2d", "aten::upsample_nearest2d"),
    "Pad": (
        "aten::pad",
        "aten::constant_pad_nd",
        "aten::reflection_pad2d",
        "aten::replicate_pad2d",
    ),
    "Expand": ("aten::expand",),
    "Tile": ("aten::repeat",),
    "Slice": ("aten::slice",),
    "Range": ("aten::arange",),
    "ConstantOfShape": ("aten::zeros", "aten::ones", "aten::full"),
}
_RANGE_FRAME = re.compile(r"(?P<file>[^\s|]+\.py)\((?P<line>\d+)\)")


def _retrace(
    source: Any, signature: OnnxSignature, model: Any, dims: Mapping[str, int], config: RunConfig
) -> dict[str, str]:
    """ONNX node name -> FILE:LINE, from torch.jit.trace at `dims` (legacy exports name nodes
    ``/scope/Op_k``; the k-th traced op of that kind in that scope is its source)."""
    loaded = getattr(source, "torch_model", None)
    module = getattr(loaded, "module", None)
    if module is None:
        return {}
    import torch

    from parity.run.runner import model_binding

    try:
        input_set = make_input_sets(signature, dims=dict(dims), n_sets=1, seed=config.seed)[0]
        feeds = {n: torch.from_numpy(np.array(input_set.feeds[n])) for n in signature.input_names}
        binding = model_binding(loaded, feeds)  # by name or by position, as the run fed it
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            if binding.kwargs and not binding.args:
                traced = torch.jit.trace(
                    module, example_kwarg_inputs=dict(binding.kwargs), check_trace=False
                )
            else:
                traced = torch.jit.trace(module, tuple(binding.args), check_trace=False)
        graph = traced.inlined_graph
    except Exception:
        return {}
    by_scope: dict[tuple[str, str], list[str | None]] = {}
    for node in graph.nodes():
        scope = node.scopeName().replace("__module.", "").removeprefix("__module")
        frames = _RANGE_FRAME.finditer(node.sourceRange())
        line = user_frame(_Frames(frames))
        by_scope.setdefault((scope.strip("."), node.kind()), []).append(line)
    found: dict[str, str] = {}
    counts: dict[tuple[str, str], int] = {}
    for node in model.graph.node:
        parts = node.name.split("/")
        scope = ".".join(p for p in parts[1:-1] if p)
        key = (scope, node.op_type)
        k = counts.get(key, 0)
        counts[key] = k + 1
        for kind in _ATEN.get(node.op_type, ()):
            lines = by_scope.get((scope, kind), [])
            line = lines[k] if k < len(lines) else None
            if line:
                found[node.name] = line
                break
            if lines and any(lines):
                found[node.name] = next(x for x in lines if x)
                break
    return found


class _Frames:
    """re matches of ``FILE(LINE)`` seen as user_frame's ``file`` / ``line`` groups, in the
    order user_frame keeps the last user frame: a traced range lists the innermost first."""

    def __init__(self, matches) -> None:
        self._items = [{"file": m["file"], "line": m["line"]} for m in matches][::-1]

    def __iter__(self):
        return iter(self._items)
