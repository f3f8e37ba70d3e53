"""A real model pair whose ONNX output names are markup payloads ("names are text" tests).

The ONNX file is a real legacy torch.onnx.export with those `output_names`; the torch side
is a torch.export .pt2 that differs on two outputs, so those fail and their names are shown
as failing outputs everywhere (Run line, overview, inspect, tolerances, sidebar).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

# Port 9 (discard) on localhost: a browser that fetched these would show in the request log.
# Backticks close the code span a page might wrap a name in.
IMAGE = "x` ![b](http://127.0.0.1:9/x.png) `y"
JS_LINK = "` [x](javascript:alert(1))"
HTML_LINK = '<a href="http://127.0.0.1:9/h">h</a><img src=http://127.0.0.1:9/i.png>'
BARE_URL = "http://127.0.0.1:9/u :red[r] $x$ **b** :material/home: `tick"
NAMES = (IMAGE, JS_LINK, HTML_LINK, BARE_URL)
FAILING = (IMAGE, HTML_LINK)


class _Onnx(nn.Module):
    def forward(self, x):
        return x * 2.0, x + 1.0, x - 1.0, x * 0.5


class _Torch(nn.Module):
    """Differs from _Onnx on outputs 0 and 2."""

    def forward(self, x):
        return x * 3.0, x + 1.0, x - 2.0, x * 0.5


def write_payload_models(folder: Path) -> tuple[Path, Path]:
    """(model.pt2, model.onnx) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    x = torch.randn(2, 3)
    onnx_path = folder / "payload.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Onnx(), (x,), str(onnx_path), dynamo=False, input_names=["x"],
            output_names=list(NAMES),
        )  # fmt: skip
    pt2 = folder / "payload.pt2"
    torch.export.save(torch.export.export(_Torch(), (x,)), str(pt2))
    return pt2, onnx_path
