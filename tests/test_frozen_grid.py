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


def test_a_position_grid_is_named_where_onnx_runtime_raised_at_every_size(vit: Path) -> None:
    """Validated at 64 x 64 and 96 x 96 only (--dim): no set shows where the file works; the
    17-token tensor proposes 32 x 32 (a 4 x 4 grid of 8-pixel patches), the file is run there,
    and it works: the tensor is named with that size."""
    report = vit / "report_raised.json"
    sizes = ["--dim", "height=64", "--dim", "width=64"]
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["validate", "--model", f"{vit / 'models.py'}:vit", "--onnx", str(vit / "vit.onnx")]
            + [*sizes, "--layers", "--json", str(report)]
        )
    data = json.loads(report.read_text())
    assert code == 1 and [o["status"] for o in data["outputs"]] == ["error", "error"]
    said = " ".join(data["layers"]["notes"])
    assert "runs at height=32, width=32, the size it was frozen at" in said, said
    [frozen] = data["frozen"]
    assert (frozen["node"], frozen["constant"], frozen["dims"]) == (
        "/Add",
        [17.0],
        {"height": 32, "width": 32},
    )
    assert "'pos_embed'" in frozen["text"] and "65 tokens at 64 × 64" in frozen["text"]
    assert not any("No size frozen" in n["text"] for n in data.get("analyses", [])), data


def test_the_html_report_keeps_the_input_sets_table_under_its_own_heading(vit: Path) -> None:
    """The frozen list comes after the sets' table: under "Frozen at export" the table read
    as the frozen sizes."""
    import re

    html = vit / "report.html"
    with contextlib.redirect_stdout(io.StringIO()):
        main(
            ["validate", "--model", f"{vit / 'models.py'}:vit", "--onnx", str(vit / "vit.onnx")]
            + ["--html", str(html)]
        )
    text = html.read_text()
    headings = re.findall(r"<h2[^>]*>([^<]+)</h2>|<table><tr><th>set</th><th>label", text)
    order = [h or "sets table" for h in headings]
    sets = order.index("Input sets")
    assert order[sets : sets + 3] == ["Input sets", "sets table", "Frozen at export"], order


RESAMPLED = textwrap.dedent(
    """
    import math

    import torch
    import torch.nn.functional as F
    from torch import nn


    def resample_abs_pos_embed(posemb, new_size, num_prefix_tokens=1, scaled=False):
        '''timm's (layers/pos_embed.py, 0.9), antialias off: the legacy exporter has no
        antialiased bicubic.'''
        num_pos_tokens = posemb.shape[1]
        num_new_tokens = new_size[0] * new_size[1] + num_prefix_tokens
        if num_new_tokens == num_pos_tokens and new_size[0] == new_size[1]:
            return posemb
        hw = int(math.sqrt(num_pos_tokens - num_prefix_tokens))
        prefix, posemb = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
        embed_dim = posemb.shape[-1]
        posemb = posemb.reshape(1, hw, hw, -1).permute(0, 3, 1, 2)
        new_size = (int(new_size[0]), int(new_size[1]))
        if scaled:  # the same grid as a scale factor: the file holds Resize scales
            factor = (new_size[0] / hw, new_size[1] / hw)
            posemb = F.interpolate(posemb, scale_factor=factor, mode="bicubic")
        else:
            posemb = F.interpolate(posemb, size=new_size, mode="bicubic", antialias=False)
        posemb = posemb.permute(0, 2, 3, 1).reshape(1, -1, embed_dim)
        return torch.cat([prefix, posemb], dim=1)


    class ViT(nn.Module):
        '''Trained at 32 x 32 (a 4 x 4 grid of 8-pixel patches); its forward resamples the
        position embedding to the input's grid, read as Python ints from x.shape.'''

        def __init__(self, dim=32, patch=8, grid=4, scaled=False):
            super().__init__()
            self.patch_size = patch
            self.scaled = scaled
            self.patch = nn.Conv2d(3, dim, patch, stride=patch)
            self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos_embed = nn.Parameter(torch.randn(1, grid * grid + 1, dim) * 0.02)
            self.block = nn.TransformerEncoderLayer(dim, 4, 64, batch_first=True, dropout=0.0)
            self.head = nn.Linear(dim, 10)

        def forward(self, x):
            b, _, h, w = x.shape
            grid = (h // self.patch_size, w // self.patch_size)
            tokens = self.patch(x).flatten(2).transpose(1, 2)
            pos = resample_abs_pos_embed(self.pos_embed, grid, scaled=self.scaled)
            tokens = torch.cat([self.cls.expand(b, -1, -1), tokens], 1) + pos
            return self.head(self.block(tokens)[:, 0])


    def vit():
        torch.manual_seed(0)
        return ViT().eval()


    def vit_scaled():
        torch.manual_seed(0)
        return ViT(scaled=True).eval()
    """
)


