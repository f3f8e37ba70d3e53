"""The image size a torch model says it was made for, so that generated input sets start near
the export's size: a 224 × 224 ViT validated at 32 × 32 and 64 × 64 is checked where nobody
runs it (and a frozen 197-token position grid fails at every set, with no set where the file
works to tell why).

Read from the model, never guessed, in this order: a Hugging Face `config.image_size`, an
`img_size` / `image_size` attribute of the model or one of its modules (timm's PatchEmbed:
the size the model was built at), then timm's `pretrained_cfg` / `default_cfg` `input_size`
(C, H, W) (its checkpoint's: `create_model(..., img_size=32)` keeps 224 there). Only the
spatial dims the user did not size are set: symbolic dims named like height / width, and
the unnamed dynamic axes 2 and 3 of a 4-D input (NCHW).

Contract: image_size(model) -> (height, width) | None; with_image_size(signature, dims, size)
-> the dims to generate with (the user's win).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parity.signature import OnnxSignature

_ATTRIBUTES = ("img_size", "image_size")
MAX_MODULES = 2000  # modules looked through for an img_size attribute


def image_size(model: Any) -> tuple[int, int] | None:
    """(height, width) the model states (module doc), or None."""
    module = getattr(model, "module", model)
    config = getattr(module, "config", None)
    size = _pair(getattr(config, "image_size", None))
    if size is not None:
        return size
    modules = getattr(module, "modules", None)
    candidates = [module] if modules is None else list(_first(modules(), MAX_MODULES))
    for m in candidates:
        for name in _ATTRIBUTES:
            size = _pair(getattr(m, name, None))
            if size is not None:
                return size
    for cfg_name in ("pretrained_cfg", "default_cfg"):  # the checkpoint's, not the model built
        cfg = getattr(module, cfg_name, None)
        if isinstance(cfg, Mapping):
            size = _pair(cfg.get("input_size"), last_two=True)
            if size is not None:
                return size
    return None


def with_image_size(
    signature: OnnxSignature, dims: Mapping[str, int], size: tuple[int, int]
) -> dict[str, int]:
    """`dims` with the spatial dims nobody sized set to `size` (module doc)."""
    from parity.run.inputs import SPATIAL_SIZE, default_dim_size

    out = dict(dims)
    for spec in signature.inputs:
        for axis, d in enumerate(spec.shape):
            spatial = isinstance(d, str) and default_dim_size(d) == SPATIAL_SIZE  # by its name
            if isinstance(d, str) and d not in out and spatial:
                out[d] = size[0] if _is_height(d, axis, len(spec.shape)) else size[1]
            elif d is None and len(spec.shape) == 4 and axis in (2, 3):
                out.setdefault(f"{spec.name}:{axis}", size[axis - 2])
    return out


def _is_height(name: str, axis: int, rank: int) -> bool:
    low = name.lower()
    if "height" in low or low == "h":
        return True
    if "width" in low or low == "w":
        return False
    return axis == rank - 2  # "img", "image": the second-to-last axis is the height


def _pair(value: Any, *, last_two: bool = False) -> tuple[int, int] | None:
    """An int (square) or a sequence of ints as (height, width); 8 to 8192, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        value = (value, value)
    try:
        items = [int(v) for v in value]
    except (TypeError, ValueError):
        return None
    if last_two and len(items) >= 2:
        items = items[-2:]
    if len(items) != 2 or not all(8 <= v <= 8192 for v in items):
        return None
    return items[0], items[1]


def _first(iterable: Any, n: int) -> Any:
    for k, item in enumerate(iterable):
        if k >= n:
            return
        yield item
