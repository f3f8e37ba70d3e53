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

from parity.analyses.quantized_match import Matched, check, match_nodes
from parity.analyses.stage import Analysis, AnalysisContext, noted
from parity.errors import BudgetError, ModelRunError, OnnxLoadError
from parity.judge.compare import compare_outputs
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
        split = False  # an export in several files (an encoder-decoder folder)
        for slot, candidate in enumerate(context.candidates):
            if candidate is None or slot >= len(run.candidates):
                continue
            if run.candidates[slot].info.error is not None:
                continue
            parts = list(candidate.parts.values()) or [candidate]
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
            run = run.with_quantization(results)
            return noted(run, NAME, "the reference file run again with each file's weights")
        side = context.source.torch_side()
        model = getattr(side.model, "module", None)
        if model is None:
            why = side.missing or "this kind of run has no torch model"
            return noted(run, NAME, f"quantized weights not judged: {why}", done=False)
        results = {}
        for index, path in found.items():
            context.deadline.check()
            context.report(NAME, f"torch with the quantized weights of {path}", None)
            try:
                results[index] = judge_file(run, context, index, path, model, side.scope_prefix)
            except NotImplementedError:  # a source that cannot run its torch model again
                why = "this kind of run cannot run its torch model again"
                return noted(run, NAME, f"quantized weights not judged: {why}", done=False)
            except (BudgetError, ModelRunError, OnnxLoadError) as exc:  # the run stands
                return noted(run, NAME, f"quantized weights not judged: {exc.message}", done=False)
        run = run.with_quantization(results)
        words = ", ".join(f"#{i}" for i in results) if run.is_multi_candidate else "the file"
        return noted(run, NAME, f"{words}: torch run again with its own dequantized weights")


def judge_file(
    run: ValidationRun,
    context: AnalysisContext,
    index: int,
    path: str,
    module: Any,
    prefix: str,
) -> QuantizationResult:
    """One candidate's quantized weights: checked, then put into torch and run again."""
    from parity.load.onnx_read import read_onnx
    from parity.load.quantized_weights import count_bytes, read_quantized

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
    activations = _activations(matched)
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
        )
    lead = run.for_candidate(index)
    candidate = context.candidates[_position(run, index)]
    assert candidate is not None
    signature = candidate.signature
    with swapped(module, usable):
        again = [context.source.reference_again(s, signature) for s in run.input_sets]
        generated = run.generation is not None and bool(run.generation.prompts)
        tokens = context.source.tokens_again() if generated else None
    outputs = split_outputs(lead, again)
    return QuantizationResult(
        weights=weights,
        outputs=outputs,
        tokens=token_metrics(lead, again, tokens),
        notes=tuple(notes),
        activations=activations,
    )


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


def _position(run: ValidationRun, index: int) -> int:
    return next(k for k, c in enumerate(run.candidates) if c.index == index)


@contextlib.contextmanager
def swapped(module: Any, matched: Sequence[Matched]) -> Iterator[None]:
    """`module` with each matched parameter replaced by the file's dequantized weight (a
    new Parameter on its owner: a tied weight, lm_head's, leaves the embedding as it is);
    a dynamic op's module also rounds its input as DynamicQuantizeLinear does (uint8, per
    tensor), so the reference computes what the file says. Put back on exit."""
    import torch

    owners = dict(module.named_modules())
    saved: list[tuple[Any, Any]] = []
    hooks: list[Any] = []
    rounded: set[str] = set()  # a packed weight's split parts round its input once
    try:
        for m in matched:
            start = 0
            for linear in m.linears:
                owner = owners[linear.path]
                old = owner.weight
                width = old.shape[0] if linear.transposed else old.shape[1]
                if linear.rows is not None:
                    width = linear.rows[1] - linear.rows[0]
                part = m.node.weight[:, start : start + width]
                start += width
                value = torch.from_numpy(
                    np.ascontiguousarray(part.T if linear.transposed else part)
                )
                tensor = value.to(old.dtype)
                if linear.rows is not None:  # the node's rows of the packed weight
                    tensor = old.detach().clone()
                    rows = slice(*linear.rows)
                    if linear.transposed:
                        tensor[rows] = value
                    else:
                        tensor[:, rows] = value
                saved.append((owner, old))
                owner.weight = torch.nn.Parameter(tensor, requires_grad=False)
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
        for owner, old in reversed(saved):
            owner.weight = old


def _rounded_input(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """ONNX's DynamicQuantizeLinear on the first argument: uint8 over [min(x, 0), max(x, 0)],
    round half to even, then back to float (what MatMulInteger's caller multiplies)."""
    import torch

    if not args or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
        return args
    x = args[0]
    low = torch.clamp(x.min(), max=0.0)
    high = torch.clamp(x.max(), min=0.0)
    scale = (high - low) / 255.0
    if float(scale) == 0.0:
        return args
    zero = torch.clamp(torch.round(-low / scale), 0, 255)
    q = torch.clamp(torch.round(x / scale) + zero, 0, 255)
    return ((q - zero) * scale).to(x.dtype), *args[1:]


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
                c = compare_outputs(
                    mine,
                    np.asarray(onnx[name]),
                    name=name,
                    input_set=case.input_set.index,
                    tolerance=run.tolerances.for_output(name),
                    exclude=mask,
                )
                worst = c.stats.max_abs if c.stats is not None else None
                if worst is not None:
                    row["export"] = max(row["export"], worst)
                row["passed"] = (row["passed"] is not False) and c.status.passed
            if name in ref and np.shape(ref[name]) == mine.shape and _is_float(mine):
                base = np.asarray(ref[name], np.float64)
                err = mine.astype(np.float64) - base
                keep = (
                    np.ones(mine.shape, bool)
                    if mask is None
                    else ~np.broadcast_to(mask, mine.shape)
                )
                row["signal"] += float(np.sum(base[keep] ** 2))
                row["noise"] += float(np.sum(err[keep] ** 2))
                if keep.any():
                    row["max"] = max(row["max"], float(np.max(np.abs(err[keep]))))
    out = []
    for name, row in rows.items():
        sqnr = None
        if row["noise"] > 0 and row["signal"] > 0:
            sqnr = float(10 * np.log10(row["signal"] / row["noise"]))
        out.append(
            QuantizedOutput(
                name=name,
                export_max_abs=row["export"] if row["passed"] is not None else None,
                export_passed=row["passed"],
                sqnr_db=sqnr,
                quant_max_abs=row["max"],
            )
        )
    order = {n: k for k, n in enumerate(run.output_names)}
    return tuple(sorted(out, key=lambda o: order.get(o.name, len(order))))


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
