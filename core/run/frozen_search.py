"""The frozen-at-export search wired to real runs (parity.judge.frozen decides what to try):
each check makes an input set at the asked sizes, runs torch and ONNX Runtime (the file, or
the graph with a constant changed) and judges every output at the run's tolerances.

Looked for when a generated run of a torch model on a file with dynamic axes fails in a way
a frozen size can explain (`explainable`: ONNX Runtime raised, a shape differs, the error
depends on the size or is gross); a passing run, or one failing by rounding, costs nothing.
Legacy exports carry no source line: the torch model is re-traced (torch.jit.trace) at the
size where the file works and each traced op's source range is matched to the ONNX node by
scope, op and order.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx

from parity.errors import OnnxLoadError, ParityError, RunTimeout, first_line
from parity.judge.compare import compare_outputs
from parity.judge.frozen import find_frozen
from parity.judge.frozen_budget import ROUNDING_REL, Allowance, Check, Outcome
from parity.judge.frozen_graph import patch_strides, user_frame
from parity.limits.budget import MemoryBudget, format_size
from parity.limits.deadline import Deadline
from parity.load.onnx_read import check_external, read_onnx
from parity.results import (
    AnalysisNote,
    FrozenNodes,
    InputSet,
    StaticAxis,
    Status,
    ValidationRun,
)
from parity.run.config import RunConfig
from parity.run.inputs import has_dynamic_axes, make_input_sets
from parity.run.ort_errors import with_file_node
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


SIZE_DEPENDENT = 100.0  # a set failing this many times worse than another: the size matters
GROSS = 1e-2  # max |error| / max |torch| past any rounding (float16's is ~1e-3): a wrong size


def should_look(run: ValidationRun, config: RunConfig) -> bool:
    """A generated run of a torch model, on a file with dynamic axes, whose failure a size
    frozen at export can explain (`explainable`)."""
    return (
        config.model is not None
        and not config.n_given_sets
        and run.signature is not None
        and has_dynamic_axes(run.signature)
        and not run.passed
        and not run.is_multi_candidate
        and any(c.error is None for c in run.infos)
        and explainable(run)
    )


def explainable(run: ValidationRun) -> bool:
    """Whether the failure can be a size frozen at export: ONNX Runtime raised at a size, an
    output's shape differs from torch's (the file fixes a dim torch varies), an output fails
    at one size SIZE_DEPENDENT times worse than at another (the file works at some sizes
    only), or an error is gross (GROSS of the output's scale: a divisor or a grid of the
    wrong size changes values by whole factors). An error within rounding of the values at
    every size (float32 or float16 rounding, a fused kernel's, a small bug) is not searched:
    the search would cost up to 24 runs of the model and could not explain it."""
    rows = run.candidates[0].outputs if run.candidates else ()
    if any(c.status in (Status.ERROR, Status.SHAPE_MISMATCH) for c in rows):
        return True
    refs = {c.input_set.index: c.reference for c in run.cases}
    errors: dict[str, list[tuple[int, float]]] = {}
    for c in rows:
        error = c.stats.max_abs if c.stats is not None else None
        if error is None or not math.isfinite(error):
            if c.status is Status.FAIL:
                return True  # NaN or inf where torch has a number: not rounding
            continue
        errors.setdefault(c.name, []).append((c.input_set, error))
        if c.status is Status.FAIL and error >= GROSS * _scale(refs.get(c.input_set), c.name):
            return True
    for seen in errors.values():
        worst = max(e for _, e in seen)
        if any(e * SIZE_DEPENDENT <= worst for _, e in seen):
            return True
    return False


def _scale(reference: Any, name: str) -> float:
    """max |torch| of an output on one set (inf where it was not kept: never gross)."""
    array = None if reference is None else reference.arrays.get(name)
    if array is None:
        return math.inf
    values = np.asarray(array)
    if not np.issubdtype(values.dtype, np.floating):
        return math.inf
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else math.inf


VALUES_SHARE = 0.25  # a failure of values only: the search may take this share of torch's time
SMALL_WORK = 4e9  # a file's bytes x its largest set's input elements up to this: a small model
# the run's stages a check repeats whatever its size: inputs made, ONNX Runtime, the comparison
PER_CHECK = ("inputs", "onnxruntime", "compare")
SESSION_BASE = 0.01  # seconds an ONNX Runtime session of a changed graph takes to set up ...
SESSION_PER_BYTE = 1e-8  # ... plus this per byte of the graph (10 ms a MB)


def raised_or_reshaped(run: ValidationRun) -> bool:
    """ONNX Runtime raised at a size, or an output's shape differs from torch's (the file fixes
    a dim torch varies): a failure a frozen size explains where nothing else would, so the
    search takes its full bound. Any other failure is of values only (VALUES_SHARE)."""
    rows = run.candidates[0].outputs if run.candidates else ()
    return any(c.status in (Status.ERROR, Status.SHAPE_MISMATCH) for c in rows)


def search_allowance(
    run: ValidationRun, signature: OnnxSignature, model_bytes: int
) -> Allowance | None:
    """What the search's checks may cost: None (its full bound: MAX_CHECKS and the time
    limit) where ONNX Runtime raised or a shape differs, or for a small model (its file's
    bytes times its largest input set's elements up to SMALL_WORK: a check costs start-up,
    not size; decided from the model's size, never from a clock); else `values_allowance`."""
    if raised_or_reshaped(run):
        return None
    largest = max(
        (input_elements(signature, set_dims(signature, s)) for s in run.input_sets), default=0
    )
    if model_bytes * largest <= SMALL_WORK:
        return None
    return values_allowance(run, signature, model_bytes)


def _file_bytes(path: str) -> int:
    """The file's size on disk (a stat: nothing read), 0 where it cannot be told."""
    from pathlib import Path

    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def values_allowance(run: ValidationRun, signature: OnnxSignature, model_bytes: int) -> Allowance:
    """What the search may cost on a failure of values only: VALUES_SHARE of the run's torch
    time, each check estimated from the run's own seconds per input element: torch once per
    size, at least the run's torch time per set (a new shape's start-up); its inputs, ONNX
    Runtime and the comparison every check (PER_CHECK); a changed graph's session by its
    bytes."""
    torch_time = run.timings.get("torch", 0.0)
    total = sum(input_elements(signature, set_dims(signature, s)) for s in run.input_sets)
    seconds = VALUES_SHARE * torch_time
    return Allowance(
        seconds=seconds,
        elements=lambda dims: input_elements(signature, dims),
        torch_rate=torch_time / max(total, 1),
        ort_rate=sum(run.timings.get(k, 0.0) for k in PER_CHECK) / max(total, 1),
        torch_floor=torch_time / max(len(run.input_sets), 1),
        session=SESSION_BASE + SESSION_PER_BYTE * model_bytes,
        basis=f"{seconds:.2g} s, {VALUES_SHARE:g} × the run's {torch_time:.2g} s of torch",
    )


def input_elements(signature: OnnxSignature, dims: Mapping[str, int]) -> int:
    """The elements of one input set at `dims` (a fixed axis at its size, an unknown one 1)."""
    total = 0
    for spec in signature.inputs:
        n = 1
        for axis, d in enumerate(spec.shape):
            if isinstance(d, int):
                n *= d
            else:
                n *= int(dims.get(d if isinstance(d, str) else f"{spec.name}:{axis}", 1))
        total += n
    return total


def with_frozen(
    run: ValidationRun,
    config: RunConfig,
    source: Any,
    candidate: Any,
    *,
    deadline: Deadline | None = None,
) -> ValidationRun:
    """`run` with `frozen` filled (confirmed nodes only) and an analysis note ("frozen"): done,
    when it confirmed nothing or skipped a check (with its cost); not done, with why, when it
    could not run. The run itself unchanged.

    Bounded like a run: it ends within max(MIN_SEARCH_SECONDS, SEARCH_TIMES x the run's own
    torch + ONNX Runtime time) and before the run's own `deadline`; a check at a size larger
    than any of the run's is estimated first and skipped (said) when its forward would pass
    --max-memory; the file is re-read only through the safe reader."""
    signature = run.signature
    assert signature is not None
    allowance = search_allowance(run, signature, _file_bytes(candidate.path))
    if allowance is not None and allowance.seconds < allowance.torch_floor:
        return _noted(  # not even the file re-read: a big model's search that cannot run a check
            run,
            "The frozen-size search did not run: on a failure of values only it may take "
            f"{allowance.basis}, less than one torch run at another size (about "
            f"{allowance.torch_floor:.2g} s).",
        )
    try:  # never onnx.load(path): a FIFO or /dev/zero swapped in is one line, not a hang
        model = read_onnx(candidate.path, external_data=False)
    except OnnxLoadError as exc:
        return _noted(run, exc.message, done=False)
    failing: list[dict[str, int]] = []
    passing: list[dict[str, int]] = []
    raised: list[bool] = []  # per failing set: ONNX Runtime raised there
    for s in run.input_sets:
        rows = [c for c in run.outputs if c.input_set == s.index]
        if rows and all(c.status.passed for c in rows):
            passing.append(set_dims(signature, s))
        else:
            failing.append(set_dims(signature, s))
            raised.append(any(c.status is Status.ERROR for c in rows))
    spent = run.timings.get("torch", 0.0) + run.timings.get("onnxruntime", 0.0)
    seconds = max(MIN_SEARCH_SECONDS, SEARCH_TIMES * spent)
    left = deadline.remaining() if deadline is not None else None
    if left is not None:  # the run's own --timeout comes first: the search ends before it
        seconds = min(seconds, max(0.0, left - DEADLINE_MARGIN))
    if seconds <= 0:
        return _noted(run, "no time was left before the run's --timeout", done=False)
    limit = Deadline(seconds)  # the checks' ORT runs are terminated at it
    budget = MemoryBudget.of(config.max_memory)
    memory = _MemoryCheck(model, signature, failing + passing, budget)
    check = _checker(config, source, candidate, (model, signature), budget, memory, limit)

    def retrace(dims: Mapping[str, int]) -> dict[str, str]:
        if memory.over(dims) or limit.expired:
            return {}
        try:  # torch cannot be stopped: past the limit the trace is abandoned, not waited for
            return Deadline(limit.remaining() or 1e-3).call(
                lambda: _retrace(source, signature, model, dims, config), "the re-trace"
            )
        except RunTimeout:
            return {}

    search = find_frozen(
        model,
        dynamic_dims(signature),
        failing,
        passing,
        check,
        retrace,
        seconds=seconds,
        batch=first_axis_dims(signature),
        patches=patch_strides(model),
        allowance=allowance,
    )
    nodes = search.nodes
    if not nodes:  # no constant holds it: a learned tensor's shape may (a position grid)
        from parity.judge.frozen_grid import learned_grids

        if not passing and any(raised):
            passing = _working_grid(model, signature, failing[0], check)
        nodes = learned_grids(model, signature, failing, passing, raised)
        if nodes:
            search = replace(search, nodes=nodes)
    run = named_as_in_file(run, model, [n.node for n in nodes])
    run = run.with_result("frozen", FrozenNodes(tuple(nodes)))
    return _noted(run, search.note) if search.note else run


def _working_grid(
    model: onnx.ModelProto, signature: OnnxSignature, failing: Mapping[str, int], check: Check
) -> list[dict[str, int]]:
    """Where ONNX Runtime raised at every set: the first size a learned grid proposes
    (parity.judge.frozen_grid.grid_sizes) at which the file works, run to be sure; [] else."""
    from parity.judge.frozen_grid import grid_sizes

    for sizes in grid_sizes(model, signature):
        dims = {**failing, **sizes}
        outcome = check(dims, None)
        if outcome is not None and (outcome.passed or outcome.error <= ROUNDING_REL):
            return [dims]
    return []


def _noted(run: ValidationRun, text: str, *, done: bool = True) -> ValidationRun:
    """`run` with the search's note (parity.analyses reads `run.analyses`)."""
    return replace(run, analyses=(*run.analyses, AnalysisNote("frozen", text, done)))


def named_as_in_file(
    run: ValidationRun, model: onnx.ModelProto, prefer: list[str]
) -> ValidationRun:
    """The lead candidate's ONNX Runtime errors naming the file's node where ORT named one its
    optimisers made (``/m/Reshape_new_reshape``), so they say the node the frozen sentence
    says."""
    nodes = {n.name: n.op_type for n in model.graph.node}
    lead = run.candidates[0]
    said = [
        with_file_node(c.message, nodes, prefer) if c.status is Status.ERROR else c.message
        for c in lead.outputs
    ]
    if said == [c.message for c in lead.outputs]:  # messages only: rows hold arrays
        return run
    rows = tuple(replace(c, message=m) for c, m in zip(lead.outputs, said, strict=True))
    return replace(run, candidates=(replace(lead, outputs=rows), *run.candidates[1:]))


DEADLINE_MARGIN = 1.0  # seconds the search leaves the run before its --timeout


def _checker(
    config: RunConfig,
    source: Any,
    candidate: Any,
    graph: tuple[onnx.ModelProto, OnnxSignature],
    budget: MemoryBudget,
    memory: _MemoryCheck,
    limit: Deadline,
) -> Check:
    """The search's Check: one input set at `dims`, torch (once per size) and ONNX Runtime on
    the file or a changed graph, every output judged (parity.judge.frozen.Outcome)."""
    from parity.load.sessions import open_session

    model, signature = graph
    folder = str(_folder(candidate.path))
    refs: dict[tuple, Any] = {}  # torch's outputs by size: each size is run once

    def check(dims: Mapping[str, int], patched: bytes | None) -> Outcome | None:
        why = memory.over(dims)
        if why:
            return Outcome(passed=False, skipped=why)
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
            if patched is not None:  # its weights are read from beside the file: checked
                check_external(candidate.path, model)
        except OnnxLoadError as exc:
            return Outcome(passed=False, skipped=exc.message)
        try:
            session = (
                candidate.session
                if patched is None
                else limit.call(  # a setup past the search's limit is abandoned, not awaited
                    lambda: open_session(
                        patched, provider=candidate.provider, external_folder=folder
                    ),
                    "a frozen-size check's session setup",
                )
            )
            names = [o.name for o in session.get_outputs()]
            with limit.ort_run_options() as options:
                values = session.run(names, dict(input_set.feeds), options)
        except RunTimeout:
            return None  # the search's limit: the budget stops it
        except Exception:
            return Outcome(passed=False)
        return _outcome(ref.arrays, dict(zip(names, values, strict=True)), config)

    return check


def _outcome(refs: Mapping[str, Any], values: Mapping[str, Any], config: RunConfig) -> Outcome:
    """Every output judged at the run's tolerances, and the largest relative error."""
    passed, worst = True, 0.0
    for name, value in values.items():
        if name not in refs:
            continue
        ref, got = np.asarray(refs[name]), np.asarray(value)
        c = compare_outputs(
            ref, got, name=name, input_set=0, tolerance=config.tolerances.for_output(name)
        )
        passed = passed and c.status is Status.PASS
        worst = max(worst, _relative_error(ref, got, c))  # passing ones too: the rounding
    return Outcome(passed=passed, error=worst)


def _relative_error(ref: np.ndarray, got: np.ndarray, c: Any) -> float:
    """max |onnx - torch| / max |torch| of a comparison (inf: no numbers to say)."""
    if c.status not in (Status.PASS, Status.FAIL):
        return math.inf  # shape, dtype, missing
    if c.stats is None or c.stats.max_abs is None:
        return 0.0 if c.status is Status.PASS else math.inf
    if c.stats.n_nan_mismatch or c.stats.n_inf_mismatch:
        return math.inf
    if c.stats.max_abs == 0:
        return 0.0
    if not np.issubdtype(ref.dtype, np.floating):
        return 0.0 if c.status is Status.PASS else math.inf  # integers are exact
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 0.0
    return c.stats.max_abs / scale if scale > 0 else math.inf


class _MemoryCheck:
    """Whether a check at some dims fits --max-memory: free at most the run's largest size in
    every dim (it ran there); larger, the forward is estimated from the graph's shapes there
    (every value ONNX shape inference sizes, twice: torch and ONNX Runtime, no reuse)."""

    def __init__(
        self,
        model: onnx.ModelProto,
        signature: OnnxSignature,
        sizes: list[dict[str, int]],
        budget: MemoryBudget,
    ) -> None:
        self._model = model
        self._signature = signature
        self._budget = budget
        self._largest: dict[str, int] = {}
        for dims in sizes:
            for d, v in dims.items():
                self._largest[d] = max(self._largest.get(d, 0), int(v))
        self._skeleton: onnx.ModelProto | None = None
        self._said: dict[tuple, str] = {}

    def over(self, dims: Mapping[str, int]) -> str:
        """ "" when a check at `dims` fits; else why not, in words."""
        if all(int(v) <= self._largest.get(d, 0) for d, v in dims.items()):
            return ""
        key = tuple(sorted(dims.items()))
        if key not in self._said:
            size = forward_bytes(self._skeleton_model(), self._signature, dims)
            need = FORWARD_COPIES * size.nbytes
            at = ", ".join(f"{d} {v}" for d, v in dims.items())
            if size.unsized is not None:  # it may be any size: not tried past the run's own
                self._said[key] = (
                    f"at {at} the forward's memory cannot be estimated (ONNX shape inference "
                    f"does not size {size.unsized}), so it is not tried larger than the run's "
                    "own sizes"
                )
            elif need > self._budget.limit:
                self._said[key] = (
                    f"at {at} the forward needs about {format_size(need)}, over the "
                    f"{format_size(self._budget.limit)} memory budget (--max-memory)"
                )
            else:
                self._said[key] = ""
        return self._said[key]

    def _skeleton_model(self) -> onnx.ModelProto:
        if self._skeleton is None:
            self._skeleton = skeleton(self._model)
        return self._skeleton


FORWARD_COPIES = 2  # torch's forward and ONNX Runtime's, each holding its values
SKELETON_KEEP = 64  # initializers of at most this many elements keep their data (shapes)


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its weights' data: large initializers become typed graph inputs, so
    shape inference sees every shape at no memory."""
    out = onnx.ModelProto()
    out.ir_version = model.ir_version
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    graph = out.graph
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    names = {i.name for i in model.graph.input}
    for init in model.graph.initializer:
        if math.prod(init.dims) <= SKELETON_KEEP and not init.data_location:
            graph.initializer.append(init)
        elif init.name not in names:
            graph.input.append(
                onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            )
    return out


@dataclass(frozen=True)
class ForwardSize:
    """What a forward holds at some dims: the bytes of every value ONNX shape inference
    sizes, and the first value it cannot size (None when it sizes them all): a contrib op's
    output (com.microsoft's FusedMatMul), a value inside an `If` branch, a data-dependent
    shape. Such a value may be any size, so a forward that has one is not estimated."""

    nbytes: int
    unsized: str | None = None


def forward_bytes(
    skeleton: onnx.ModelProto, signature: OnnxSignature, dims: Mapping[str, int]
) -> ForwardSize:
    """Bytes of every value of the graph at `dims` (inputs too, values inside subgraphs
    too), and the first value shape inference cannot size (ForwardSize)."""
    model = onnx.ModelProto()
    model.CopyFrom(skeleton)
    inputs = 0
    specs = {spec.name: spec for spec in signature.inputs}
    for value in model.graph.input:
        spec = specs.get(value.name)
        if spec is None:
            continue
        shape = value.type.tensor_type.shape
        for axis, dim in enumerate(shape.dim):
            named = spec.shape[axis] if axis < len(spec.shape) else None
            key = named if isinstance(named, str) else f"{spec.name}:{axis}"
            if key in dims:
                dim.Clear()
                dim.dim_value = int(dims[key])
        inputs += _value_bytes(value) or 0
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - said as the reason nothing is sized
        return ForwardSize(inputs, f"ONNX shape inference failed ({first_line(exc)})")
    total, unsized = inputs, None
    for graph, inside in _graphs(inferred.graph, None):
        sizes = {v.name: _value_bytes(v) for v in (*graph.value_info, *graph.output)}
        total += sum(n for n in sizes.values() if n)
        if inside is not None:  # a body's own inputs (the main graph's: counted above)
            body = {v.name: _value_bytes(v) for v in graph.input}
            total += sum(n for n in body.values() if n)
            sizes |= body
        known = {t.name for t in graph.initializer} | set(specs)
        for node in graph.node:
            for name in node.output:
                if unsized is None and name and name not in known and sizes.get(name) is None:
                    op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
                    where = f" inside {inside}" if inside else ""
                    unsized = f"{op} output {name!r}{where}"
    return ForwardSize(total, unsized)


def _graphs(
    graph: onnx.GraphProto, inside: str | None
) -> Iterator[tuple[onnx.GraphProto, str | None]]:
    """`graph` and every subgraph in it (an If's branches, a Loop's or Scan's body), each
    with the node that holds it."""
    yield graph, inside
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for sub in subs:
                yield from _graphs(sub, f"{node.op_type} {node.name or node.output[0]!r}")


def _value_bytes(value: onnx.ValueInfoProto) -> int | None:
    """Bytes of one tensor whose shape is fully known; None otherwise (not sized)."""
    t = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not t.HasField("shape") or not t.elem_type:
        return None
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    if any(d < 0 for d in dims):
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
    except Exception:
        itemsize = 8
    return math.prod(dims) * itemsize


MAX_STATIC_CHECKS = 3  # torch runs spent asking whether a fixed axis takes other sizes
STATIC_MIN = 8  # smaller fixed axes (channels, a batch of 1) are the model's own, not asked
STATIC_STEP = 16
_PROBE = "parity_static_axis"


def static_axes(
    run: ValidationRun, config: RunConfig, source: Any, *, deadline: Deadline | None = None
) -> tuple[StaticAxis, ...]:
    """Input axes the file fixes (at STATIC_MIN or more) where the torch model also runs at
    the size + STATIC_STEP: one torch run each, at most MAX_STATIC_CHECKS, none once the
    run's deadline has passed, inputs within --max-memory."""
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
            if deadline is not None and deadline.expired:
                return tuple(found)
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
                    probe,
                    dims={**base, _PROBE: size},
                    n_sets=1,
                    seed=config.seed,
                    budget=MemoryBudget.of(config.max_memory),
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
    "Concat": ("aten::cat",),
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
    if loaded is None or module is None:
        return {}
    import torch

    from parity.run.runner import model_binding

    try:
        input_set = make_input_sets(
            signature,
            dims=dict(dims),
            n_sets=1,
            seed=config.seed,
            budget=MemoryBudget.of(config.max_memory),
        )[0]
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
        for kind in _ATEN.get(node.op_type, (f"aten::{node.op_type.lower()}",)):
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
