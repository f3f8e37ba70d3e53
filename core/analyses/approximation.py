"""What a deploy tool approximates on purpose, judged for what it is (on with the
quantization-aware reference, RunConfig.quantized_reference; it acts on a candidate whose
outputs fail).

Optimum's `optimize -O3/-O4` and ONNX Runtime's transformers optimizer replace GELU by
FastGelu (its tanh approximation, `BiasGelu_Approximation_*`; ONNX's own spelling is Gelu
with approximate="tanh"), and a float16 converter rounds every weight to 16 bits. A
reference that does what the file means is built the way parity.analyses.quantization
builds "torch with the file's own weights": the torch model changed in place and put back
before the stage returns, whatever happens. Here GELU is computed as its tanh approximation
where the file has FastGelu (every call of it where the file keeps no exact GELU, else the
modules named by the FastGelu nodes' scopes), and every float weight is rounded to the
file's 16-bit type where the file holds them so. The file is judged against it at the
run's tolerance, a 16-bit file through its float32 twin (parity.load.float32_twin: the same
graph and weights computed in float32, so its own 16-bit arithmetic is measured against
the file itself, not imitated in torch). A difference the reference explains is intended
and said with its cost; one it does not is a bug (parity.show.findings).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from parity.analyses.interface import Analysis, AnalysisContext, noted
from parity.errors import BudgetError, ModelRunError, OnnxLoadError
from parity.judge.compare import compare_outputs
from parity.judge.noise_floor import SIXTEEN_BIT, twin_within
from parity.results import (
    ApproximatedOutput,
    ApproximationResult,
    RunKind,
    Status,
    ValidationRun,
)
from parity.run.config import RunConfig
from parity.settings import Mention
from parity.tolerances import Tolerance

NAME = "approximation"
TANH_GELU = "FastGelu, the tanh approximation of GELU"
TOLERANCE = "the run's tolerance"
FLOAT32_ROUNDING = "float32 rounding, 10\u00d7 torch's own float32 error"
# a 16-bit file's twin computes in float32: faithful, it differs from torch with the file's
# weights by float32 rounding, far below the 16-bit rounding the file itself makes
SIXTEEN_FRACTION = "a tenth of torch's own {p} error, float32 arithmetic"
# ... where torch's own 16-bit error was not measured: the file's own rounding on that set
SIXTEEN_OWN = (
    "a tenth of the file's own {p} rounding (its weights' and arithmetic's), float32 arithmetic"
)
EXACT_GELU_OPS = ("Gelu", "BiasGelu", "Erf")  # what computes GELU exactly in a file


@dataclass(frozen=True)
class Plan:
    """What a file approximates: its tanh-GELU nodes and the module scopes they name, whether
    it keeps an exact GELU too, and its 16-bit weight type ("": not 16-bit)."""

    tanh_nodes: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()  # per tanh node, the module path its values name ("": none)
    exact_too: bool = False
    sixteen: str = ""

    @property
    def words(self) -> tuple[str, ...]:
        n = len(self.tanh_nodes)
        return (f"{TANH_GELU} ({n} node{'s' if n > 1 else ''})",) if n else ()


def read_plan(path: str) -> Plan:
    """The file's intended approximations, read from its graph (no weights loaded)."""
    from parity.load.float32_twin import sixteen_bit_weights
    from parity.load.onnx_read import read_onnx

    proto = read_onnx(path, external_data=False)
    tanh, scopes, exact = [], [], False
    for node in proto.graph.node:
        if _is_tanh_gelu(node):
            tanh.append(node.name or node.output[0])
            scopes.append(_scope(node))
        elif node.op_type in EXACT_GELU_OPS:
            exact = True
    return Plan(tuple(tanh), tuple(scopes), exact, sixteen_bit_weights(proto))


def _is_tanh_gelu(node: Any) -> bool:
    if node.op_type == "FastGelu":
        return True
    if node.op_type == "Gelu" and node.domain in ("", "ai.onnx"):
        return any(a.name == "approximate" and a.s == b"tanh" for a in node.attribute)
    return False


