"""The demos' torch models and their export (torch imported here, never in parity.load.demos).

Split from ``parity.load.demos`` so that listing the demos (the dashboard's first screen, a saved
run reopened without torch) costs no torch import.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import onnx
import torch
import torch.nn.functional as F
from torch import nn

from parity.errors import ExportError
from parity.load.export_lock import export_lock

# --- cnn -----------------------------------------------------------------------------------


class DemoConvNet(nn.Module):
    """conv/bn/relu/pool stem and a linear head: ``image`` -> ``logits``, ``features``."""

    def __init__(self, *, n_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
        )
        self.head = nn.Linear(16, n_classes)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.stem(image)
        logits = self.head(features.mean(dim=(2, 3)))
        return {"logits": logits, "features": features}


def _randomize_batchnorm(model: nn.Module) -> None:
    """Non-trivial running statistics, so batch norm really does something in eval mode."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.8, 1.2)
                module.bias.uniform_(-0.1, 0.1)


def _build_cnn() -> nn.Module:
    torch.manual_seed(0)
    model = DemoConvNet()
    _randomize_batchnorm(model)
    return model.eval()


def _cnn_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(2, 3, 32, 32, generator=generator),)


# --- transformer / fp16 --------------------------------------------------------------------


class _EncoderLayer(nn.Module):
    """Post-norm encoder layer written out by hand, so every op is visible in the export."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        head_dim = d_model // self.n_heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.n_heads, head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) * head_dim**-0.5 + additive_mask
        attended = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, seq, d_model)
        x = self.norm1(x + self.out(attended))
        return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))


class DemoEncoder(nn.Module):
    """A 2-layer encoder: ``input_ids``, ``attention_mask`` -> ``last_hidden_state``, ``pooled``."""

    def __init__(
        self,
        *,
        vocab_size: int = 128,
        max_positions: int = 256,
        d_model: int = 32,
        n_heads: int = 4,
        d_ff: int = 64,
        n_layers: int = 2,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(max_positions, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.layers = nn.ModuleList(_EncoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.pool = nn.Linear(d_model, d_model)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        dtype = self.tokens.weight.dtype
        seq = input_ids.shape[1]
        positions = torch.arange(seq, device=input_ids.device)
        x = self.norm(self.tokens(input_ids) + self.positions(positions))
        mask = attention_mask.to(dtype)
        # -1e4 rather than finfo.min: it survives the float16 variant without overflowing.
        additive = ((1.0 - mask) * -1e4)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, additive)
        weights = mask[:, :, None]
        mean = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return {"last_hidden_state": x, "pooled": torch.tanh(self.pool(mean))}


class Float16Compute(nn.Module):
    """Runs a copy of ``model`` in float16 while keeping float32 outputs (inputs are ints)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.inner = copy.deepcopy(model).half()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        outputs = self.inner(input_ids, attention_mask)
        return {name: value.float() for name, value in outputs.items()}


def _build_encoder() -> nn.Module:
    torch.manual_seed(0)
    return DemoEncoder().eval()


def _encoder_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 128, (2, 16), generator=generator)
    attention_mask = torch.ones(2, 16, dtype=torch.int64)
    attention_mask[1, 12:] = 0  # the second sequence is padded
    return input_ids, attention_mask


# --- broken --------------------------------------------------------------------------------


