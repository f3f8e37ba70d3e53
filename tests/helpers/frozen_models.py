"""Small models frozen at their export's size, written the way the field writes them, and
their real exports (legacy exporter with ``dynamic_axes``, dynamo with ``dynamic_shapes``) at
batch 1, 64 x 48: an export size none of Parity's default sizes equals.

- ``pool``: global average pooling written ``y.sum((2, 3)) / float(h * w)`` (a Div by 3072);
- ``flatten``: ints read from ``y.shape`` (a Reshape to {1, 8, 3072}: ORT raises elsewhere);
- ``pos_embed``: position embeddings interpolated to ``int(x.shape[-1] // 8)`` (a Resize to
  8 x 6; the Add after it raises elsewhere);
- ``pad32``: the width padded to a multiple of 32 only ``if w % 32`` (a branch tracing kept);
- ``clean``: the control, global average pooling written ``mean((2, 3))``;
- ``scaled``: a Mul by 32.0 that is the model's own number, not a size (with a nudged bias in
  the file it fails at every size, and nothing may be named frozen).

The source is written to ``DIR/models.py`` so that ``models.py:pool`` is a model spec, and the
exporters record lines of that file (LINES below says which line holds what).
"""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

SOURCE = textwrap.dedent(
    '''
    """Models frozen at export, written the way the field writes them."""
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            y = self.conv(x)
            h, w = y.shape[2], y.shape[3]
            pooled = y.sum((2, 3)) / float(h * w)
            return self.fc(pooled)


    class Flatten(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            b, c, h, w = (int(s) for s in y.shape)
            flat = y.reshape(b, c, h * w)
            return flat.amax(-1)


    class PosEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, 8, 8, stride=8)
            self.pos = nn.Parameter(torch.randn(1, 8, 4, 4))

        def forward(self, x):
            grid = (int(x.shape[-2] // 8), int(x.shape[-1] // 8))
            pos = F.interpolate(self.pos, size=grid, mode="bilinear", align_corners=False)
            return self.patch(x) + pos


    class Pad32(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            w = x.shape[-1]
            if w % 32:
                x = F.pad(x, (0, 32 - w % 32))
            return self.conv(x).mean((2, 3))


    class Clean(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(self.conv(x).mean((2, 3)))


    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            return self.conv(x).mean((2, 3)) * 32.0


    def _seeded(cls):
        torch.manual_seed(0)
        return cls().eval()


    def pool():
        return _seeded(Pool)


    def flatten():
        return _seeded(Flatten)


    def pos_embed():
        return _seeded(PosEmbed)


    def pad32():
        return _seeded(Pad32)


    def clean():
        return _seeded(Clean)


    def scaled():
        return _seeded(Scaled)
    '''
).lstrip()

EXPORT_SHAPE = (1, 3, 64, 48)  # batch 1, height 64, width 48
DYNAMIC_AXES = {"x": {0: "batch", 2: "height", 3: "width"}}
NAMES = ("pool", "flatten", "pos_embed", "pad32", "clean", "scaled")


def line_of(text: str) -> int:
    """The 1-based line of models.py holding `text` (where an exporter's trace points)."""
    for number, line in enumerate(SOURCE.splitlines(), start=1):
        if text in line:
            return number
    raise ValueError(text)


def write_models(root: Path) -> Path:
    path = root / "models.py"
    path.write_text(SOURCE)
    return path


def load(root: Path, name: str):
    """The factory `name` of models.py in `root`, imported from that file."""
    import importlib.util

    unique = f"frozen_models_{abs(hash(str(root)))}"
    spec = importlib.util.spec_from_file_location(unique, root / "models.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return getattr(module, name)()


def export(root: Path, name: str, *, dynamo: bool) -> Path:
    """Export model `name` at batch 1, 64 x 48 with dynamic batch, height and width."""
    import torch

    model = load(root, name)
    x = torch.randn(*EXPORT_SHAPE)
    path = root / f"{name}_{'dynamo' if dynamo else 'legacy'}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            dim = torch.export.Dim
            shapes = {"x": {0: dim("batch"), 2: dim("height"), 3: dim("width")}}
            program = torch.onnx.export(
                model, (x,), input_names=["x"], output_names=["y"], dynamo=True,
                dynamic_shapes=shapes, verbose=False,
            )  # fmt: skip
            program.save(str(path))
        else:
            torch.onnx.export(
                model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False,
                dynamic_axes=DYNAMIC_AXES,
            )  # fmt: skip
    return path


def nudged(path: Path, name: str, delta: float) -> Path:
    """A copy of the export with initializer `name` moved by `delta`: a real value bug."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    for init in model.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) + delta, name))
    out = path.with_name(path.stem + "_nudged.onnx")
    onnx.save(model, str(out))
    return out
