"""A quantized node's weight matched to the torch parameter(s) it was made from, and checked
to be a rounding of them (parity.analyses.quantization).

Matching: by the module path its exporter wrote (`/model/layers.0/mlp/down_proj/MatMul_Q4`,
dynamo's name scopes) or its weight's name (`model.layers.0.mlp.down_proj.weight_Q4`), as
parity.layers reads scopes; GenAI's builder spells `attn` for transformers' `self_attn` and
packs q/k/v (`qkv_proj`) and gate/up (`gate_up_proj`) into one MatMul: the parameters are
concatenated along N. Where no name fits, the Linear of the same shape whose weight is
closest in steps (its median block): a weight is matched by its values, never guessed.
A ConvInteger's weight is matched to a Conv module (as B = W.reshape(O, -1).T); where the
export folded the BatchNorm that follows it in the model (legacy and dynamo exporters do),
the weight it stands for is the folded one, W x gamma / sqrt(var + eps) per output channel.
A quantized Gather's table is matched to an nn.Embedding.

Rounding: every element of a rounding lies within one quantization step of its block of
the model's weight (round-to-nearest: half a step; GPTQ/AWQ-style: about one). A block
beyond that is a bug at its node; what is wrong there is said when it is recognisable (a
scale off by a factor, a zero point off by whole steps, a transposed weight, a block that
holds its neighbour's values).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from parity.layers.projections import PACKED, split_of
from parity.load.quantized_weights import QuantizedNode
from parity.results import QuantizedWeight

SLACK = 1.0 + 1e-3  # one step, with float32's own rounding of the dequantized value
# a fused attention (QAttention) packs its module's q/k/v Linears, in this order
ATTENTION_PARTS = (("query", "key", "value"), ("q_proj", "k_proj", "v_proj"), ("q", "k", "v"))
ALIASES = (("attn.", "self_attn."), ("", "model."))
DIAGNOSED_BLOCKS = 256
CHUNK_COLUMNS = 4096  # blocks looked at to say what is wrong (the count covers them all)


@dataclass(frozen=True)
class Linear:
    """A module's 2-D weight as the MatMul's B [K, N] sees it (Linear's is [N, K])."""

    path: str  # the module's path
    parameter: str  # its weight's full name
    transposed: bool  # torch stores [N, K] (nn.Linear); Conv1D stores [K, N]
    folded: str = ""  # a Conv: the path of the BatchNorm the export folded into it
    leaf: str = "weight"  # the module's attribute (a LayerNorm's gamma "weight", beta "bias")
    # the node's rows of a packed weight (output features: GenAI splits Phi-3's gate_up_proj)
    rows: tuple[int, int] | None = None

    def as_b(self, weight: np.ndarray) -> np.ndarray:
        if weight.ndim > 2:  # a conv's [O, I/groups, kh, kw]
            weight = weight.reshape(weight.shape[0], -1)
        if weight.ndim == 1:  # a norm's gamma or beta, as one row
            return weight.reshape(1, -1)
        b = weight.T if self.transposed else weight
        return b if self.rows is None else b[:, self.rows[0] : self.rows[1]]

    @property
    def words(self) -> str:
        return self.parameter + (f"[{self.rows[0]}:{self.rows[1]}]" if self.rows else "")


@dataclass(frozen=True)
class Matched:
    """A node and what it stands for: the parameters (several: packed along N), or a
    reference ONNX file's float initializer (`initializer`, ONNX against ONNX)."""

    node: QuantizedNode
    linears: tuple[Linear, ...]
    model_weight: np.ndarray | None  # [K, N], float32; None when unmatched
    initializer: str = ""

    @property
    def names(self) -> str:
        """What it stands for, in words ("" when unmatched)."""
        return self.initializer or " + ".join(lin.words for lin in self.linears)


def linears(module: object) -> dict[str, Linear]:
    """Every module with a 2-D float `weight` (Linear, transformers' Conv1D), by path."""
    import torch

    found: dict[str, Linear] = {}
    for path, sub in module.named_modules():  # type: ignore[attr-defined]
        weight = getattr(sub, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
            continue
        if not weight.is_floating_point() or isinstance(sub, torch.nn.Embedding):
            continue
        name = f"{path}.weight" if path else "weight"
        found[path] = Linear(path, name, transposed=type(sub).__name__ != "Conv1D")
    return found


def convs(module: object) -> dict[str, Linear]:
    """Every Conv module (weight rank 3-5), by path, as B = W.reshape(O, -1).T."""
    import torch

    found: dict[str, Linear] = {}
    for path, sub in module.named_modules():  # type: ignore[attr-defined]
        if isinstance(sub, torch.nn.modules.conv._ConvNd) and not sub.transposed:
            found[path] = Linear(path, f"{path}.weight" if path else "weight", transposed=True)
    return found


def embeddings(module: object) -> dict[str, Linear]:
    """Every nn.Embedding, by path: its [V, D] table is the quantized Gather's."""
    import torch

    found: dict[str, Linear] = {}
    for path, sub in module.named_modules():  # type: ignore[attr-defined]
        if isinstance(sub, torch.nn.Embedding):
            found[path] = Linear(path, f"{path}.weight" if path else "weight", transposed=False)
    return found


def fold_factor(module: object, path: str) -> np.ndarray:
    """gamma / sqrt(running_var + eps) of the BatchNorm at `path`: what the export
    multiplied the conv before it by, per output channel."""
    import torch

    bn = dict(module.named_modules())[path]  # type: ignore[attr-defined]
    with torch.no_grad():
        var = bn.running_var.detach().double().cpu().numpy()
        weight = bn.weight
        gamma = weight.detach().double().cpu().numpy() if weight is not None else np.ones_like(var)
    return (gamma / np.sqrt(var + bn.eps)).astype(np.float32)


def _following_norm(module: object, conv: str, channels: int) -> str:
    """The BatchNorm registered right after the conv at `conv` with its channel count (the
    one a Conv -> BatchNorm model applies to its output), or ""."""
    import torch

    paths = list(module.named_modules())  # type: ignore[attr-defined]
    after = False
    for path, sub in paths:
        if path == conv:
            after = True
            continue
        if after and isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
            ok = sub.num_features == channels and sub.track_running_stats
            return path if ok and sub.running_var is not None else ""
        if after and isinstance(sub, torch.nn.modules.conv._ConvNd | torch.nn.Linear):
            return ""
    return ""


def match_nodes(nodes: Sequence[QuantizedNode], module: object, prefix: str = "") -> list[Matched]:
    """Each node with the parameters it was made from (see module)."""
    import torch

    tables = {"": linears(module), "conv": convs(module), "gather": embeddings(module)}
    params = dict(module.named_parameters(remove_duplicate=False))  # type: ignore[attr-defined]

    def b_of(linear: Linear) -> np.ndarray:
        tensor = params[linear.parameter]
        with torch.no_grad():
            array = tensor.detach().float().cpu().numpy()
        b = linear.as_b(array)
        if linear.folded:
            b = b * fold_factor(module, linear.folded)[None, :]
        return b

    out = []
    for node in nodes:
        if node.op == "QEmbedLayerNormalization":  # tables and a norm, named after them
            chosen = _by_parameter(node, params, prefix)
            weight = b_of(chosen[0]) if chosen else None
            if weight is not None and weight.shape != node.weight.shape:
                chosen, weight = (), None
            out.append(Matched(node, chosen, weight))
            continue
        kind = "conv" if node.kernel else "gather" if node.op == "Gather" else ""
        table = tables[kind]
        if kind == "conv":  # only the convs of its kernel's shape can be the one
            table = {
                path: conv
                for path, conv in table.items()
                if tuple(params[conv.parameter].shape) == node.kernel
            }
            table = _with_folds(node, table, module, b_of)
        chosen = _by_name(node, table, prefix, params)
        weight = None
        if chosen:
            parts = [b_of(lin) for lin in chosen]  # views of torch's own weights
            weight = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
            if weight.shape != node.weight.shape:
                chosen, weight = (), None
        if not chosen:
            chosen, weight = _by_value(node, table, b_of)
        out.append(Matched(node, tuple(chosen), weight))
    return out


def _with_folds(node: QuantizedNode, table: Mapping[str, Linear], module: object, b_of) -> dict:
    """Each conv as the weight the node stands for: unfolded, or folded with the BatchNorm
    after it, whichever the node's weight is the more nearly one multiple of, output channel
    by output channel (a fold scales each channel by its own factor; a wrong weight scale
    scales them all alike, so a bug in the scale does not change which fold it is)."""
    from dataclasses import replace

    out = {}
    for path, conv in table.items():
        plain_w = b_of(conv)
        norm = _following_norm(module, path, node.n)
        if norm and plain_w.shape == node.weight.shape:
            folded = replace(conv, folded=norm)
            if _ratio_spread(node.weight, b_of(folded)) < _ratio_spread(node.weight, plain_w):
                conv = folded
        out[path] = conv
    return out


def _ratio_spread(weight: np.ndarray, model: np.ndarray) -> float:
    """How far the per-column ratios file / model (least squares) are from one value: the
    spread of their logarithms."""
    w = model.astype(np.float64)
    f = weight.astype(np.float64)
    power = np.sum(w * w, axis=0)
    keep = power > 0
    ratios = np.sum(w * f, axis=0)[keep] / power[keep]
    ratios = np.abs(ratios[ratios != 0])
    return float(np.std(np.log(ratios))) if ratios.size > 1 else 0.0


def _names(node: QuantizedNode, prefix: str) -> list[str]:
    """Module paths the node's scope and weight name may mean, most likely first."""
    raw = [s for s in (node.scope, _from_weight(node.source)) if s]
    out: list[str] = []
    for path in raw:
        for old, new in ALIASES:
            for candidate in (path, path.replace(old, new) if old else new + path):
                for p in (candidate, candidate.removeprefix(prefix)):
                    if p not in out:
                        out.append(p)
    return out


def _from_weight(name: str) -> str:
    for suffix in (".MatMul.weight", ".weight", ".MatMul"):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return ""


def _by_parameter(node: QuantizedNode, params: Mapping[str, object], prefix: str) -> tuple:
    """The parameter the node's initializer is named after (`embeddings.LayerNorm.bias`)."""
    for name in (node.source, node.source.removeprefix(prefix), f"{prefix}{node.source}"):
        if name in params:
            path, _, leaf = name.rpartition(".")
            return (Linear(path, name, transposed=False, leaf=leaf),)
    return ()


def _by_name(
    node: QuantizedNode, table: Mapping[str, Linear], prefix: str, params: Mapping[str, Any]
) -> tuple[Linear, ...]:
    for path in _names(node, prefix):
        if node.op == "QAttention":
            for names in ATTENTION_PARTS:
                parts = tuple(f"{path}.{p}" if path else p for p in names)
                if all(p in table for p in parts):
                    return tuple(table[p] for p in parts)
            continue
        if path in table:
            return (table[path],)
        parent, _, leaf = path.rpartition(".")
        if leaf in PACKED:
            parts = tuple(f"{parent}.{p}" if parent else p for p in PACKED[leaf])
            if all(p in table for p in parts):
                return tuple(table[p] for p in parts)
        split = split_of(path)  # a part of a packed torch weight (equal chunks along N)
        if split is not None and split[0] in table:
            whole = table[split[0]]
            shape = params[whole.parameter].shape
            n = int(shape[0] if whole.transposed else shape[1])
            step = n // split[2]
            return (replace(whole, rows=(split[1] * step, (split[1] + 1) * step)),)
    return ()


def _by_value(node, table, b_of) -> tuple[tuple[Linear, ...], np.ndarray | None]:
    """The same-shape weight closest to the node's in steps (its median block's error)."""
    best: tuple[float, Linear | None, np.ndarray | None] = (np.inf, None, None)
    for linear in table.values():
        weight = b_of(linear)
        if weight.shape != node.weight.shape:
            continue
        score = float(np.median(block_steps(node, weight)))
        if score < best[0]:
            best = (score, linear, weight)
    if best[1] is None or best[0] > 2.0:  # nothing this close: not the weight it came from
        return (), None
    return (best[1],), best[2]


def block_steps(node: QuantizedNode, model_weight: np.ndarray) -> np.ndarray:
    """[N, blocks]: the largest |model - file| of each block, in that block's step (worked
    out over CHUNK_COLUMNS columns at a time: an lm_head's difference is never whole)."""
    k, n = node.weight.shape
    blocks = node.steps.shape[1]
    size = node.block_size if blocks > 1 else k
    worst = np.empty((n, blocks), dtype=np.float32)
    for start in range(0, n, CHUNK_COLUMNS):
        end = min(start + CHUNK_COLUMNS, n)
        diff = np.subtract(model_weight[:, start:end], node.weight[:, start:end], dtype=np.float32)
        np.abs(diff, out=diff)
        rows = diff.T  # [columns, K]
        pad = blocks * size - k
        if pad > 0:
            rows = np.pad(rows, ((0, 0), (0, pad)))
        worst[start:end] = rows.reshape(end - start, blocks, size).max(axis=2)
    steps = node.steps.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(
            steps > 0, worst / np.where(steps > 0, steps, 1), np.where(worst > 0, np.inf, 0)
        )
    return ratio


def check(matched: Matched) -> QuantizedWeight:
    """The node's weight judged against the model's (see module)."""
    node = matched.node
    base = QuantizedWeight(
        node=node.node,
        op=node.op,
        bits=node.bits,
        block_size=node.block_size,
        shape=(node.k, node.n),
        parameter=matched.names or None,
        n_blocks=int(node.steps.size),
    )
    if matched.model_weight is None:
        return base
    steps = block_steps(node, matched.model_weight)
    bad = steps > SLACK
    worst = float(steps.max()) if steps.size else 0.0
    from dataclasses import replace

    defect = _defect(node, matched.model_weight, bad) if bad.any() else ""
    return replace(base, max_steps=worst, bad_blocks=int(bad.sum()), defect=defect)


def _defect(node: QuantizedNode, model: np.ndarray, bad: np.ndarray) -> str:
    """What is wrong in the bad blocks, when one cause explains them."""
    k, n = node.weight.shape
    if k == n and float(np.median(_steps_against(node, model.T))) <= SLACK:
        return "the weight is transposed"
    blocks = node.steps.shape[1]
    size = node.block_size if blocks > 1 else k
    ratios, offsets, shifted = [], [], 0
    for col, b in list(zip(*np.nonzero(bad), strict=True))[:DIAGNOSED_BLOCKS]:
        rows = slice(b * size, min((b + 1) * size, k))
        w, f = model[rows, col].astype(np.float64), node.weight[rows, col].astype(np.float64)
        step = float(node.steps[col, b]) or 1.0
        denom = float(w @ w)
        if denom > 0:
            ratios.append(float(w @ f) / denom)
        offsets.append(float(np.mean(f - w)) / step)
        for other in (b - 1, b + 1):
            if 0 <= other < blocks:
                near = model[other * size : min((other + 1) * size, k), col]
                if near.shape == f.shape and np.max(np.abs(near - f)) <= SLACK * step:
                    shifted += 1
                    break
    count = len(offsets)
    if shifted == count:
        return "its blocks hold a neighbouring block's weights (shifted)"
    if ratios and len(ratios) == count:
        r = float(np.median(ratios))
        if abs(r - 1) > 0.05 and all(abs(x - r) <= 0.05 * abs(r) for x in ratios):
            return f"the scale is {r:.2g}\u00d7 what the weights need"
    m = float(np.median(offsets))
    if abs(m) >= 0.75 and all(abs(x - m) <= 0.5 for x in offsets):
        return f"the zero point is off by {m:+.0f} step(s)"
    return "the values are not a rounding of the model's"


def _steps_against(node: QuantizedNode, model: np.ndarray) -> np.ndarray:
    return block_steps(node, model)


def match_initializers(nodes: Sequence[QuantizedNode], reference: object) -> list[Matched]:
    """Each node with the float weight of a reference ONNX file (the export it was
    quantized from): the initializer its quantizer named it after (`X_Q4` -> `X`), else the
    MatMul the node was made from (`/fc1/MatMul_Q4` -> `/fc1/MatMul`), by shape."""
    from onnx import numpy_helper

    graph = reference.graph  # type: ignore[attr-defined]
    inits = {t.name: t for t in graph.initializer}
    by_node = {n.name: n for n in graph.node if n.op_type in ("MatMul", "Gemm")}
    out = []
    for node in nodes:
        names = [node.source]
        for suffix in ("_Q4", "_Q8", "_quant", "_Q2", "_Q3"):
            if node.node.endswith(suffix) and node.node.removesuffix(suffix) in by_node:
                names.append(by_node[node.node.removesuffix(suffix)].input[1])
        found: Matched | None = None
        for name in names:
            if name in inits:
                weight = numpy_helper.to_array(inits[name]).astype(np.float32)
                if weight.shape == node.weight.shape:
                    found = Matched(node, (), weight, initializer=name)
                    break
        out.append(found or Matched(node, (), None))
    return out