class DemoSegmenter(nn.Module):
    """A shared stem with two heads: ``mask`` (reflect-padded conv) and ``embedding``."""

    def __init__(self, *, embed_dim: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.mask_head = nn.Conv2d(8, 1, 3)  # padded by hand, with reflect padding
        self.embed_head = nn.Linear(8, embed_dim)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.stem(image)
        mask = self.mask_head(F.pad(features, (1, 1, 1, 1), mode="reflect"))
        embedding = self.embed_head(features.mean(dim=(2, 3)))
        return {"mask": mask, "embedding": embedding}


def _build_segmenter() -> nn.Module:
    torch.manual_seed(0)
    return DemoSegmenter().eval()


def _break_reflect_pad(model: onnx.ModelProto) -> onnx.ModelProto:
    """The demo's bug: the one reflect ``Pad`` becomes ``edge`` (a real exporter-bug class)."""
    pads = [
        node
        for graph in _all_graphs(model)
        for node in graph.node
        if node.op_type == "Pad" and _attribute(node, "mode") == b"reflect"
    ]
    if len(pads) != 1:
        raise ExportError(f"demo:broken: expected one reflect Pad in the export, found {len(pads)}")
    for attribute in pads[0].attribute:
        if attribute.name == "mode":
            attribute.s = b"edge"
    return model


def _all_graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    """The main graph plus the bodies of local functions (the exporter may put ops there)."""
    graphs: list[onnx.GraphProto] = [model.graph]
    for function in model.functions:
        holder = onnx.GraphProto()
        holder.node.extend(function.node)
        graphs.append(holder)
    return graphs


def _attribute(node: onnx.NodeProto, name: str) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return None


@dataclass(frozen=True)
class _ExportSpec:
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    # Per input: {axis: (dim name, min, max)}; fed to torch.export.Dim.
    dynamic: Mapping[str, Mapping[int, tuple[str, int, int]]]
    wrap: Callable[[nn.Module], nn.Module] | None = None
    edit: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None


_IMAGE_DIMS = {0: ("batch", 1, 1024), 2: ("height", 8, 1024), 3: ("width", 8, 1024)}
_TEXT_DIMS = {0: ("batch", 1, 1024), 1: ("seq", 2, 256)}

_EXPORTS: dict[str, _ExportSpec] = {
    "cnn": _ExportSpec(("image",), ("logits", "features"), {"image": _IMAGE_DIMS}),
    "transformer": _ExportSpec(
        ("input_ids", "attention_mask"),
        ("last_hidden_state", "pooled"),
        {"input_ids": _TEXT_DIMS, "attention_mask": _TEXT_DIMS},
    ),
    "fp16": _ExportSpec(
        ("input_ids", "attention_mask"),
        ("last_hidden_state", "pooled"),
        {"input_ids": _TEXT_DIMS, "attention_mask": _TEXT_DIMS},
        wrap=Float16Compute,
    ),
    "broken": _ExportSpec(
        ("image",), ("mask", "embedding"), {"image": _IMAGE_DIMS}, edit=_break_reflect_pad
    ),
}


def build(name: str) -> nn.Module:
    """A fresh demo model. Builders seed torch's global RNG, so concurrent builds in threads
    would interleave draws and give different weights: they run under the export lock."""
    with export_lock():
        return _BUILDERS[name]()


def example_inputs(name: str) -> tuple[torch.Tensor, ...]:
    return _INPUTS[name]()


_BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "cnn": _build_cnn,
    "transformer": _build_encoder,
    "fp16": _build_encoder,
    "broken": _build_segmenter,
}
_INPUTS: dict[str, Callable[[], tuple[torch.Tensor, ...]]] = {
    "cnn": _cnn_inputs,
    "transformer": _encoder_inputs,
    "fp16": _encoder_inputs,
    "broken": _cnn_inputs,
}


def export_demo(name: str) -> onnx.ModelProto:
    """Export ``demo`` with the dynamo exporter, apply its edit, and check the result."""
    spec = _EXPORTS[name]
    module = build(name)
    if spec.wrap is not None:
        module = spec.wrap(module).eval()
    dims: dict[str, torch.export.Dim] = {}
    dynamic_shapes: dict[str, dict[int, torch.export.Dim]] = {}
    for input_name, axes in spec.dynamic.items():
        dynamic_shapes[input_name] = {}
        for axis, (dim_name, low, high) in axes.items():
            dim = dims.setdefault(dim_name, torch.export.Dim(dim_name, min=low, max=high))
            dynamic_shapes[input_name][axis] = dim
    try:
        with export_lock(), warnings.catch_warnings(), _quiet_exporter_logs():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module,
                example_inputs(name),
                dynamo=True,
                input_names=list(spec.input_names),
                output_names=list(spec.output_names),
                dynamic_shapes=dynamic_shapes,
                verbose=False,
            )
    except Exception as exc:
        raise ExportError(f"demo:{name}: export failed: {exc}") from exc
    if program is None:
        raise ExportError(f"demo:{name}: the exporter returned no program")
    model = program.model_proto
    if spec.edit is not None:
        model = spec.edit(model)
    onnx.checker.check_model(model, full_check=True)
    return model


@contextlib.contextmanager
def _quiet_exporter_logs() -> Iterator[None]:
    """The exporter logs warnings (e.g. "torchvision is not installed") a user can't act on."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
