"""A statically quantized file (QDQ or QOperator, per tensor or per channel) judged for what
it is (parity.analyses.quantization hands such a file here when the run has a torch model).

The difference between the file and torch is split in three, each said once:

- the weights: each quantized Conv / Gemm / MatMul weight (and its int32 bias) read back as
  float (parity.load.static_quant), matched to the torch module it was made from (by the
  module path its exporter wrote, else by value), and checked to be a rounding of it within
  one step of its output channel. A BatchNorm the exporter folded into the conv is folded
  into torch's weight the same way before the check. A weight that is not a rounding is a
  bug at its node, whatever the outputs say;
- the export: the file's own graph with its activation rounding taken out (the float twin:
  its calibrated QuantizeLinear/DequantizeLinear pairs removed, QOperator ops turned back
  into their float ops) against torch with the file's dequantized weights put in: both
  compute in float with the same weights, so a faithful export agrees within the run's
  tolerance; one that does not computes something else (a bug);
- what quantizing costs: the file against torch (weights and activations rounded), as SQNR.

Rounding activations is discontinuous (a value near a step's edge rounds either way on a
float32 difference), so the file is never compared element by element with a reference
that rounds them: the twin carries the comparison instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from parity.analyses.quantized_match import ALIASES, Linear, Matched, check
from parity.analyses.quantized_rows import judge_into, outputs_of_rows
from parity.load.quantized_weights import QuantizedNode
from parity.load.static_quant import StaticWeight
from parity.results import QuantizationResult, QuantizedOutput, QuantizedWeight, ValidationRun
from parity.settings import Mention

if TYPE_CHECKING:  # annotations only
    from parity.analyses.interface import AnalysisContext

ACTIVATIONS = "int8 calibrated"  # what QuantizationResult.activations says for these files
MAX_BATCHNORMS = 64  # folded-BatchNorm candidates tried per conv
BIAS_SLACK = 1e-5  # float32's own rounding of a folded bias, relative to its largest value


@dataclass(frozen=True)
class StaticMatch:
    """A file's weight and the torch module it stands for (`module` "" when unmatched);
    `batchnorm` the BatchNorm folded into it ("" none); `model_weight` / `model_bias` torch's,
    folded, in the file's layout."""

    weight: StaticWeight
    module: str
    batchnorm: str
    model_weight: np.ndarray | None
    model_bias: np.ndarray | None


def judge_static(
    run: ValidationRun,
    context: AnalysisContext,
    index: int,
    path: str,
    module: Any,
    prefix: str,
) -> QuantizationResult:
    """One statically quantized candidate: weights checked, its float twin against torch
    with its weights, the file against torch (see module)."""
    from parity.layers.qdq_search import without_activation_rounding
    from parity.load.onnx_read import read_onnx
    from parity.load.static_quant import float_twin, static_weights

    head = read_onnx(path, external_data=False)
    context.budget.check(
        _float_bytes(head),
        "the file's dequantized weights and its float twin (the quantization-aware reference)",
        proceed=("leave it out with ", Mention("quantized_reference")),
    )
    del head
    proto = read_onnx(path)
    weights, notes = static_weights(proto)
    position = next(k for k, c in enumerate(run.candidates) if c.index == index)
    candidate = context.candidates[position]
    assert candidate is not None
    first = run.input_sets[0] if run.input_sets else None
    folded = (
        batchnorms_after_convs(
            module, lambda: context.source.reference_again(first, candidate.signature)
        )
        if first is not None
        else None
    )
    matched = match_static(weights, module, prefix, folded)
    rows = tuple(check_static(m) for m in matched)
    unmatched = [w.node for w in rows if w.parameter is None]
    notes = list(notes)
    if unmatched:
        notes.append(
            f"{len(unmatched)} quantized node(s) matched no torch weight (kept in float in the "
            f"reference): {', '.join(unmatched[:5])}"
        )
    twin = float_twin(proto, without_activation_rounding)
    del proto
    lead = run.for_candidate(index)
    if twin is None:
        notes.append(
            "the file's activation rounding could not be taken out (a quantized op this "
            "version does not rewrite): the file is compared with torch with its weights as it is"
        )
    usable = [m for m in matched if m.model_weight is not None]
    with swapped_static(module, usable):
        again = [context.source.reference_again(s, candidate.signature) for s in run.input_sets]
    twin_outputs = None
    if twin is not None:
        try:
            twin_outputs = _run_twin(twin, candidate, run, context)
        except Exception as exc:  # ONNX Runtime refused the rewrite: said, the file stands
            from parity.errors import BudgetError, RunTimeout

            if isinstance(exc, (BudgetError, RunTimeout)):
                raise
            twin = None
            said = (str(exc).splitlines() or [""])[0][:200]
            notes.append(f"the file's float twin could not run ({said})")
    outputs = static_outputs(lead, again, twin_outputs)
    located = ""
    faithful = all(o.export_passed is not False for o in outputs)
    if twin is not None and twin_outputs is not None and not faithful and context.config.layers:
        context.report("quantization", "where the float twin starts to differ", None)
        located = _locate(twin, run, context, candidate, module, usable)
    notes.append(
        "static quantization rounds the activations with calibrated scales: the file's own "
        "graph with that rounding taken out is what is compared with torch with its weights"
    )
    return QuantizationResult(
        weights=rows,
        outputs=outputs,
        notes=tuple(notes),
        activations=ACTIVATIONS,
        activations_simulated=twin is not None,
        float_twin=twin is not None,
        located=located,
    )


