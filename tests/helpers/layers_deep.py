"""The deep element-wise model of issue 20, made small: 16 blocks of scale/shift -> GELU ->
LayerNorm on [4, 32], a bug planted in block 11's shift (the ONNX file only).

Block 5 shifts its values by +300, so its LayerNorm subtracts a mean near 300 and float32
rounding (ORT's and torch's differ) leaves ~3e-5 of noise, under the criterion's threshold.
Block 6 shifts by -3.5, so its GELU maps most values near zero (scale ~4e-5): measured against
that size, the carried noise looks like a jump and the criterion flags block 6's Gelu, though
that Gelu alone on torch's inputs agrees. Only the confirmation tells the two apart. The jump
is the carried noise at a few elements, so it moves with the kernels' rounding: at -3 it was
55x on AVX-512 but 18x with AVX2 kernels (MIN_JUMP is 10); at -3.5 it is 120-200x on
AVX-512, AVX2 and SSE4.1 kernels alike, while block 5's LayerNorm stays at 0.45 of the
threshold on all three.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

PLANTED_BLOCK = 11
CARRIED_BLOCK = 6
NUDGE = 0.05


@dataclass(frozen=True)
class DeepExport:
    pt2: Path
    onnx: Path  # with the bug in block 11
    clean_onnx: Path
    planted_value: str  # the ONNX value the bug is born in (block 11's Add)


def deep_export(out: Path, *, n: int = 32, batch: int = 4) -> DeepExport:
    import onnx
    import torch
    from torch import nn

    from tests.helpers.plant_bug import plant

    class Block(nn.Module):
        def __init__(self, scale: float, shift: float) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.full((n,), scale))
            self.shift = nn.Parameter(torch.full((n,), shift))
            self.act = nn.GELU()
            self.norm = nn.LayerNorm(n)

        def forward(self, x):
            return self.norm(self.act(x * self.scale + self.shift))

    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            special = {5: (1.0, 300.0), CARRIED_BLOCK: (2.0, -3.5)}
            self.blocks = nn.ModuleList(Block(*special.get(i, (1.0, 0.0))) for i in range(16))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    torch.manual_seed(0)
    model = Deep().eval()
    x = torch.randn(batch, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(model, (x,))
        torch.export.save(program, str(out / "deep.pt2"))
        onnx_program = torch.onnx.export(
            model, (x,), dynamo=True, input_names=["x"], output_names=["y"], verbose=False
        )
    clean = out / "deep.onnx"
    onnx_program.save(str(clean))
    adds = [node for node in onnx.load(str(clean)).graph.node if node.op_type == "Add"]
    buggy = out / "deep-planted.onnx"
    value = plant(clean, buggy, adds[PLANTED_BLOCK].name, "bias", NUDGE)
    return DeepExport(out / "deep.pt2", buggy, clean, value)
