"""Built-in demo models and their ONNX exports (exported on first use, cached).

A newcomer needs something to point Parity at before they have their own model: one export
that agrees (``cnn``), one with attention and layer norm (``transformer``), one whose
disagreement is a precision question answered by per-output tolerances (``fp16``), and one
with a real bug to find (``broken``). Everything is built in code with fixed seeds, so every
machine exports the same models; the exports are cached because exporting takes seconds.

Public API: ``Demo``, ``DEMOS`` (cnn, transformer, fp16, broken), ``get_demo(name)``,
``demo_onnx_path(name)`` (cache under ``$PARITY_CACHE_DIR`` or ``~/.cache/parity/demos``,
file keyed by demo name, ``DEMO_VERSION``, torch and onnx versions), ``export_demo(demo)``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from parity.errors import ExportError, UsageError
from parity.files.atomic import atomic_path
from parity.load.export_lock import export_lock
from parity.tolerances import Tolerance, Tolerances

if TYPE_CHECKING:
    import torch
    from torch import nn

# Bump when a demo's model, weights or export changes: it is part of the cache key.
DEMO_VERSION = "1"

CACHE_ENV = "PARITY_CACHE_DIR"
_DEFAULT_CACHE = Path("~/.cache/parity/demos")
SHIPPED_DIR = Path(__file__).resolve().parent / "demo_exports"
"""The demos' exports as the package ships them, named as the cache names them (so a file
is used only by the torch and onnx versions that made it): a fresh install's first demo run
copies one instead of exporting (the export is most of a first `--model demo:broken`).
Written by `python -m parity.load.demos` (write_shipped_exports)."""
SHIPPED_ENV = "PARITY_DEMO_SHIPPED"
"""Set to 0 to export every demo afresh (tests of the exporter path)."""


@dataclass(frozen=True)
class Demo:
    """A built-in model: how to build it, an example input, and the tolerances it needs.

    ``tolerances`` is None when the default tolerance (atol 1e-5, rtol 0) is the right test.
    ``build`` and ``example_inputs`` import torch only when called.
    """

    name: str
    title: str
    description: str
    build: Callable[[], nn.Module]
    example_inputs: Callable[[], tuple[torch.Tensor, ...]]
    tolerances: Tolerances | None = None


def _builder(name: str) -> Callable[[], Any]:
    def build() -> Any:
        import parity.load.demo_models as demo_models

        return demo_models.build(name)

    return build


def _inputs(name: str) -> Callable[[], Any]:
    def example_inputs() -> Any:
        import parity.load.demo_models as demo_models

        return demo_models.example_inputs(name)

    return example_inputs


# fp16 and transformer share one encoder (same weights): the same callables.
_ENCODER_BUILD = _builder("transformer")
_ENCODER_INPUTS = _inputs("transformer")

# fp16, measured against the float32 torch model on onnxruntime 1.32 CPU over batch 1..6,
# seq 8..64, 5 seeds, padded and unpadded masks: max |error| 2.5e-3 on last_hidden_state
# (LayerNorm output, |ref| up to ~3.5) and 3.2e-4 on pooled (tanh output, |ref| < 0.6).
# The tolerances below leave a 4x (last_hidden_state) and 6x (pooled) margin on atol alone.
FP16_TOLERANCES = Tolerances(
    outputs={
        "last_hidden_state": Tolerance(atol=1e-2, rtol=1e-2),
        "pooled": Tolerance(atol=2e-3, rtol=1e-2),
    }
)

DEMOS: dict[str, Demo] = {
    "cnn": Demo(
        name="cnn",
        title="Small CNN (passes)",
        description=(
            "A small convolutional network (conv, batch norm, ReLU, pooling and a linear head) "
            "that maps an image to class logits and a feature map. Its export is faithful: "
            "every output should pass at the default tolerance, at every image size you try."
        ),
        build=_builder("cnn"),
        example_inputs=_inputs("cnn"),
    ),
    "transformer": Demo(
        name="transformer",
        title="Small transformer encoder (passes)",
        description=(
            "A 2-layer transformer encoder (token and position embeddings, multi-head "
            "attention, layer norm, GELU) over token ids and an attention mask. The float32 "
            "export agrees to about 1e-6, so both outputs pass at the default tolerance; "
            "compare the error histograms with the fp16 demo's."
        ),
        build=_ENCODER_BUILD,
        example_inputs=_ENCODER_INPUTS,
    ),
    "fp16": Demo(
        name="fp16",
        title="Same encoder in float16 (precision)",
        description=(
            "The transformer demo's encoder with the same weights, but its ONNX graph computes "
            "in float16 (inputs and outputs stay float32, so only precision differs). It fails "
            "at the default atol 1e-5; look at how the error spreads over every element, then "
            "apply the demo's per-output tolerances (atol 1e-2 / rtol 1e-2 on "
            "last_hidden_state, atol 2e-3 / rtol 1e-2 on pooled) and see it pass."
        ),
        build=_ENCODER_BUILD,
        example_inputs=_ENCODER_INPUTS,
        tolerances=FP16_TOLERANCES,
    ),
    "broken": Demo(
        name="broken",
        title="Segmenter with an export bug (find it)",
        description=(
            "A small segmentation-style network with two heads: a per-pixel mask and an image "
            "embedding. Its export has one real bug in one operator: one output is wrong "
            "somewhere while the other passes. Find which output, then use the error heatmap "
            "to find where in the tensor the error sits, and guess which op is to blame."
        ),
        build=_builder("broken"),
        example_inputs=_inputs("broken"),
    ),
}


def get_demo(name: str) -> Demo:
    """The demo called ``name``; UsageError listing the known names otherwise."""
    try:
        return DEMOS[name]
    except KeyError:
        known = ", ".join(DEMOS)
        raise UsageError(f"unknown demo {name!r}; known demos: {known}") from None


def demo_cache_dir() -> Path:
    """``$PARITY_CACHE_DIR`` if set, else ``~/.cache/parity/demos``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else _DEFAULT_CACHE.expanduser()