def _scope(node: Any) -> str:
    """The module path a node's name or output names (`/encoder/layer.0/intermediate/
    intermediate_act_fn/Mul_1_output_0` -> `encoder.layer.0.intermediate.intermediate_act_fn`)."""
    for name in (node.name, *node.output):
        if name.startswith("/") and name.count("/") >= 2:
            return ".".join(name.strip("/").split("/")[:-1])
    return ""


class Approximation(Analysis):
    name = NAME

    def wanted(self, config: RunConfig) -> bool:
        """On with the quantization-aware reference, where a torch model can be changed."""
        return config.quantized_reference and config.kind in (RunKind.TORCH, RunKind.HF_GENERATE)

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        if context.reference is not None:  # ONNX against ONNX: no torch model to change
            return run
        plans: dict[int, tuple[Any, Plan]] = {}
        for slot, candidate in enumerate(context.candidates):
            if candidate is None or slot >= len(run.candidates) or candidate.parts:
                continue
            view = run.candidates[slot]
            if view.info.error is not None or _quantized(candidate):
                continue  # a quantized file: torch with its own weights speaks for it
            failing = any(c.status is Status.FAIL or c.narrowed for c in view.outputs)
            if not failing and not any(_twin_wanted(c) for c in view.outputs):
                continue
            try:
                plan = read_plan(candidate.path)
            except OnnxLoadError:
                continue
            if plan.sixteen or (failing and plan.tanh_nodes):
                plans[view.index] = (candidate, plan)
        if not plans:
            return run
        side = context.source.torch_side()
        module = getattr(side.model, "module", None)
        if module is None:
            return run  # no torch model: the noise floor speaks alone
        results = {}
        exports: dict[int, dict[tuple[int, str], float]] = {}
        for index, (candidate, plan) in plans.items():
            context.deadline.check()
            context.report(NAME, f"torch doing what {candidate.path} means", None)
            try:
                exports[index] = {}
                result = judge_file(
                    run, context, index, candidate, plan, module, side, exports[index]
                )
            except NotImplementedError:
                why = "this kind of run cannot run its torch model again"
                return noted(run, NAME, f"approximations not judged: {why}", done=False)
            except (BudgetError, ModelRunError, OnnxLoadError) as exc:
                return noted(run, NAME, f"approximations not judged: {exc.message}", done=False)
            if result is not None:
                results[index] = result
        if not results:
            return run
        return _with_twin(run.with_results("approximation", results), exports)


def _twin_wanted(c: Any) -> bool:
    """A 16-bit file's twin is run for a row that passes only at a loosened tolerance (what
    it forgives, and a bug it may hide) or whose 16-bit noise was measured (the twin is what
    tells a small bug from that precision's rounding: parity.judge.noise_floor)."""
    measured = c.noise is not None and c.noise.precision in SIXTEEN_BIT
    return measured or c.passes_only_loosened


def _with_twin(
    run: ValidationRun, exports: Mapping[int, Mapping[tuple[int, str], float]]
) -> ValidationRun:
    """Each 16-bit row's noise with its set's twin error (Noise.export_error), so that the
    noise floor's rounding-or-bug rule reads the twin (parity.judge.noise_floor.noise_rank)."""
    rows = []
    for c in run.outputs:
        noise = c.noise
        if noise is not None and noise.precision in SIXTEEN_BIT:
            error = exports.get(c.candidate, {}).get((c.input_set, c.name))
            if error is not None:
                c = replace(c, noise=replace(noise, export_error=error))
        rows.append(c)
    return run.with_rows(rows)


QUANTIZING = {
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
    "ConvInteger", "DynamicQuantizeMatMul", "MatMulNBits", "QLinearMatMul", "QLinearConv",
    "QAttention", "QGemm",
}  # fmt: skip


def _quantized(candidate: Any) -> bool:
    """An int8 / int4 file: its quantization's own account speaks for it."""
    return bool(set(getattr(candidate.model, "op_types", ())) & QUANTIZING)


