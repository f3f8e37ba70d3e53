"""A real small export with one bug planted in one known layer, for the layers views' tests.

`Blocks`: x [batch, 16] -> 4 residual blocks (fc1 -> GELU -> fc2, + x) -> head. Exported with
torch.onnx.export(dynamo=True) and saved as a .pt2 for the torch side; then the ONNX file's
`blocks.2.fc1.bias` initializer is nudged, so the error is born at block 2's fc1 and carried
by everything after it. Test modules build it once, in a folder of their own (tmp_path_factory).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

PLANTED_MODULE = "blocks.2.fc1"
NUDGE = 0.05


@dataclass(frozen=True)
class PlantedExport:
    pt2: Path
    onnx: Path  # with the bug
    clean_onnx: Path


def planted_export(out: Path) -> PlantedExport:
    import onnx
    import torch
    from onnx import numpy_helper
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(x)))

    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(4))
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    torch.manual_seed(0)
    model = Blocks().eval()
    x = torch.randn(2, 16)
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(out / "blocks.pt2"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_program = torch.onnx.export(
            model, (x,), dynamo=True, dynamic_shapes=({0: batch},), input_names=["x"],
            output_names=["y"], verbose=False,
        )  # fmt: skip
    clean = out / "blocks.onnx"
    onnx_program.save(str(clean))
    proto = onnx.load(str(clean))
    (bias,) = [i for i in proto.graph.initializer if i.name == f"{PLANTED_MODULE}.bias"]
    nudged = numpy_helper.to_array(bias).copy()
    nudged[3] += NUDGE
    bias.CopyFrom(numpy_helper.from_array(nudged, bias.name))
    buggy = out / "blocks-planted.onnx"
    onnx.save(proto, str(buggy))
    return PlantedExport(pt2=out / "blocks.pt2", onnx=buggy, clean_onnx=clean)


def planted_layers_run(files: PlantedExport, *, save_run: Path | None = None, clean=False):
    """The real validation with layers of the planted (or the clean) export, 2 input sets."""
    from parity.pipeline import RunConfig, run_validation

    run = run_validation(
        RunConfig(
            model=str(files.pt2),
            onnx=str(files.clean_onnx if clean else files.onnx),
            n_input_sets=2,
            layers=True,
        )  # fmt: skip
    )
    if save_run is not None:
        from parity.reports.saved_run import save_run as save

        save(run, save_run)
    return run