def _locate(
    twin: Any,
    run: ValidationRun,
    context: AnalysisContext,
    candidate: Any,
    module: Any,
    usable: Sequence[StaticMatch],
) -> str:
    """--layers on the float twin against torch with the file's weights (both float, the
    same weights: a divergence there is the export's): the first node, "" when none."""
    import tempfile
    from pathlib import Path

    import onnx

    from parity.layers.localise import localise_run
    from parity.layers.result import Outcome

    side = context.source.torch_side()
    with tempfile.TemporaryDirectory(prefix="parity-twin-") as folder:
        path = Path(folder) / "twin.onnx"
        try:
            onnx.save(twin, str(path))
        except ValueError:  # over protobuf's 2 GB: not located
            return ""
        with swapped_static(module, usable):
            layers = localise_run(
                side,
                path,
                run.input_sets,
                candidate.signature,
                provider=candidate.provider,
                opt_level=candidate.opt_level,
                memory_mb=context.config.layers_memory_mb,
                confirm=context.config.layers_confirm,
            )
    first = layers.first_divergence
    if first is None:
        return ""
    confirmation = layers.confirmation_of(first)
    born = getattr(confirmation, "outcome", None) == Outcome.BORN
    return f"the {first.onnx_op} node {first.onnx_node}" + (" (confirmed alone)" if born else "")


def _float_bytes(model: Any) -> int:
    """float32 bytes of every integer initializer dequantized, twice (the weights read back
    and the twin's copy), from the tensors' shapes (no weights read)."""
    import onnx

    ints = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT32}
    count = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type in ints)
    return 2 * 4 * count


def _run_twin(twin: Any, candidate: Any, run: ValidationRun, context: AnalysisContext) -> list:
    from parity.load.sessions import open_session
    from parity.run.runner import run_onnx

    session = open_session(
        twin.SerializeToString(), provider=candidate.provider, opt_level=candidate.opt_level
    )
    return [
        dict(run_onnx(session, s, signature=candidate.signature, deadline=context.deadline).arrays)
        for s in run.input_sets
    ]


# ----------------------------------------------------------------------------- matching


def _modules(module: Any) -> dict[str, Any]:
    import torch

    kinds = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    found = {}
    for path, sub in module.named_modules():
        weight = getattr(sub, "weight", None)
        kind = isinstance(sub, kinds) or type(sub).__name__ == "Conv1D"
        if kind and isinstance(weight, torch.Tensor) and weight.is_floating_point():
            found[path] = sub
    return found


def _paths(w: StaticWeight, prefix: str) -> list[str]:
    """Module paths the node's scope and its weight's name may mean, most likely first."""
    raw = [s for s in (w.scope, w.source.removesuffix(".weight") if "." in w.source else "") if s]
    for path in list(raw):  # dynamo's scopes end in the op's own name (`up.linear_3`)
        parts = path.split(".")
        raw += [".".join(parts[:k]) for k in range(len(parts) - 1, 0, -1)]
    out: list[str] = []
    for path in raw:
        for old, new in ALIASES:
            for cand in (path, path.replace(old, new) if old else new + path):
                for p in (cand, cand.removeprefix(prefix)):
                    if p not in out:
                        out.append(p)
    return out