def judge_file(
    run: ValidationRun,
    context: AnalysisContext,
    index: int,
    candidate: Any,
    plan: Plan,
    module: Any,
    side: Any,
    exports: dict[tuple[int, str], float] | None = None,
) -> ApproximationResult | None:
    """One candidate: torch again with its approximations (and its 16-bit weights), the
    file (its float32 twin) against that, per output over every input set; a 16-bit file's
    twin error per (input set, output) goes into `exports`."""
    notes: list[str] = []
    modules = _scoped_modules(plan, module, side.scope_prefix, notes)
    if modules is None:
        return ApproximationResult(plan.words, plan.sixteen, notes=tuple(notes))
    signature = candidate.signature
    sets = run.input_sets
    hits = _Counter()
    if plan.tanh_nodes:
        with approximated(module, modules if plan.exact_too else None, hits):
            plain = [context.source.reference_again(s, signature) for s in sets]
    else:  # nothing to approximate: torch's own outputs, as the run made them
        plain = [dict(c.reference.arrays) if c.reference is not None else {} for c in run.cases]
    words = plan.words if hits.count else ()
    if plan.tanh_nodes and not hits.count:
        notes.append(
            "the file's FastGelu nodes compute what the torch model already does (its GELU "
            "is the tanh approximation, or none was called): nothing approximated"
        )
    if not words and not plan.sixteen:
        return None
    weighted: list[dict[str, Any]] = []
    twin: list[dict[str, Any]] = []
    if plan.sixteen:
        context.budget.check(
            2 * Path(candidate.path).stat().st_size,
            "the file's float32 twin (its graph and weights widened)",
            proceed=("leave it out with ", Mention("quantized_reference")),
        )
        gelu = (
            approximated(module, modules if plan.exact_too else None)
            if words
            else contextlib.nullcontext()
        )
        with gelu, rounded(module, plan.sixteen):
            weighted = [context.source.reference_again(s, signature) for s in sets]
        twin = _twin_outputs(candidate, sets, context)
    lead = run.for_candidate(index)
    return ApproximationResult(
        approximations=words,
        precision=plan.sixteen,
        modules=tuple(modules or ()) if plan.exact_too else (),
        outputs=_outputs(
            lead, plain, weighted, twin, {} if exports is None else exports, plan.sixteen
        ),
        notes=tuple(notes),
    )


def _scoped_modules(plan: Plan, module: Any, prefix: str, notes: list[str]) -> list[str] | None:
    """The module paths to approximate where the file keeps an exact GELU too (each tanh
    node's scope); [] where it keeps none (every GELU call is approximated); None where a
    scope names no module (said in `notes`)."""
    if not plan.exact_too or not plan.tanh_nodes:
        return []
    paths = dict(module.named_modules())
    found: list[str] = []
    missing: list[str] = []
    for node, scope in zip(plan.tanh_nodes, plan.scopes, strict=True):
        path = scope.removeprefix(prefix.rstrip(".") + ".") if prefix else scope
        (found if path in paths else missing).append(path if path in paths else node)
    if missing:
        notes.append(
            "approximations not judged: the file mixes exact and tanh GELU and "
            f"{len(missing)} FastGelu node(s) name no torch module: {', '.join(missing[:3])}"
        )
        return None
    return found


class _Counter:
    count = 0


class _TanhGelu:
    """torch.nn.functional.gelu computed as its tanh approximation (what FastGelu does)."""

    def __init__(self, hits: _Counter | None) -> None:
        import torch

        class Mode(torch.overrides.TorchFunctionMode):
            def __torch_function__(inner, func, types, args=(), kwargs=None):  # noqa: ANN001, N805
                kwargs = dict(kwargs or {})
                if func is torch.nn.functional.gelu and kwargs.get("approximate", "none") == "none":
                    kwargs["approximate"] = "tanh"
                    if hits is not None:
                        hits.count += 1
                return func(*args, **kwargs)

        self.mode = Mode()


