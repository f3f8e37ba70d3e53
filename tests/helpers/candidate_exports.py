"""Real exports of one small model, to put side by side: the dynamo and the legacy exporter
(both right), a "buggy" export whose GELU is the tanh approximation and whose activation is
scaled by 1.01 (a real wrong-op export), an fp16 export (float16 in and out) and a model whose
input is named differently. Written once per test session (the candidate_exports fixture in
tests/conftest.py); tests read them and write elsewhere."""

from __future__ import annotations

import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path

SOURCE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 16)
            self.ln = nn.LayerNorm(16)
            self.out = nn.Linear(16, 4)

        def act(self, h):
            return nn.functional.gelu(h)

        def forward(self, x):
            h = self.act(self.ln(self.fc(x)))
            return self.out(h), h.sum(-1)


    class Buggy(Net):
        def act(self, h):
            return nn.functional.gelu(h, approximate="tanh") * 1.01


    def make():
        torch.manual_seed(0)
        return Net().eval()


    def make_buggy():
        model = Buggy().eval()
        model.load_state_dict(make().state_dict())
        return model
    """
)


@dataclass(frozen=True)
class Exports:
    dir: Path
    models: Path  # models.py: make / make_buggy
    pt2: Path
    dynamo: Path
    legacy: Path
    buggy: Path
    fp16: Path
    renamed: Path  # the same net, input named "features"


def build(root: Path) -> Exports:
    import importlib.util

    import torch

    models = root / "cand_models.py"
    models.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("cand_models_export", models)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net, x = module.make(), torch.randn(2, 8)
    batch = torch.export.Dim("batch")
    names = {"input_names": ["x"], "output_names": ["logits", "total"]}
    axes = {"x": {0: "batch"}, "logits": {0: "batch"}, "total": {0: "batch"}}
    paths = {k: root / f"{k}.onnx" for k in ("dynamo", "legacy", "buggy", "fp16", "renamed")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(net, (x,), dynamic_shapes=({0: batch},))
        torch.export.save(program, str(root / "net.pt2"))
        torch.onnx.export(
            net, (x,), str(paths["dynamo"]), dynamo=True, dynamic_shapes=({0: batch},),
            verbose=False, **names,
        )  # fmt: skip
        legacy = {"dynamo": False, "dynamic_axes": axes, **names}
        torch.onnx.export(net, (x,), str(paths["legacy"]), **legacy)
        torch.onnx.export(module.make_buggy(), (x,), str(paths["buggy"]), **legacy)
        torch.onnx.export(module.make().half(), (x.half(),), str(paths["fp16"]), **legacy)
        renamed_axes = {"features": {0: "batch"}, "logits": {0: "batch"}, "total": {0: "batch"}}
        torch.onnx.export(
            net, (x,), str(paths["renamed"]), dynamo=False, input_names=["features"],
            output_names=["logits", "total"], dynamic_axes=renamed_axes,
        )  # fmt: skip
    return Exports(dir=root, models=models, pt2=root / "net.pt2", **paths)
