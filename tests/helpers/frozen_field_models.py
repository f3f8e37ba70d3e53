"""Models frozen at export the way shipped code freezes them (issue 53), and their exports.

- ``rounded``: ``y.reshape(int(b), int(n))`` exported at 1 x 116, on outputs of about 200
  whose float32 rounding at that size (~4e-5) exceeds the default atol 1e-5;
- ``upsample``: ``F.interpolate(y, size=(int(H), int(W)))`` exported at 96 x 64: the legacy
  exporter writes ``Concat(Shape(y)[:2], [96, 64])`` into the Resize's sizes;
- ``square``: the same, a 1 x 1 conv after it, exported at 32 x 32, the default size:
  ``[32, 32]`` reads as well as height x width = 8 x 4 as height, width = 32, 32;
- ``flat``: ``y.reshape(y.shape[0], int(h * w))``: the constant reaches the Reshape through
  Gather / Unsqueeze / Concat with the runtime batch;
- ``baked``: ``torch.cat([p, torch.zeros(int(b), 4)], 1)``: a batch-sized tensor baked by
  tracing (a [1, 4] constant the Concat reads);
- ``fused``: two Reshapes in a row, the second to ``int(b), int(n)``: ONNX Runtime fuses them
  into ``/Reshape_new_reshape``, a node the file does not have;
- ``token``: a class token ``expand(int(b), 1, 8)``: the legacy exporter's Expand shape comes
  through ``Where(Equal(...), ..., [1, 1, 8])``;
- ``positions``: ``torch.arange(int(n))`` baked as the constant 0..23 the Add reads.

The source is written to ``DIR/models.py`` so that ``models.py:rounded`` is a model spec.
"""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

SOURCE = textwrap.dedent(
    '''
    """Models frozen at export the way shipped code freezes them."""
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Rounded(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 64)
            self.out = nn.Linear(64, 1)
            with torch.no_grad():
                self.out.weight.mul_(400)  # outputs near 200: rounding near 4e-5

        def forward(self, x):
            b, n = x.shape[0], x.shape[1]
            y = self.out(torch.tanh(self.fc(x)))
            return y.reshape(int(b), int(n))


    class Upsample(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)

        def forward(self, x):
            H, W = x.shape[2], x.shape[3]
            y = self.conv(x)
            return F.interpolate(y, size=(int(H), int(W)), mode="bilinear", align_corners=False)


    class UpConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.Conv2d(3, 4, 3, stride=2, padding=1)
            self.head = nn.Conv2d(4, 2, 1)

        def forward(self, x):
            h, w = int(x.shape[2]), int(x.shape[3])
            y = F.interpolate(self.down(x), size=(h, w), mode="bilinear", align_corners=False)
            return self.head(y)


    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            y = self.conv(x).mean(1)
            h, w = y.shape[1], y.shape[2]
            return y.reshape(y.shape[0], int(h * w)).amax(-1)


    class Baked(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            p = self.conv(x).mean((2, 3))
            return torch.cat([p, torch.zeros(int(x.shape[0]), 4)], 1)


    class Fused(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 1)

        def forward(self, x):
            b, n = x.shape[0], x.shape[1]
            y = self.fc(x)
            return y.reshape(y.shape[0], -1).reshape(int(b), int(n))


    class Token(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Parameter(torch.randn(1, 1, 8))

        def forward(self, x):
            b = x.shape[0]
            return torch.cat([self.tok.expand(int(b), 1, 8), x], 1)


    class Positions(nn.Module):
        def forward(self, x):
            n = x.shape[1]
            return x * 2 + torch.arange(int(n), dtype=torch.float32)


    def _seeded(cls):
        torch.manual_seed(0)
        return cls().eval()


    def rounded():
        return _seeded(Rounded)


    def upsample():
        return _seeded(Upsample)


    def square():
        return _seeded(UpConv)


    def flat():
        return _seeded(Flat)


    def baked():
        return _seeded(Baked)


    def fused():
        return _seeded(Fused)


    def token():
        return _seeded(Token)


    def positions():
        return _seeded(Positions)
    '''
).lstrip()

SHAPES = {
    "rounded": (1, 116, 64),
    "upsample": (1, 3, 96, 64),
    "square": (1, 3, 32, 32),
    "flat": (1, 3, 64, 48),
    "baked": (1, 3, 16, 16),
    "fused": (1, 116, 8),
    "token": (1, 5, 8),
    "positions": (2, 24),
}
AXES = {
    "rounded": {0: "batch", 1: "seq"},
    "upsample": {0: "batch", 2: "height", 3: "width"},
    "square": {0: "batch", 2: "height", 3: "width"},
    "flat": {0: "batch", 2: "height", 3: "width"},
    "baked": {0: "batch", 2: "height", 3: "width"},
    "fused": {0: "batch", 1: "seq"},
    "token": {0: "batch", 1: "seq"},
    "positions": {0: "batch", 1: "seq"},
}


def line_of(text: str) -> int:
    """The 1-based line of models.py holding `text`."""
    for number, line in enumerate(SOURCE.splitlines(), start=1):
        if text in line:
            return number
    raise ValueError(text)


def write_models(root: Path) -> Path:
    path = root / "models.py"
    path.write_text(SOURCE)
    return path


def load(root: Path, name: str):
    import importlib.util

    unique = f"frozen_field_models_{abs(hash(str(root)))}"
    spec = importlib.util.spec_from_file_location(unique, root / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)()


def export(root: Path, name: str, *, dynamo: bool) -> Path | None:
    """Export `name` at its SHAPES size with its AXES dynamic; None where the dynamo exporter
    refuses (it specialises an int() of a dynamic dim)."""
    import torch

    model = load(root, name)
    x = torch.randn(*SHAPES[name])
    path = root / f"{name}_{'dynamo' if dynamo else 'legacy'}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            dim = torch.export.Dim
            shapes = {"x": {axis: dim(d) for axis, d in AXES[name].items()}}
            try:
                program = torch.onnx.export(
                    model, (x,), input_names=["x"], output_names=["y"], dynamo=True,
                    dynamic_shapes=shapes, verbose=False,
                )  # fmt: skip
            except Exception:
                return None
            program.save(str(path))
        else:
            torch.onnx.export(
                model, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"],
                dynamic_axes={"x": AXES[name]},
            )  # fmt: skip
    return path
