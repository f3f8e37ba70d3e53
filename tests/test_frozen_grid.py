"""A ViT's position embedding frozen at export (issue 60): a timm-style ViT with
`dynamic_img_size` interpolates its learned grid² + 1 tokens only where the patch grid differs
from its own; the legacy exporter traced it at that size, so the file adds the 17-token tensor
as it is and ONNX Runtime raises at 64 x 64 ("17 by 65"). No constant holds the size: the
tensor's shape names it, with the size it was frozen at; --layers compares the set that runs
and says which it left out."""

from __future__ import annotations

import contextlib
import io
import json
import textwrap
import warnings
from pathlib import Path

import pytest

from parity.cli import main

MODELS = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch import nn


    class ViT(nn.Module):
        '''A timm-style ViT with dynamic_img_size: the position embedding (grid² + 1 tokens) is
        interpolated only where the grid differs from the one it was trained at.'''

        def __init__(self, dim=32, patch=8, grid=4):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, stride=patch)
            self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos_embed = nn.Parameter(torch.randn(1, grid * grid + 1, dim) * 0.02)
            self.grid = grid
            self.block = nn.TransformerEncoderLayer(dim, 4, 64, batch_first=True, dropout=0.0)
            self.head = nn.Linear(dim, 10)

        def forward(self, x):
            y = self.patch(x)
            b, d, gh, gw = y.shape
            tokens = y.flatten(2).transpose(1, 2)
            pos = self.pos_embed
            if (gh, gw) != (self.grid, self.grid):
                grid = pos[:, 1:].reshape(1, self.grid, self.grid, d).permute(0, 3, 1, 2)
                grid = F.interpolate(grid, size=(gh, gw), mode="bicubic", align_corners=False)
                pos = torch.cat([pos[:, :1], grid.permute(0, 2, 3, 1).reshape(1, gh * gw, d)], 1)
            tokens = torch.cat([self.cls.expand(b, -1, -1), tokens], 1) + pos
            return self.head(self.block(tokens)[:, 0])


    def vit():
        torch.manual_seed(0)
        return ViT().eval()
    """
)


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> Path:
    import importlib.util

    import torch

    root = tmp_path_factory.mktemp("vit_grid")
    (root / "models.py").write_text(MODELS)
    spec = importlib.util.spec_from_file_location("vit_models", root / "models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.vit(), (torch.randn(1, 3, 32, 32),), str(root / "vit.onnx"), dynamo=False,
            input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        )  # fmt: skip
    return root


def test_a_position_grid_frozen_at_export_is_named_with_its_size(vit: Path) -> None:
    report = vit / "report.json"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["validate", "--model", f"{vit / 'models.py'}:vit", "--onnx", str(vit / "vit.onnx")]
            + ["--layers", "--json", str(report)]
        )
    data = json.loads(report.read_text())
    assert code == 1
    statuses = [o["status"] for o in data["outputs"]]
    assert statuses == ["pass", "error"]  # the premise: 32 x 32 runs, 64 x 64 raises
    [frozen] = data["frozen"]
    assert (frozen["node"], frozen["op"], frozen["constant"]) == ("/Add", "Add", [17.0])
    assert frozen["dims"] == {"height": 32, "width": 32} and frozen["confirmed"]
    assert "'pos_embed'" in frozen["text"] and "17 = 4 × 4 + 1 tokens" in frozen["text"]
    assert "65 tokens at 64 × 64" in frozen["text"]
    assert any(f["kind"] == "frozen" for f in data["findings"])
    notes = data["layers"]["notes"]
    assert any("input set 1 left out: ONNX Runtime raised there" in n for n in notes), notes
    assert data["layers"]["matched"] > 0
