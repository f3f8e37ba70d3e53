"""A model and an ONNX file that do not belong together: a classifier head exported to ONNX
(logits [2, 3], probs [2, 3]) and another model's .pt2 (an embedding [2, 5] and a score
[2, 1]) that runs on the same input. Every pair differs in shape: a likely wrong pair."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn


class _Exported(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        logits = self.head(x)
        return logits, logits.softmax(-1)


class _Other(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 5)
        self.score = nn.Linear(4, 1)

    def forward(self, x):
        return self.embed(x), self.score(x)


def write_wrong_pair(folder: Path) -> tuple[Path, Path]:
    """(other.pt2, exported.onnx) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    onnx_path = folder / "exported.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Exported().eval(), (x,), str(onnx_path), dynamo=False, input_names=["x"],
            output_names=["logits", "probs"],
        )  # fmt: skip
    pt2 = folder / "other.pt2"
    torch.export.save(torch.export.export(_Other().eval(), (x,)), str(pt2))
    return pt2, onnx_path
