"""Quantized weights judged for what they are (RunConfig.quantized_reference, on by default;
it acts where a candidate has weight-only quantized ops: MatMulNBits, DynamicQuantizeMatMul,
MatMulInteger, parity.load.quantized_weights).

A reference is built with the file's own dequantized weights put into the torch model (each
node matched to its parameters, parity.analyses.quantized_match), and the difference is split
in two: the file against torch-with-its-weights (the export and its kernels: float32 noise
when faithful) and torch-with-its-weights against torch (what quantizing costs: SQNR per
output; for a causal LM top-1 agreement, KL divergence and greedy tokens). Each quantized
weight is checked to be a rounding of the model's; one that is not is a bug at its node.
The weights are swapped in place (module attributes, so tied weights stay untied) and put
back before the stage returns, whatever happens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from parity.analyses.interface import Analysis, AnalysisContext, noted
from parity.analyses.quantized_match import Matched, check, match_nodes
from parity.analyses.quantized_rows import judge_into, outputs_of_rows
from parity.errors import BudgetError, ModelRunError, OnnxLoadError
from parity.results import (
    QuantizationResult,
    QuantizedOutput,
    QuantizedTokens,
    QuantizedWeight,
    ValidationRun,
)
from parity.run.config import RunConfig
from parity.settings import Mention

NAME = "quantization"
REFERENCE = "the reference file"  # ONNX against ONNX: what the weights are put into
LOGITS = "logits"


class Quantization(Analysis):
    name = NAME

    def wanted(self, config: RunConfig) -> bool:
        return config.quantized_reference

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        from parity.load.quantized_weights import QUANTIZED_OPS

        found: dict[int, str] = {}
        static: set[int] = set()  # statically quantized (parity.analyses.static_quant)
        split = False  # an export in several files (an encoder-decoder folder)
        for slot, candidate in enumerate(context.candidates):
            if candidate is None or slot >= len(run.candidates):
                continue
            if run.candidates[slot].info.error is not None:
                continue
            parts = list(candidate.parts.values()) or [candidate]
            if not candidate.parts and context.reference is None and _static(candidate):
                static.add(run.candidates[slot].index)  # QDQ / QOperator: torch side only
                found[run.candidates[slot].index] = candidate.path
                continue
            if any(set(getattr(c.model, "op_types", ())) & set(QUANTIZED_OPS) for c in parts):
                if candidate.parts:
                    split = True
                else:
                    found[run.candidates[slot].index] = candidate.path
        if split and not found:
            why = "an export split into several files is not read for them yet"
            return noted(run, NAME, f"quantized weights not judged: {why}", done=False)
        if not found:
            return run
        if context.reference is not None:  # ONNX against ONNX: the reference's weights
            results = {
                index: judge_against_reference(run, context, index, path)
                for index, path in found.items()
            }
            run = run.with_results("quantization", results)
            return noted(run, NAME, "the reference file run again with each file's weights")
        side = context.source.torch_side()
        model = getattr(side.model, "module", None)
        if model is None:
            why = side.missing or "this kind of run has no torch model"
            return noted(run, NAME, f"quantized weights not judged: {why}", done=False)
        results = {}
        floors: dict[int, dict[tuple[int, str], float]] = {}
        for index, path in found.items():
            context.deadline.check()
            context.report(NAME, f"torch with the quantized weights of {path}", None)
            try:  # a scale of 3e38 makes inf weights: said in the findings, never as
                # numpy's warnings with source lines on stderr
                with np.errstate(all="ignore"):
                    if index in static:  # QDQ / QOperator: the file's float twin
                        results[index] = judge_static(
                            run, context, index, path, model, side.scope_prefix
                        )
                    else:
                        results[index], floors[index] = judge_file(
                            run, context, index, path, model, side.scope_prefix
                        )
            except NotImplementedError:  # a source that cannot run its torch model again
                why = "this kind of run cannot run its torch model again"
                return noted(run, NAME, f"quantized weights not judged: {why}", done=False)
            except (BudgetError, ModelRunError, OnnxLoadError) as exc:  # the run stands
                return noted(run, NAME, f"quantized weights not judged: {exc.message}", done=False)
        run = with_measured_floor(run.with_results("quantization", results), floors)
        words = ", ".join(f"#{i}" for i in results) if run.is_multi_candidate else "the file"
        return noted(run, NAME, f"{words}: torch run again with its own dequantized weights")


def _static(candidate: Any) -> bool:
    """A statically quantized file (QDQ or QOperator): its op types say so first (cheap)."""
    from parity.load.static_quant import QDQ_COMPUTE, QOPERATOR_COMPUTE, is_static

    ops = set(getattr(candidate.model, "op_types", ()))
    if ops & set(QOPERATOR_COMPUTE):
        return True
    if not {"QuantizeLinear", "DequantizeLinear"} <= ops or not ops & set(QDQ_COMPUTE):
        return False
    from parity.load.onnx_read import read_onnx

    return is_static(read_onnx(candidate.path, external_data=False))


def judge_static(*args: Any) -> QuantizationResult:
    from parity.analyses.static_quant import judge_static as judge

    return judge(*args)


def judge_file(
    run: ValidationRun,
    context: AnalysisContext,
    index: int,
    path: str,
    module: Any,
    prefix: str,
) -> tuple[QuantizationResult, dict[tuple[int, str], float]]:
    """One candidate's quantized weights: checked, then put into torch and run again; with,
    for a file that rounds its activations, what that costs per (input set, output): the
    int8 noise floor measured (with_measured_floor)."""
    from parity.load.onnx_read import read_onnx
    from parity.load.quantized_weights import ATTENTION, EMBED, count_bytes, read_quantized

    proto = read_onnx(path, external_data=False)
    context.budget.check(
        count_bytes(proto),
        "the file's dequantized weights (the quantization-aware reference)",
        proceed=("leave it out with ", Mention("quantized_reference")),
    )
    del proto
    nodes, notes = read_quantized(path)
    matched = match_nodes(nodes, module, prefix)
    weights = tuple(check(m) for m in matched)
    unmatched = [w.node for w in weights if w.parameter is None]
    notes = list(notes)
    if unmatched:
        notes.append(
            f"{len(unmatched)} quantized node(s) matched no torch weight (kept in float in the "
            f"reference): {', '.join(unmatched[:5])}"
        )
    products, missing, unsimulated = _products(path, module, prefix)
    # a fused op left in float computes its insides unlike the file: not judged either
    fused = {w.op for w in weights if w.parameter is None} & {ATTENTION, EMBED}
    unsimulated = tuple(sorted({*unsimulated, *fused}))
    if unsimulated:
        notes.append(
            "quantized ops the reference does not compute as the file does (a difference "
            f"left is not judged): {', '.join(unsimulated)}"
        )
    if products:
        count = sum(sum(flags) for flags in products.values())
        notes.append(
            f"{count} MatMulInteger product(s) of two activations (attention): torch-with-its-"
            "weights rounds both sides of each the same way"
        )
    if missing:
        notes.append(
            "products of two activations in no torch module (not rounded in the reference): "
            + ", ".join(missing[:5])
        )
    activations = _activations(matched) or (PER_TENSOR if products else "")
    if activations == PER_TENSOR:
        notes.append(
            "dynamic quantization also rounds the activations at run time: torch-with-its-"
            "weights rounds each quantized op's input as DynamicQuantizeLinear does"
        )
    elif activations == PER_BLOCK:
        notes.append(
            "MatMulNBits at accuracy_level 4: ONNX Runtime's CPU kernel rounds each input to "
            "int8 per block along K; torch-with-its-weights rounds it the same way"
        )
    usable = [m for m in matched if m.model_weight is not None]
    if not usable:
        return QuantizationResult(
            weights, notes=(*notes, "no weight matched: nothing rerun"), activations=activations
        ), {}
    lead = run.for_candidate(index)
    candidate = context.candidates[_position(run, index)]
    assert candidate is not None
    signature = candidate.signature
    from parity.analyses.rounded_products import rounded_products

    with swapped(module, usable), rounded_products(module, products):
        again = [context.source.reference_again(s, signature) for s in run.input_sets]
        generated = run.generation is not None and bool(run.generation.prompts)
        tokens = context.source.tokens_again() if generated else None
    outputs = split_outputs(lead, again)
    if activations == PER_TENSOR and any(o.export_passed is False for o in outputs):
        from parity.analyses.rounded_products import nudged

        context.deadline.check()
        with swapped(module, usable), rounded_products(module, products), nudged(FLIP_STEPS):
            moved = [context.source.reference_again(s, signature) for s in run.input_sets]
        outputs = with_flips(outputs, again, moved)
    result = QuantizationResult(
        weights=weights,
        outputs=outputs,
        tokens=token_metrics(lead, again, tokens),
        notes=tuple(notes),
        activations=activations,
        unsimulated=unsimulated,
    )
    # the floor is the rounding's cost only where every weight is a rounding and nothing is
    # left unsimulated (a wrong weight's cost is no floor)
    measured = activations == PER_TENSOR and not unsimulated and not result.bugs
    return result, (_costs(lead, again) if measured else {})


MEASURED = "measured: torch with the file's int8 weights, its activations rounded as it does"


def _costs(
    run: ValidationRun, again: Sequence[Mapping[str, np.ndarray]]
) -> dict[tuple[int, str], float]:
    """(input set, output) -> max |torch-with-its-weights - torch| (excluded elements left
    out): what the file's int8 rounding moves each output by."""
    out: dict[tuple[int, str], float] = {}
    for position, case in enumerate(run.cases):
        ref = case.reference.arrays if case.reference is not None else {}
        for name, mine in again[position].items():
            base = ref.get(name)
            if base is None or np.shape(base) != np.shape(mine) or not _is_float(np.asarray(mine)):
                continue
            err = np.abs(np.asarray(mine, np.float64) - np.asarray(base, np.float64))
            mask = case.exclusions.get(name)
            if mask is not None:
                err = err[~np.broadcast_to(mask, err.shape)]
            if err.size:
                out[(case.input_set.index, name)] = float(np.max(err))
    return out


