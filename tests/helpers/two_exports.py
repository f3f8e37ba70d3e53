"""One model exported by both exporters people use, as the tests of --layers need it."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch


def export_both(
    model: torch.nn.Module,
    x: torch.Tensor,
    root: Path,
    *,
    dynamic_axes: Mapping[str, Any] | None = None,
    dynamic_shapes: Mapping[str, Any] | None = None,
    output: str | None = None,
) -> tuple[Path, Path]:
    """(legacy, dynamo) exports of `model` on `x` (input "x"; output `output` when given)
    in `root`: the legacy one with `dynamic_axes`, the dynamo one with `dynamic_shapes`."""
    legacy, dynamo = root / "leg.onnx", root / "dyn.onnx"
    names = {"output_names": [output]} if output else {}
    with warnings.catch_warnings():  # both exporters warn (deprecation, dynamic shapes)
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x,),
            str(legacy),
            dynamo=False,
            input_names=["x"],
            dynamic_axes=dict(dynamic_axes) if dynamic_axes else None,
            **names,
        )
        program = torch.onnx.export(
            model,
            (x,),
            dynamo=True,
            verbose=False,
            input_names=["x"],
            dynamic_shapes=dict(dynamic_shapes) if dynamic_shapes else None,
            **names,
        )
        program.save(str(dynamo))
    return legacy, dynamo
