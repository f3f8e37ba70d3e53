"""A learned tensor frozen at its export size: a ViT's position embedding of grid² + 1 tokens.

A model exported with `dynamic_img_size` interpolates its position embedding to the input's
patch grid only where the grid differs from the one it was trained at: traced at that size,
the branch is skipped, and the file adds the learned tensor as it is (1 × 197 × D for a
224 × 224 input in 16-pixel patches). At any other size ONNX Runtime raises at the Add ("17
by 65"). No constant holds the size, so the constant search (parity.judge.frozen) cannot
name it; the tensor's own shape does.

Named when an initializer read by an elementwise node has a token axis equal to the patch
grid (height / p × width / p, p a patch Conv's stride, plus 0 or 1 extra tokens) at every size
where the file works, and unequal at every size where ONNX Runtime raised.

Where ONNX Runtime raised at every size of the run, no size shows where the file works:
grid_sizes proposes the square sizes whose grid the tensor holds, the caller runs the file at
them, and the one where it works is the passing size.

Contract: learned_grids(model, signature, failing, passing, raised) -> tuple[FrozenNode, ...]
(`failing` / `passing`: each input set's dynamic dims; `raised`: whether each failing set
raised, in `failing`'s order); grid_sizes(model, signature) -> [{height: H, width: W}, ...].
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import onnx

from parity.judge.frozen_graph import patch_strides
from parity.results import FrozenNode
from parity.signature import OnnxSignature

_ELEMENTWISE = {"Add", "Sub", "Mul", "Concat"}
_PASS_THROUGH = {"Identity", "Cast"}


def learned_grids(
    model: onnx.ModelProto,
    signature: OnnxSignature,
    failing: Sequence[Mapping[str, int]],
    passing: Sequence[Mapping[str, int]],
    raised: Sequence[bool],
) -> tuple[FrozenNode, ...]:
    """The initializers frozen at the export's patch grid (module doc), one FrozenNode each."""
    image = _image_dims(signature)
    if image is None or not passing or not failing:
        return ()
    height, width = image
    patches = patch_strides(model)
    readers = _readers(model)
    found: list[FrozenNode] = []
    for tensor in model.graph.initializer:
        node = readers.get(tensor.name)
        if node is None or len(tensor.dims) < 2:
            continue
        for axis, size in enumerate(tensor.dims[:-1]):
            fit = _grid_fit(int(size), patches, height, width, passing, failing, raised)
            if fit is None:
                continue
            p, extra, at = fit
            found.append(
                FrozenNode(
                    node=node.name,
                    op=node.op_type,
                    kind="size",
                    constant=(float(size),),
                    dims=dict(at),
                    confirmed=True,
                    text=_text(tensor, axis, node, p, extra, at, failing[0], (height, width)),
                )
            )
            break
    return tuple(found)


MAX_GRID_SIZES = 2  # sizes a learned grid proposes where the file works at no set of the run


def grid_sizes(model: onnx.ModelProto, signature: OnnxSignature) -> list[dict[str, int]]:
    """Where no set of the run works: the square sizes at which a learned tensor read by an
    elementwise node would be a patch grid (its token axis g × g + 0 or 1, g × p pixels a
    side for a patch stride p), at most MAX_GRID_SIZES, largest grids first. The caller runs
    the file there; where it works, learned_grids names the tensor with that size."""
    image = _image_dims(signature)
    if image is None:
        return []
    patches = patch_strides(model)
    readers = _readers(model)
    found: list[dict[str, int]] = []
    for tensor in model.graph.initializer:
        if tensor.name not in readers or len(tensor.dims) < 2:
            continue
        for size, p, extra in itertools.product(tensor.dims[:-1], patches, (1, 0)):
            g = math.isqrt(max(int(size) - extra, 0))
            sizes = {image[0]: g * p, image[1]: g * p}
            if g >= 2 and g * g + extra == size and sizes not in found:
                found.append(sizes)
    found.sort(key=lambda d: -d[image[0]])
    return found[:MAX_GRID_SIZES]


def _image_dims(signature: OnnxSignature) -> tuple[str, str] | None:
    """The dynamic height and width dims of the first 4-D input (NCHW)."""
    for spec in signature.inputs:
        if len(spec.shape) == 4:
            h, w = spec.shape[2], spec.shape[3]
            names = [
                d if isinstance(d, str) else f"{spec.name}:{a}" if d is None else None
                for a, d in ((2, h), (3, w))
            ]
            if all(names):
                return names[0], names[1]  # type: ignore[return-value]
    return None


def _readers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    """Initializer -> the elementwise node that reads it (through Identity / Cast)."""
    through: dict[str, str] = {}
    for node in model.graph.node:
        if node.op_type in _PASS_THROUGH and node.input and node.output:
            through[node.output[0]] = node.input[0]
    out: dict[str, onnx.NodeProto] = {}
    for node in model.graph.node:
        if node.op_type not in _ELEMENTWISE:
            continue
        for name in node.input:
            while name in through:
                name = through[name]
            out.setdefault(name, node)
    return out


def _tokens(dims: Mapping[str, int], height: str, width: str, p: int) -> int | None:
    if height not in dims or width not in dims:
        return None
    return (dims[height] // p) * (dims[width] // p)


def _grid_fit(
    size: int,
    patches: tuple[int, ...],
    height: str,
    width: str,
    passing: Sequence[Mapping[str, int]],
    failing: Sequence[Mapping[str, int]],
    raised: Sequence[bool],
) -> tuple[int, int, Mapping[str, int]] | None:
    """(patch, extra tokens, the working size) where `size` is the grid at every passing
    size and not at any failing size that raised; None else."""
    for p in patches:
        for extra in (1, 0):
            works = [_tokens(d, height, width, p) for d in passing]
            if any(t is None or t + extra != size or t < 4 for t in works):
                continue
            broke = [
                _tokens(d, height, width, p) for d, r in zip(failing, raised, strict=True) if r
            ]
            if broke and all(t is not None and t + extra != size for t in broke):
                at = {height: passing[0][height], width: passing[0][width]}
                return p, extra, at
    return None


def _text(
    tensor: onnx.TensorProto,
    axis: int,
    node: onnx.NodeProto,
    p: int,
    extra: int,
    at: Mapping[str, int],
    failing: Mapping[str, int],
    image: tuple[str, str],
) -> str:
    height, width = image
    grid_h, grid_w = at[height] // p, at[width] // p
    plus = f" + {extra}" if extra else ""
    shape = " × ".join(str(d) for d in tensor.dims)
    other = (failing[height] // p) * (failing[width] // p) + extra
    return (
        f"This export only works at its own size: the learned tensor {tensor.name!r} ({shape}),"
        f" read by the {node.op_type} node {node.name!r}, holds {tensor.dims[axis]} = "
        f"{grid_h} × {grid_w}{plus} tokens on axis {axis}, a grid of {height}/{p} × "
        f"{width}/{p} at the export's {at[height]} × {at[width]}; the model makes it follow "
        f"the input ({other} tokens at {failing[height]} × {failing[width]}), the file froze "
        "it (export with the interpolation traced, or at every size it must take)."
    )