def with_measured_floor(
    run: ValidationRun, floors: Mapping[int, Mapping[tuple[int, str], float]]
) -> ValidationRun:
    """--noise-floor's int8 floor for a file that rounds its activations at run time (its
    scales are not in the file, so no calibrated range estimates them): what the file's
    own weights and rounding move the output by in torch, measured; ONNX's float64 error
    is judged against that (one story with the quantization findings)."""
    from dataclasses import replace

    from parity.results import Noise

    if not any(floors.values()):
        return run
    rows = []
    for c in run.outputs:
        floor = floors.get(c.candidate, {}).get((c.input_set, c.name))
        if c.noise is None or floor is None:
            rows.append(c)
            continue
        error = c.noise.onnx_error
        noise = Noise(
            torch_error=floor,
            onnx_error=error,
            ratio=error / floor if floor > 0 else None,
            precision="int8",
            emulated=MEASURED,
        )
        rows.append(replace(c, noise=noise))
    return run.with_rows(rows)


# quantized ops dynamic quantization writes that the reference does not compute as the file
# does (an LSTM's int8 gates)
UNSIMULATED = ("DynamicQuantizeLSTM",)


def _products(
    path: str, module: Any, prefix: str
) -> tuple[dict[str, tuple[bool, ...]], list[str], tuple[str, ...]]:
    """The file's rounded products of two activations, by torch module path, the scopes no
    module has, and the quantized op types the reference does not simulate (UNSIMULATED)."""
    from parity.analyses.rounded_products import module_paths
    from parity.load.onnx_read import read_onnx
    from parity.load.quantized_weights import activation_products

    proto = read_onnx(path, external_data=False)
    unsimulated = tuple(sorted({n.op_type for n in proto.graph.node} & set(UNSIMULATED)))
    scopes = activation_products(proto)
    found, missing = module_paths(module, scopes, prefix) if scopes else ({}, [])
    return found, missing, unsimulated