@contextlib.contextmanager
def approximated(
    module: Any, paths: Sequence[str] | None, hits: _Counter | None = None
) -> Iterator[None]:
    """GELU as its tanh approximation: inside the modules at `paths`, or everywhere (None);
    nothing changed once it exits."""
    gelu = _TanhGelu(hits)
    if paths is None:
        with gelu.mode:
            yield
        return
    owners = dict(module.named_modules())
    handles = []

    def enter(*_: Any) -> None:
        gelu.mode.__enter__()

    def leave(*_: Any) -> None:
        gelu.mode.__exit__(None, None, None)

    try:
        for path in paths:
            handles.append(owners[path].register_forward_pre_hook(enter))
            handles.append(owners[path].register_forward_hook(leave))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def intended(result: ApproximationResult | None, module: Any) -> Iterator[None]:
    """`module` computing the approximations `result` found in the file (its tanh GELU, in
    the modules it names or everywhere) while inside: the reference --layers compares with,
    so that they and this stage tell one story."""
    if result is None or not result.approximations or module is None:
        yield
        return
    with approximated(module, result.modules or None):
        yield


@contextlib.contextmanager
def rounded(module: Any, precision: str) -> Iterator[None]:
    """Every float32 parameter and buffer of `module` rounded to `precision` (what a
    16-bit file holds) as each op reads it: nothing copied or changed in the model (no
    second set of weights in memory), every activation left in float32."""
    import torch

    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[precision]
    weights = {id(t) for t in [*module.parameters(), *module.buffers()] if t.dtype == torch.float32}

    def at_use(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and id(value) in weights:
            return value.detach().to(dtype).to(torch.float32)
        return value

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            up = torch.utils._pytree.tree_map
            return func(*up(at_use, args), **up(at_use, kwargs or {}))

    with Mode():
        yield


def _twin_outputs(candidate: Any, sets: Sequence[Any], context: AnalysisContext) -> list[dict]:
    """The candidate's float32 twin run on each input set (16-bit float feeds widened). The
    twin is written to a temp folder, its weights in a file beside it that ONNX Runtime maps,
    and its session does not prepack them: no second copy of the widened weights in memory."""
    import tempfile
    from dataclasses import replace

    import onnx

    from parity.load.float32_twin import float32_twin
    from parity.load.onnx_read import read_onnx
    from parity.load.sessions import open_session
    from parity.run.runner import run_onnx

    with tempfile.TemporaryDirectory(prefix="parity-twin-") as folder:
        path = Path(folder) / "twin.onnx"
        onnx.save(
            float32_twin(read_onnx(candidate.path)),
            str(path),
            save_as_external_data=True,
            location="twin.weights",
            size_threshold=1024,
        )
        session = open_session(
            path,
            provider=candidate.provider,
            opt_level=candidate.opt_level,
            config=(("session.disable_prepacking", "1"),),
        )
        out = []
        for s in sets:
            feeds = {
                k: np.asarray(v, np.float32) if np.asarray(v).dtype == np.float16 else v
                for k, v in s.feeds.items()
            }
            made = run_onnx(session, replace(s, feeds=feeds), deadline=context.deadline)
            out.append(dict(made.arrays))
        del session
    return out


def _outputs(
    run: ValidationRun,
    plain: Sequence[Mapping[str, Any]],
    weighted: Sequence[Mapping[str, Any]],
    twin: Sequence[Mapping[str, Any]],
    exports: dict[tuple[int, str], float],
    precision: str = "",
) -> tuple[ApproximatedOutput, ...]:
    """Per output over every input set: the approximations' cost against torch, the file
    (its twin) against torch doing the same, the 16-bit weights' and arithmetic's costs;
    `exports` gets a 16-bit file's twin error per (input set, output). Judged at the run's
    tolerance (a 16-bit file's twin: never looser than the default, since a loosened
    tolerance forgives no export, and past it within a tenth of the 16-bit rounding)."""
    from parity.judge.noise_floor import ROUNDING_RATIO

    candidate = run.candidates[0]
    rows: dict[str, dict[str, Any]] = {}
    sixteen = bool(weighted)
    floors = {  # torch's own float32 error per (input set, output), where it was measured
        (c.input_set, c.name): c.noise.torch_error
        for c in candidate.outputs
        if c.noise is not None and c.noise.precision == "float32" and c.noise.torch_error > 0
    }
    floors16 = {  # torch's own 16-bit error, where the file's precision was measured
        (c.input_set, c.name): (c.noise.torch_error, c.noise.precision)
        for c in candidate.outputs
        if c.noise is not None and c.noise.precision in ("float16", "bfloat16")
    }
    for position, case in enumerate(run.cases):
        onnx = candidate.onnx_outputs[position].arrays if candidate.onnx_outputs else {}
        ref = case.reference.arrays if case.reference is not None else {}
        for name, mine in plain[position].items():
            mine = np.asarray(mine)
            if name not in onnx or not np.issubdtype(mine.dtype, np.floating):
                continue
            mask = case.exclusions.get(name)
            row = rows.setdefault(name, {"passed": None})
            _worst(row, "cost", ref.get(name), mine, mask)
            intended = np.asarray(weighted[position][name]) if sixteen else mine
            judged = np.asarray(twin[position][name]) if sixteen else np.asarray(onnx[name])
            own = 0.0  # a 16-bit file's own rounding on this set: weights' + arithmetic's
            if sixteen:
                for key, a, b in (("weights", mine, intended), ("arithmetic", judged, onnx[name])):
                    cost = _max_abs(a, b, mask)
                    if cost is not None:
                        row[key] = max(row.get(key, 0.0), cost)
                        own += cost
            if judged.shape != intended.shape:
                continue
            tolerance = run.tolerances.for_output(name)
            c = compare_outputs(
                intended,
                judged,
                name=name,
                input_set=case.input_set.index,
                tolerance=_at_most_default(tolerance) if sixteen else tolerance,
                exclude=mask,
            )
            worst = c.stats.max_abs if c.stats is not None else None
            if worst is not None:
                row["export"] = max(row.get("export", 0.0), worst)
                if sixteen:
                    exports[(case.input_set.index, name)] = worst
            passed = c.status.passed
            floor = floors.get((case.input_set.index, name))
            if not passed and not sixteen and worst is not None and floor is not None:
                passed = worst <= ROUNDING_RATIO * floor  # float32 rounding, as measured
                row["within"] = FLOAT32_ROUNDING if passed else row.get("within")
            if not passed and sixteen and worst is not None:
                # the 16-bit rounding the twin is held to: torch's own where the noise floor
                # measured it, else the file's own on this set
                measured = floors16.get((case.input_set.index, name))
                bound, words = (
                    (measured[0], SIXTEEN_FRACTION.format(p=measured[1]))
                    if measured is not None
                    else (own, SIXTEEN_OWN.format(p=precision))
                )
                passed = twin_within(worst, bound)
                if passed:
                    row["within"] = words
            row["passed"] = (row["passed"] is not False) and passed
    order = {n: k for k, n in enumerate(run.output_names)}
    return tuple(
        ApproximatedOutput(
            name=name,
            cost_max_abs=row.get("cost"),
            export_max_abs=row.get("export"),
            export_passed=row["passed"],
            weights_max_abs=row.get("weights"),
            arithmetic_max_abs=row.get("arithmetic"),
            export_within=row.get("within") or TOLERANCE,
        )
        for name, row in sorted(rows.items(), key=lambda kv: order.get(kv[0], len(order)))
    )


def _at_most_default(tolerance: Tolerance) -> Tolerance:
    """The stricter of `tolerance` and the default, part by part."""
    default = Tolerance()
    return Tolerance(atol=min(tolerance.atol, default.atol), rtol=min(tolerance.rtol, default.rtol))


def _worst(row: dict[str, Any], key: str, a: Any, b: Any, mask: Any) -> None:
    """row[key] = the largest |a - b| so far over the judged elements."""
    found = _max_abs(a, b, mask)
    if found is not None:
        row[key] = max(row.get(key, 0.0), found)


def _max_abs(a: Any, b: Any, mask: Any) -> float | None:
    """The largest finite |a - b| over the judged elements (None: nothing to compare)."""
    if a is None or b is None or np.shape(a) != np.shape(b):
        return None
    diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    if mask is not None:
        diff = diff[~np.broadcast_to(mask, diff.shape)]
    diff = diff[np.isfinite(diff)]
    return float(diff.max()) if diff.size else None