def demo_cache_key(name: str) -> str:
    """Changes when the demo, its version, or the torch/onnx that export it change."""
    text = "|".join((name, DEMO_VERSION, metadata.version("torch"), onnx.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ready_demo_onnx(name: str) -> Path | None:
    """The demo's export if it needs no exporting (cached, or shipped for this torch and
    onnx), else None: what a check before the run may read without torch."""
    cached = demo_cache_dir() / f"{name}-{demo_cache_key(name)}.onnx"
    shipped = SHIPPED_DIR / cached.name
    if cached.is_file():
        return cached
    return shipped if shipped.is_file() and os.environ.get(SHIPPED_ENV, "1") != "0" else None


def demo_onnx_path(name: str) -> Path:
    """The demo's ONNX file, exported on first use and cached; safe when threads or
    processes race (one export at a time under the cache's lock, written atomically)."""
    demo = get_demo(name)
    cache_dir = demo_cache_dir()
    path = cache_dir / f"{name}-{demo_cache_key(name)}.onnx"
    if path.is_file():
        return path
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with export_lock(cache_dir):
            if path.is_file():  # another thread or process exported it while we waited
                return path
            shipped = SHIPPED_DIR / path.name
            with atomic_path(path) as tmp:
                if shipped.is_file() and os.environ.get(SHIPPED_ENV, "1") != "0":
                    tmp.write_bytes(shipped.read_bytes())  # this torch's and onnx's export
                else:
                    onnx.save(export_demo(demo), str(tmp))
    except OSError as exc:
        raise ExportError(f"cannot write demo cache {cache_dir}: {exc.strerror or exc}") from exc
    return path


def export_demo(demo: Demo) -> onnx.ModelProto:
    """Export ``demo`` with the dynamo exporter, apply its edit, and check the result."""
    import parity.load.demo_models as demo_models

    return demo_models.export_demo(demo.name)


def write_shipped_exports(folder: Path = SHIPPED_DIR) -> list[Path]:
    """Export every demo into `folder` under this torch's and onnx's cache names, removing
    the files of other versions (run when a demo, DEMO_VERSION or the pinned torch change)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, demo in DEMOS.items():
        model = export_demo(demo)
        for node in model.graph.node:  # no stack traces: they name this machine's files
            kept = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
        path = folder / f"{name}-{demo_cache_key(name)}.onnx"
        with atomic_path(path) as tmp:
            onnx.save(model, str(tmp))
        written.append(path)
    for old in folder.glob("*.onnx"):
        if old not in written:
            old.unlink()
    return written


if __name__ == "__main__":
    for shipped_path in write_shipped_exports():
        print(shipped_path)
