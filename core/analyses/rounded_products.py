"""Activation rounding where a dynamic int8 file does it, simulated in torch (the reference of
parity.analyses.quantization).

ONNX's DynamicQuantizeLinear rounds a whole tensor to uint8 over [min(x, 0), max(x, 0)]
(round half to even) before each MatMulInteger / ConvInteger; the caller multiplies the
integer product by the scales, so the file computes with the dequantized values. A weight's
op rounds the input of its module (a pre-hook, parity.analyses.quantization). Optimum's
`quantize --avx2/--avx512/--arm64` also rounds both sides of the attention's products of two
activations (q x k^T and p x v): those have no module, so inside each module whose scope
holds such a product (parity.load.quantized_weights.activation_products), a torch function
mode rounds both sides of each product of two activations, in order, where the file's is a
MatMulInteger. `scaled_dot_product_attention` is run as its two products (the mask added,
softmax in float) so each can be rounded; rounding commutes with the positive factor the
exporter splits between q and k (up to float32 rounding).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

_NUDGE: ContextVar[float] = ContextVar("parity_rounding_nudge", default=0.0)


def dynamic_round(x: Any) -> Any:
    """ONNX's DynamicQuantizeLinear, then back to float: uint8 per tensor, asymmetric
    (inside `nudged(d)`: each value moved by up to d steps first, see there)."""
    import torch

    low = torch.clamp(x.min(), max=0.0)
    high = torch.clamp(x.max(), min=0.0)
    scale = (high - low) / 255.0
    if float(scale) == 0.0:
        return x
    zero = torch.clamp(torch.round(-low / scale), 0, 255)
    steps = x / scale
    nudge = _NUDGE.get()
    if nudge:
        generator = torch.Generator(device="cpu").manual_seed(x.numel())
        jitter = torch.rand(x.shape, generator=generator, dtype=steps.dtype) * 2 - 1
        steps = steps + nudge * jitter.to(steps.device)
    q = torch.clamp(torch.round(steps) + zero, 0, 255)
    return ((q - zero) * scale).to(x.dtype)


@contextlib.contextmanager
def nudged(steps: float) -> Iterator[None]:
    """Every dynamic rounding inside moves each value by a fixed pseudo-random amount of at
    most `steps` steps before rounding: the values within that of a rounding boundary round
    the other way, as float noise in the file's kernels may make them (how much the reference
    moves then is how much such flips can move it)."""
    token = _NUDGE.set(steps)
    try:
        yield
    finally:
        _NUDGE.reset(token)


def module_paths(
    module: Any, scopes: Mapping[str, tuple[bool, ...]], prefix: str
) -> tuple[dict[str, tuple[bool, ...]], list[str]]:
    """(module path -> the scope's flags, the scopes no module of `module` has)."""
    modules = dict(module.named_modules())
    found: dict[str, tuple[bool, ...]] = {}
    missing: list[str] = []
    for scope, flags in scopes.items():
        for path in (scope, scope.removeprefix(prefix), scope.removeprefix(prefix + ".")):
            if path in modules and path:
                found[path] = flags
                break
        else:
            missing.append(scope)
    return found, missing


@contextlib.contextmanager
def rounded_products(module: Any, paths: Mapping[str, tuple[bool, ...]]) -> Iterator[None]:
    """Inside each module at `paths`, the k-th product of two activations rounds both sides
    as DynamicQuantizeLinear does where flags[k] is True. The modules' forwards are wrapped
    and put back on exit."""
    modules = dict(module.named_modules())
    wrapped: list[tuple[Any, Any]] = []
    try:
        for path, flags in paths.items():
            sub = modules[path]
            wrapped.append((sub, sub.__dict__.get("forward")))
            sub.forward = _within(sub.forward, flags)
        yield
    finally:
        for sub, own in reversed(wrapped):
            if own is None:
                del sub.forward  # the class's forward again
            else:
                sub.forward = own


def _within(forward: Any, flags: Sequence[bool]) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        with _Products(tuple(flags)):
            return forward(*args, **kwargs)

    return run


def _is_activation(value: Any) -> bool:
    import torch

    return (
        isinstance(value, torch.Tensor)
        and not isinstance(value, torch.nn.Parameter)
        and value.is_floating_point()
        and value.ndim >= 2
    )


def _mode_base() -> type:
    from torch.overrides import TorchFunctionMode

    return TorchFunctionMode


class _Products(_mode_base()):  # type: ignore[misc]
    """Counts the products of two activations in one forward; rounds the flagged ones."""

    def __init__(self, flags: tuple[bool, ...]) -> None:
        super().__init__()
        self.flags = flags
        self.seen = 0

    def _next(self) -> bool:
        k = self.seen
        self.seen += 1
        return k < len(self.flags) and self.flags[k]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        import torch

        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            return self._attention(*args, **kwargs)
        products = (torch.matmul, torch.bmm, torch.Tensor.matmul, torch.Tensor.__matmul__)
        pair = func in products and len(args) >= 2 and all(map(_is_activation, args[:2]))
        if pair and self._next():
            args = (dynamic_round(args[0]), dynamic_round(args[1]), *args[2:])
        return func(*args, **kwargs)

    def _attention(
        self,
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Any:
        import torch

        if enable_gqa and key.shape[-3] != query.shape[-3]:
            repeat = query.shape[-3] // key.shape[-3]
            key = key.repeat_interleave(repeat, dim=-3)
            value = value.repeat_interleave(repeat, dim=-3)
        factor = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        if self._next():
            query, key = dynamic_round(query), dynamic_round(key)
        scores = torch.matmul(query, key.transpose(-2, -1)) * factor
        if is_causal:
            length, source = scores.shape[-2], scores.shape[-1]
            keep = torch.ones(length, source, dtype=torch.bool, device=scores.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            else:
                scores = scores + attn_mask
        probs = torch.softmax(scores, dim=-1)
        if self._next():
            probs, value = dynamic_round(probs), dynamic_round(value)
        return torch.matmul(probs, value)