FLIP_STEPS = 1e-3  # how far each rounding is nudged to measure what boundary flips move


def with_flips(
    outputs: Sequence[QuantizedOutput],
    again: Sequence[Mapping[str, np.ndarray]],
    moved: Sequence[Mapping[str, np.ndarray]],
) -> tuple[QuantizedOutput, ...]:
    """Each output with how far the reference moved when its roundings were nudged (the
    largest |again - moved| over every input set)."""
    from dataclasses import replace

    flips: dict[str, float] = {}
    for mine, other in zip(again, moved, strict=True):
        for name, value in mine.items():
            a, b = np.asarray(value), np.asarray(other.get(name))
            if a.shape == b.shape and _is_float(a) and a.size:
                worst = float(np.nanmax(np.abs(a.astype(np.float64) - b)))
                flips[name] = max(flips.get(name, 0.0), worst)
    return tuple(replace(o, flip_max_abs=flips.get(o.name)) for o in outputs)


PER_TENSOR = "uint8 per tensor"  # dynamic quantization's activations
PER_BLOCK = "int8 per block"  # MatMulNBits at accuracy_level 4 on ONNX Runtime's CPU


def _activations(matched: Sequence[Any]) -> str:
    """How the file rounds its activations at run time ("": it does not)."""
    if any(m.node.dynamic for m in matched):
        return PER_TENSOR
    if any(m.node.int8_input for m in matched):
        return PER_BLOCK
    return ""