@pytest.fixture(scope="module")
def resampled(tmp_path_factory) -> Path:
    """The timm-style ViT exported at 48 x 48 (a 6 x 6 grid) by both exporters."""
    import importlib.util

    import torch

    root = tmp_path_factory.mktemp("vit_resampled")
    (root / "models.py").write_text(RESAMPLED)
    spec = importlib.util.spec_from_file_location("vit_resampled", root / "models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(1, 3, 48, 48)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.vit(), (x,), str(root / "legacy.onnx"), dynamo=False, input_names=["x"],
            output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        )  # fmt: skip
        torch.onnx.export(  # the sizes stay Concat(Shape(grid)[:2], [6, 6]), pos_embed sliced
            module.vit(), (x,), str(root / "unfolded.onnx"), dynamo=False, input_names=["x"],
            output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
            do_constant_folding=False,
        )  # fmt: skip
        torch.onnx.export(
            module.vit_scaled(), (x,), str(root / "scaled.onnx"), dynamo=False,
            input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        )  # fmt: skip
        dim = torch.export.Dim
        program = torch.onnx.export(
            module.vit(), (x,), input_names=["x"], output_names=["y"], dynamo=True,
            dynamic_shapes={"x": {0: dim("batch"), 2: dim("height"), 3: dim("width")}},
            verbose=False,
        )  # fmt: skip
        program.save(str(root / "dynamo.onnx"))
    return root


def _validate(root: Path, onnx: str, spec: str = "vit") -> tuple[int, dict]:
    report = root / f"{onnx}.json"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["validate", "--model", f"{root / 'models.py'}:{spec}", "--onnx", str(root / onnx)]
            + ["--json", str(report)]
        )
    return code, json.loads(report.read_text())


@pytest.mark.parametrize(
    ("onnx", "constant", "tensor"),
    [
        ("legacy.onnx", [1.0, 32.0, 6.0, 6.0], "(1 × 32 × 4 × 4)"),  # folded: one initializer
        ("unfolded.onnx", [6.0, 6.0], "'pos_embed' (1 × 17 × 32)"),  # through the Concat
    ],
)
def test_a_position_grid_resized_with_python_ints_names_the_resize(
    resampled: Path, onnx: str, constant: list[float], tensor: str
) -> None:
    """Legacy export: h // 8 became the constant 6 in the Resize's sizes (folded, or the tail
    of Concat(Shape(grid)[:2], [6, 6]) without constant folding) and 37 = 6 × 6 + 1 tokens
    in the attention's reshapes; at 32 and 64 ONNX Runtime raises at the Add. The Resize is
    named, with the learned tensor, the grid it froze and the export's size, confirmed: the
    graph with 4 × 4 (and 17 tokens) agrees with torch at 32 × 32."""
    code, report = _validate(resampled, onnx)
    assert code == 1
    assert {o["status"] for o in report["outputs"]} == {"error"}  # the premise: both raise
    by_node = {f["node"]: f for f in report["frozen"]}
    resize = by_node["/Resize"]
    assert resize["constant"] == constant and resize["confirmed"]
    assert resize["dims"] == {"height": 48, "width": 48}
    assert "resizes the learned tensor '" in resize["text"]
    assert f"{tensor} to a position grid frozen at 6 × 6" in resize["text"]
    assert "6 = height // 8 and 6 = width // 8 at the export's 48 × 48" in resize["text"]
    line = next(n for n, x in enumerate(RESAMPLED.splitlines(), 1) if "size=new_size" in x)
    assert resize["source"] == f"models.py:{line}"  # a legacy file has none: a re-trace's
    tokens = [f for f in report["frozen"] if f["constant"] == [37.0]]
    assert tokens and all("height // 8 × width // 8 + 1" in f["text"] for f in tokens)
    assert any(f["kind"] == "frozen" and "/Resize" in f["text"] for f in report["findings"])


def test_the_dynamo_export_of_the_same_vit_fixes_the_size_and_says_so(resampled: Path) -> None:
    """torch.export specialises the dims the forward reads as ints: the file takes only
    1 x 3 x 48 x 48 although dynamic shapes were asked, runs there, and each fixed axis the
    torch model would vary is said; no frozen constant to name."""
    code, report = _validate(resampled, "dynamo.onnx")
    assert code == 0
    assert [s["inputs"]["x"]["shape"] for s in report["input_sets"]] == [[1, 3, 48, 48]]
    axes = {(a["input"], a["axis"], a["size"]) for a in report["static_axes"]}
    assert axes == {("x", 2, 48), ("x", 3, 48)}
    assert report["frozen"] == []


def test_a_position_grid_resized_by_scales_names_the_resize_with_its_sizes(resampled) -> None:
    """scale_factor=(6 / 4, 6 / 4): the legacy file holds Resize scales [1, 1, 1.5, 1.5], no
    sizes; read against the learned tensor's 4 × 4 they are the 6 × 6 grid, recomputed as
    scales (1.0 at 32 × 32) for the check that confirms it."""
    code, report = _validate(resampled, "scaled.onnx", "vit_scaled")
    assert code == 1
    resize = {f["node"]: f for f in report["frozen"]}["/Resize"]
    assert resize["constant"] == [1.0, 1.0, 1.5, 1.5] and resize["confirmed"]
    assert resize["dims"] == {"height": 48, "width": 48}
    said = "a position grid frozen at 6 × 6 (1 × 32 × 6 × 6, by the scales 1 × 1 × 1.5 × 1.5)"
    assert said in resize["text"]
