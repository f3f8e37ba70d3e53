"""Benchmark: what --noise-floor costs against a plain run (the floor), on a small conv net and
an LSTM, each as a float32 file and as ONNX Runtime's float16 conversion of it.

Not a test. Each model is built in code (random weights, seeded), exported with the legacy
exporter (dynamic batch), and converted to float16 with `convert_float_to_float16(
keep_io_types=True)`. Every (model, file) is validated plain and with --noise-floor through
`parity.pipeline.run_validation` (the CLI's loop, the same loaders), best of `--repeat`; it
prints the wall seconds, the ratio to the plain run, and the torch passes' own seconds
(`timings`: torch float32, and the noise floor's float64 plus, for a float16 file, torch at
float16), so what the extra passes cost is visible apart from the fixed costs.

    python bench/bench_noise_floor.py               # 2 input sets, best of 2
    python bench/bench_noise_floor.py --sets 3 --repeat 3
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import onnx
import torch

from parity.pipeline import RunConfig, run_validation


class ConvNet(torch.nn.Module):
    """Four 3x3 convolutions with BatchNorm and ReLU, then a pooled linear head."""

    def __init__(self) -> None:
        super().__init__()
        chans = (3, 32, 64, 64, 64)
        self.body = torch.nn.Sequential(
            *[
                layer
                for a, b in zip(chans, chans[1:], strict=False)
                for layer in (
                    torch.nn.Conv2d(a, b, 3, padding=1),
                    torch.nn.BatchNorm2d(b),
                    torch.nn.ReLU(),
                )  # fmt: skip
            ]
        )
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean(dim=(2, 3)))


class Lstm(torch.nn.Module):
    """A 3-layer LSTM speaker-encoder shape: frames -> last hidden -> embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(40, 128, num_layers=3, batch_first=True)
        self.fc = torch.nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(x)
        return torch.nn.functional.normalize(self.fc(h[-1]), dim=1)


MODELS = {
    "conv": (ConvNet, (2, 3, 64, 64), {0: "batch"}),
    "lstm": (Lstm, (2, 160, 40), {0: "batch"}),
}


def export(name: str, folder: Path) -> tuple[str, Path, Path]:
    """The factory spec, the float32 file and its float16 conversion."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    make, shape, dynamic = MODELS[name]
    factory = folder / f"{name}.py"
    factory.write_text(  # the class's own source: the factory needs nothing of this file
        f"import torch\n\n\n{inspect.getsource(make)}\n\n"
        f"def make():\n    torch.manual_seed(0)\n    return {make.__name__}().eval()\n"
    )
    torch.manual_seed(0)
    model = make().eval()
    f32 = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(*shape),), str(f32), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": dynamic})  # fmt: skip
    f16 = folder / f"{name}16.onnx"
    onnx.save(convert_float_to_float16(onnx.load(str(f32)), keep_io_types=True), str(f16))
    return f"{factory}:make", f32, f16


def best(config: RunConfig, repeat: int):
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run = run_validation(config)
        runs.append((time.perf_counter() - t0, run))
    return min(runs, key=lambda r: r[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, sets {args.sets}")
    print(f"{'model':6} {'file':8} {'plain s':>8} {'floor s':>8} {'× plain':>8} "
          f"{'torch32 s':>9} {'extra torch s':>13}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            spec, f32, f16 = export(name, Path(tmp))
            for label, path in (("float32", f32), ("float16", f16)):
                config = RunConfig(model=spec, onnx=str(path), n_input_sets=args.sets)
                plain, _ = best(config, args.repeat)
                noisy, run = best(replace(config, noise_floor=True), args.repeat)
                t = run.timings
                print(f"{name:6} {label:8} {plain:8.2f} {noisy:8.2f} {noisy / plain:8.2f} "
                      f"{t.get('torch', 0):9.2f} {t.get('float64', 0):13.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