def judge_against_reference(
    run: ValidationRun, context: AnalysisContext, index: int, path: str
) -> QuantizationResult:
    """ONNX against ONNX: the candidate's quantized weights checked against the reference
    file's float weights, and the reference run again with them in their place."""
    import onnx

    from parity.analyses.quantized_match import match_initializers
    from parity.load.onnx_read import read_onnx
    from parity.load.quantized_weights import count_bytes, read_quantized
    from parity.load.sessions import open_session
    from parity.run.runner import run_onnx

    reference = context.reference
    assert reference is not None
    context.budget.check(
        2 * count_bytes(read_onnx(path, external_data=False)),
        "the file's dequantized weights in a copy of the reference",
        proceed=("leave it out with ", Mention("quantized_reference")),
    )
    nodes, notes = read_quantized(path)
    proto = read_onnx(reference.path)
    matched = match_initializers(nodes, proto)
    weights = tuple(check(m) for m in matched)
    notes = list(notes)
    unmatched = [w.node for w in weights if w.parameter is None]
    if unmatched:
        notes.append(
            f"{len(unmatched)} quantized node(s) matched no weight of the reference: "
            f"{', '.join(unmatched[:5])}"
        )
    activations = _activations(matched)
    if activations:
        notes.append(
            f"the file also rounds its activations at run time ({activations}); the reference "
            "file with its weights does not, so the file against it includes that rounding"
        )
    usable = [m for m in matched if m.model_weight is not None]
    if not usable:
        return QuantizationResult(
            weights, notes=(*notes, "no weight matched: nothing rerun"), reference=REFERENCE
        )
    swapped_inits = {m.initializer: m.node.weight for m in usable}
    for tensor in proto.graph.initializer:
        if tensor.name in swapped_inits:
            tensor.CopyFrom(onnx.numpy_helper.from_array(swapped_inits[tensor.name], tensor.name))
    session = open_session(
        proto.SerializeToString(), provider=reference.provider, opt_level=reference.opt_level
    )
    signature = reference.signature
    again = [
        dict(run_onnx(session, s, signature=signature, deadline=context.deadline).arrays)
        for s in run.input_sets
    ]
    return QuantizationResult(
        weights=weights,
        outputs=split_outputs(run.for_candidate(index), again),
        notes=tuple(notes),
        activations=activations,
        activations_simulated=not activations,
        reference=REFERENCE,
    )


@contextlib.contextmanager
def dynamic_reference(path: str, module: Any, prefix: str) -> Iterator[str]:
    """Inside: `module` computes what a dynamic int8 file at `path` means (its own weights
    and tables, its activations rounded where it rounds them), for --layers, so the layers
    and the findings tell one story; yields the note that says so ("" and nothing changed
    for a file without dynamic ops)."""
    from parity.load.quantized_weights import read_quantized

    try:
        nodes, _ = read_quantized(path)
    except OnnxLoadError:  # a file it cannot read: torch's float weights, as before
        nodes = []
    if not any(n.dynamic for n in nodes):
        yield ""
        return
    usable = [m for m in match_nodes(nodes, module, prefix) if m.model_weight is not None]
    products, _, _ = _products(path, module, prefix)
    from parity.analyses.rounded_products import rounded_products

    with swapped(module, usable), rounded_products(module, products):
        yield (
            "torch side: the file's own int8 weights, its activations rounded as the file "
            "rounds them (dynamic int8's intended account): a divergence is what that does "
            "not explain"
        )