def _layout(sub: Any) -> np.ndarray:
    """A module's weight in the file's layout (Conv1D stores Linear's transpose)."""
    array = sub.weight.detach().float().cpu().numpy()
    return array.T if type(sub).__name__ == "Conv1D" else array


def _bias(sub: Any) -> np.ndarray | None:
    b = getattr(sub, "bias", None)
    return None if b is None else b.detach().float().cpu().numpy().reshape(-1)


def _folds(w: StaticWeight, sub: Any, batchnorms: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(batchnorm path, weight, bias) options: as it is, or with a BatchNorm folded in."""
    weight, bias = _layout(sub), _bias(sub)
    options: list[tuple[str, Any, Any]] = [("", weight, bias)]
    if not w.conv:
        return options
    channels = weight.shape[0]
    for path, bn in list(batchnorms.items())[:MAX_BATCHNORMS]:
        if bn.num_features != channels or bn.running_var is None:
            continue
        s, shift = _bn_affine(bn)
        folded = weight * s.reshape(-1, *([1] * (weight.ndim - 1)))
        b = np.zeros(channels, np.float32) if bias is None else bias
        options.append((path, folded.astype(np.float32), (b * s + shift).astype(np.float32)))
    return options


def _bn_affine(bn: Any) -> tuple[np.ndarray, np.ndarray]:
    """An eval BatchNorm as y = x * s + shift, per channel."""
    var = bn.running_var.detach().double().cpu().numpy()
    mean = bn.running_mean.detach().double().cpu().numpy()
    gamma = np.ones_like(var) if bn.weight is None else bn.weight.detach().double().numpy()
    beta = np.zeros_like(var) if bn.bias is None else bn.bias.detach().double().numpy()
    s = gamma / np.sqrt(var + bn.eps)
    return s, beta - mean * s


def _score(w: StaticWeight, model: np.ndarray) -> float:
    """The median over output channels of the largest |model - file| in that channel's step."""
    diff = np.abs(model.reshape(model.shape[0], -1) - w.weight.reshape(w.weight.shape[0], -1))
    worst = diff.max(axis=1)
    steps = np.where(w.steps > 0, w.steps, np.inf)
    return float(np.median(worst / steps))


def batchnorms_after_convs(module: Any, run_once: Any) -> dict[str, str]:
    """{conv path: BatchNorm path} for each BatchNorm that reads a conv's output directly,
    seen in one forward pass (forward hooks): the BatchNorms an exporter folds. A BatchNorm
    near the identity (a fresh one) rounds the same either way, so numbers cannot tell."""
    import torch

    convs = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    norm = torch.nn.modules.batchnorm._BatchNorm
    last: list[Any] = [None, ""]  # the latest conv output and its module
    pairs: dict[str, str] = {}
    hooks = []

    def made(path: str) -> Any:
        def hook(_m: Any, _args: Any, out: Any) -> None:
            last[0], last[1] = out, path

        return hook

    def read(path: str) -> Any:
        def hook(_m: Any, args: tuple[Any, ...]) -> None:
            if args and last[0] is not None and args[0] is last[0]:
                pairs.setdefault(last[1], path)

        return hook

    for path, sub in module.named_modules():
        if isinstance(sub, convs):
            hooks.append(sub.register_forward_hook(made(path)))
        elif isinstance(sub, norm):
            hooks.append(sub.register_forward_pre_hook(read(path)))
    try:
        run_once()
    finally:
        for h in hooks:
            h.remove()
        last[0] = None
    return pairs


def match_static(
    weights: Sequence[StaticWeight],
    module: Any,
    prefix: str,
    folded: Mapping[str, str] | None = None,
) -> list[StaticMatch]:
    """Each weight with the module it was made from: by name first (whatever its values:
    a wrong weight is still that module's), else the same-shape weight it points the same
    way as, channel by channel (a wrong scale or a folded BatchNorm scales channels, it
    does not turn them), at least MIN_COSINE; then torch's weight with the BatchNorm that
    reads its output folded in (`folded`, seen in a forward pass), else as it is; without
    `folded`, whichever of those the file's lies fewer steps from."""
    import torch

    table = _modules(module)
    norm = torch.nn.modules.batchnorm._BatchNorm
    batchnorms = {p: m for p, m in module.named_modules() if isinstance(m, norm)}
    tensors = {**dict(module.named_buffers()), **dict(module.named_parameters())}
    out = []
    for w in weights:
        if w.constant:
            out.append(_constant(w, tensors, prefix))
            continue
        same = [p for p in table if tuple(_layout(table[p]).shape) == w.weight.shape]
        named = [p for p in _paths(w, prefix) if p in same]
        path = named[0] if named else _by_direction(w, same, table)
        if path is None:
            out.append(StaticMatch(w, "", "", None, None))
            continue
        options = _folds(w, table[path], batchnorms)
        if folded is not None:  # the pass saw which BatchNorm reads this conv: that one
            options = [o for o in options if o[0] == folded.get(path, "")] or options
        bn, weight, bias = min(options, key=lambda o: _score(w, o[1]))
        out.append(StaticMatch(w, path, bn, weight, bias))
    return out


def _constant(w: StaticWeight, tensors: Mapping[str, Any], prefix: str) -> StaticMatch:
    """Another quantized constant with the torch parameter or buffer of its name (the
    quantizer keeps the exporter's, which keeps the state dict's), same size."""
    for name in dict.fromkeys((w.source, w.source.removeprefix(prefix), w.source[2:])):
        tensor = tensors.get(name)
        if tensor is not None and tensor.numel() == w.weight.size:
            value = tensor.detach().float().cpu().numpy().reshape(-1, 1)
            return StaticMatch(w, name, "", value, None)
    return StaticMatch(w, "", "", None, None)


MIN_COSINE = 0.9  # a rounding points the same way as its weight (int8: above 0.999)


def _by_direction(w: StaticWeight, paths: Sequence[str], table: Mapping[str, Any]) -> str | None:
    """The module whose weight's output channels point most the same way as the file's
    (the median over channels of |cosine|), if at least MIN_COSINE."""
    mine = w.weight.reshape(w.weight.shape[0], -1).astype(np.float64)
    best: tuple[float, str | None] = (MIN_COSINE, None)
    for path in paths:
        theirs = _layout(table[path]).reshape(mine.shape).astype(np.float64)
        dots = np.abs(np.sum(mine * theirs, axis=1))
        norms = np.linalg.norm(mine, axis=1) * np.linalg.norm(theirs, axis=1)
        cosine = float(np.median(np.where(norms > 0, dots / np.where(norms > 0, norms, 1), 0)))
        if cosine >= best[0]:
            best = (cosine, path)
    return best[1]


# ----------------------------------------------------------------------------- the check


def check_static(m: StaticMatch) -> QuantizedWeight:
    """The weight judged against the model's, per output channel, in its steps; its bias
    too (a rounding of the model's within one step of input scale x weight scale)."""
    w = m.weight
    channels = w.weight.shape[0]
    k = int(w.weight.size // max(channels, 1))
    name = m.module if w.constant else f"{m.module}.weight" if m.module else ""
    if m.batchnorm:
        name += f" (with {m.batchnorm} folded in)"
    node = QuantizedNode(
        node=w.node,
        op=w.op,
        bits=w.bits,
        block_size=k,
        weight=w.weight.reshape(channels, k).T,
        steps=w.steps.reshape(channels, 1),
        source=w.source,
        scope=w.scope,
        scales_name=w.scales_name,
    )
    model = None if m.model_weight is None else m.model_weight.reshape(channels, k).T
    row = check(Matched(node, (Linear(m.module, name, True),) if m.module else (), model))
    if not m.module:
        return replace(row, parameter=None)
    bad_bias = _bias_off(m)
    if bad_bias:
        defect = f"its bias is not a rounding of {m.module}'s in {bad_bias} channel(s)"
        return replace(
            row,
            bad_blocks=max(row.bad_blocks, bad_bias),  # channels, each counted once
            defect=f"{row.defect}; {defect}" if row.defect else defect,
        )
    return row


def _bias_off(m: StaticMatch) -> int:
    """Output channels whose bias is beyond one step (plus float32 rounding) of torch's."""
    got = m.weight.bias
    if got is None:
        return 0
    want = np.zeros_like(got) if m.model_bias is None else m.model_bias
    if want.shape != got.shape:
        return 0
    steps = m.weight.bias_steps if m.weight.bias_steps is not None else np.zeros_like(got)
    slack = BIAS_SLACK * max(float(np.max(np.abs(want), initial=0.0)), 1e-3)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return int(np.sum(diff > steps * 1.001 + slack))


# ----------------------------------------------------------------------------- the reference


@contextlib.contextmanager
def swapped_static(module: Any, matched: Sequence[StaticMatch]) -> Iterator[None]:
    """`module` computing with the file's dequantized weights and biases: a conv whose
    BatchNorm the exporter folded gets the file's weight unfolded (divided by the BN's
    scale) and the BN's running mean moved so that BN(conv(x)) is the file's conv. Put
    back on exit."""
    import torch

    owners = dict(module.named_modules())
    saved: list[tuple[Any, str, Any]] = []

    def put(owner: Any, attr: str, value: np.ndarray, like: Any) -> None:
        saved.append((owner, attr, getattr(owner, attr)))
        tensor = torch.from_numpy(np.ascontiguousarray(value)).to(like.dtype)
        if attr in ("weight", "bias") or isinstance(getattr(owner, attr), torch.nn.Parameter):
            setattr(owner, attr, torch.nn.Parameter(tensor, requires_grad=False))
        else:
            setattr(owner, attr, tensor)

    try:
        for m in matched:
            if m.weight.constant:  # a parameter or buffer by its full name, the file's shape
                parent, _, leaf = m.module.rpartition(".")
                owner = module.get_submodule(parent) if parent else module
                old = getattr(owner, leaf)
                put(owner, leaf, m.weight.weight.reshape(tuple(old.shape)), old)
                continue
            sub = owners[m.module]
            weight = m.weight.weight
            bias = m.weight.bias
            if type(sub).__name__ == "Conv1D":
                weight = weight.T
            if m.batchnorm:
                bn = owners[m.batchnorm]
                s, shift = _bn_affine(bn)
                shape = (-1, *([1] * (weight.ndim - 1)))
                put(sub, "weight", (weight / s.reshape(shape)).astype(np.float32), sub.weight)
                if bias is not None:
                    own = _bias(sub)
                    own = np.zeros_like(s) if own is None else own.astype(np.float64)
                    # BN(conv) = (W x + own) s + shift; want W_f x + b_f: mean moves
                    mean = bn.running_mean.detach().double().cpu().numpy()
                    new_mean = mean - (bias.astype(np.float64) - (own * s + shift)) / s
                    put(bn, "running_mean", new_mean.astype(np.float32), bn.running_mean)
                continue
            put(sub, "weight", weight, sub.weight)
            if bias is not None:
                like = sub.bias if sub.bias is not None else sub.weight
                put(sub, "bias", bias, like)
        yield
    finally:
        for owner, attr, old in reversed(saved):
            setattr(owner, attr, old)


def static_outputs(
    run: ValidationRun,
    again: Sequence[Mapping[str, np.ndarray]],
    twin: Sequence[Mapping[str, np.ndarray]] | None,
) -> tuple[QuantizedOutput, ...]:
    """Per output over every input set: the twin (the file itself when there is none)
    against torch with the file's weights at the run's tolerance, and the file against
    torch (SQNR: what its weights and activations cost)."""
    candidate = run.candidates[0]
    rows: dict[str, dict[str, Any]] = {}
    for position, case in enumerate(run.cases):
        onnx = candidate.onnx_outputs[position].arrays if candidate.onnx_outputs else {}
        ref = case.reference.arrays if case.reference is not None else {}
        side = twin[position] if twin is not None else onnx
        for name, mine in again[position].items():
            mine = np.asarray(mine)
            row = rows.setdefault(
                name, {"export": 0.0, "passed": None, "signal": 0.0, "noise": 0.0, "max": 0.0}
            )
            mask = case.exclusions.get(name)
            if name in side and np.shape(side[name]) == mine.shape:
                judge_into(row, run, case, name, mine, side[name])
            if name in ref and name in onnx and np.shape(ref[name]) == np.shape(onnx[name]):
                base = np.asarray(ref[name], np.float64)
                if not np.issubdtype(base.dtype, np.floating):
                    continue
                err = np.asarray(onnx[name], np.float64) - base
                keep = np.ones(base.shape, bool)
                if mask is not None:
                    keep = ~np.broadcast_to(mask, base.shape)
                row["signal"] += float(np.sum(base[keep] ** 2))
                row["noise"] += float(np.sum(err[keep] ** 2))
                if keep.any():
                    row["max"] = max(row["max"], float(np.max(np.abs(err[keep]))))
    return outputs_of_rows(run, rows)  # its rows are never "broken": as they were