def _position(run: ValidationRun, index: int) -> int:
    return next(k for k, c in enumerate(run.candidates) if c.index == index)


@contextlib.contextmanager
def swapped(module: Any, matched: Sequence[Matched]) -> Iterator[None]:
    """`module` with each matched parameter replaced by the file's dequantized weight (a
    new Parameter on its owner: a tied weight, lm_head's, leaves the embedding as it is);
    a dynamic op's module also rounds its input as DynamicQuantizeLinear does (uint8, per
    tensor), so the reference computes what the file says. Put back on exit."""
    import torch

    from parity.analyses.quantized_match import fold_factor

    owners = dict(module.named_modules())
    saved: list[tuple[Any, str, Any]] = []
    hooks: list[Any] = []
    rounded: set[str] = set()  # a packed weight's split parts round its input once
    try:
        for m in matched:
            start = 0
            for linear in m.linears:
                owner = owners[linear.path]
                old = getattr(owner, linear.leaf)
                width = old.shape[0] if linear.transposed or old.ndim == 1 else old.shape[1]
                if linear.rows is not None:
                    width = linear.rows[1] - linear.rows[0]
                part = m.node.weight[:, start : start + width]
                start += width
                value = part.T if linear.transposed else part
                if linear.folded:  # the BatchNorm after the conv multiplies it back
                    value = value / fold_factor(module, linear.folded)[:, None]
                if linear.rows is not None:  # the node's rows of the packed weight
                    tensor = old.detach().clone()
                    rows = slice(*linear.rows)
                    put = torch.from_numpy(np.ascontiguousarray(value)).to(old.dtype)
                    if linear.transposed:
                        tensor[rows] = put
                    else:
                        tensor[:, rows] = put
                else:
                    value = np.ascontiguousarray(value).reshape(tuple(old.shape))
                    tensor = torch.from_numpy(value).to(old.dtype)
                saved.append((owner, linear.leaf, old))
                setattr(owner, linear.leaf, torch.nn.Parameter(tensor, requires_grad=False))
                if linear.path in rounded:
                    continue
                rounded.add(linear.path)
                if m.node.dynamic:
                    hooks.append(owner.register_forward_pre_hook(_rounded_input))
                elif m.node.int8_input:
                    hooks.append(
                        owner.register_forward_pre_hook(_blockwise_int8(m.node.block_size))
                    )
        yield
    finally:
        for hook in hooks:
            hook.remove()
        for owner, leaf, old in reversed(saved):
            setattr(owner, leaf, old)


def _rounded_input(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """ONNX's DynamicQuantizeLinear on the first argument: uint8 over [min(x, 0), max(x, 0)],
    round half to even, then back to float (what MatMulInteger's caller multiplies)."""
    import torch

    from parity.analyses.rounded_products import dynamic_round

    if not args or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
        return args
    return dynamic_round(args[0]), *args[1:]


def _blockwise_int8(block: int) -> Any:
    """MatMulNBits at accuracy_level 4 on the CPU: its input rounded to int8 per block of
    `block` along K, symmetric (scale = max |x| / 127 per block), then back to float."""
    import torch

    def hook(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if not args or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
            return args
        x = args[0]
        k = x.shape[-1]
        pad = (-k) % block
        padded = torch.nn.functional.pad(x, (0, pad)) if pad else x
        blocks = padded.reshape(*padded.shape[:-1], -1, block)
        scale = blocks.abs().amax(dim=-1, keepdim=True) / 127.0
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        rounded = torch.clamp(torch.round(blocks / safe), -127, 127) * safe
        out = rounded.reshape(padded.shape)[..., :k].to(x.dtype)
        return out, *args[1:]

    return hook


def split_outputs(
    run: ValidationRun, again: Sequence[Mapping[str, np.ndarray]]
) -> tuple[QuantizedOutput, ...]:
    """Per output over every input set: the file against torch-with-its-weights (judged at
    the run's tolerance) and torch-with-its-weights against torch (SQNR)."""
    candidate = run.candidates[0]
    rows: dict[str, dict[str, Any]] = {}
    for position, case in enumerate(run.cases):
        onnx = candidate.onnx_outputs[position].arrays if candidate.onnx_outputs else {}
        ref = case.reference.arrays if case.reference is not None else {}
        for name, mine in again[position].items():
            mine = np.asarray(mine)
            row = rows.setdefault(
                name, {"export": 0.0, "passed": None, "signal": 0.0, "noise": 0.0, "max": 0.0}
            )
            mask = case.exclusions.get(name)
            if name in onnx and np.shape(onnx[name]) == mine.shape:
                judge_into(row, run, case, name, mine, onnx[name])
            if name in ref and np.shape(ref[name]) == mine.shape and _is_float(mine):
                base = np.asarray(ref[name], np.float64)
                keep = (
                    np.ones(mine.shape, bool)
                    if mask is None
                    else ~np.broadcast_to(mask, mine.shape)
                )
                with np.errstate(all="ignore"):  # weights of inf (a scale of 3e38): said below
                    err = mine.astype(np.float64) - base
                    if np.any(keep & ~np.isfinite(mine) & np.isfinite(base)):
                        row["broken"] = True  # NaN on both sides would read as agreement
                    keep = keep & np.isfinite(err)
                    row["signal"] += float(np.sum(base[keep] ** 2))
                    row["noise"] += float(np.sum(err[keep] ** 2))
                if keep.any():
                    row["max"] = max(row["max"], float(np.max(np.abs(err[keep]))))
    return outputs_of_rows(run, rows)


def _is_float(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.floating)


def token_metrics(
    run: ValidationRun, again: Sequence[Mapping[str, np.ndarray]], tokens: np.ndarray | None
) -> QuantizedTokens | None:
    """A causal LM's tokens: top-1 agreement and KL over every step's judged positions, and
    greedy generate() with the file's weights against torch's and ONNX Runtime's tokens."""
    if run.generation is None:
        return None
    agree = total = 0
    kl_sum = 0.0
    for position, case in enumerate(run.cases):
        ref = case.reference.arrays if case.reference is not None else {}
        if LOGITS not in ref or LOGITS not in again[position]:
            continue
        p_logits = np.asarray(ref[LOGITS], np.float64)
        q_logits = np.asarray(again[position][LOGITS], np.float64)
        if p_logits.shape != q_logits.shape or p_logits.ndim < 2:
            continue
        mask = case.exclusions.get(LOGITS)
        keep: np.ndarray = np.ones(p_logits.shape[:-1], bool)
        if mask is not None:
            keep = np.asarray(~np.broadcast_to(mask, p_logits.shape).any(axis=-1))
        p, q = p_logits[keep], q_logits[keep]
        agree += int(np.sum(p.argmax(-1) == q.argmax(-1)))
        total += int(p.shape[0])
        log_p = p - _logsumexp(p)
        log_q = q - _logsumexp(q)
        kl_sum += float(np.sum(np.exp(log_p) * (log_p - log_q)))
    greedy_agree = greedy_total = 0
    first: int | None = None
    onnx_agree: int | None = None
    if tokens is not None and run.generation.prompts:
        onnx_agree = 0
        for row, prompt in enumerate(run.generation.prompts):
            if row >= tokens.shape[0]:
                break
            mine = [int(t) for t in tokens[row]]
            theirs = list(prompt.torch_tokens)[: len(mine)]
            greedy_total += len(theirs)
            for step, (a, b) in enumerate(zip(mine, theirs, strict=False)):
                if a == b:
                    greedy_agree += 1
                elif first is None or step < first:
                    first = step
            onnx_agree += sum(
                int(a == b) for a, b in zip(mine, list(prompt.onnx_tokens), strict=False)
            )
    if not total and tokens is None:
        return None
    return QuantizedTokens(
        top1_agreement=agree / total if total else None,
        kl_mean=kl_sum / total if total else None,
        greedy_agree=greedy_agree,
        greedy_total=greedy_total,
        first_change=first,
        onnx_agree=onnx_agree,
    )


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=-1, keepdims=True)
    return top + np.log(np.sum(np.exp(a - top), axis=-1, keepdims=True))


def weight_rows(result: QuantizationResult) -> list[QuantizedWeight]:
    """Bugs first, then the rest in the file's order (what a table shows)."""
    return sorted(result.weights, key=lambda w: w.status != "bug")
