"""Benchmark: `--layers` against a plain validation on a small LSTM speaker encoder (3 layers,
hidden 64, 2 x 160 frames of 40 mels, its last hidden state through a Linear: resemblyzer's
shape at a quarter of its width), both exporters. Not a test.

Each timing is the median of `--repeats` runs in one process after a warm-up run (the first
`--layers` run pays for the exporter's decomposition tables), in CPU seconds of the process
(`time.process_time`: on a shared machine wall time measures the neighbours), one thread.
Put a folder holding `parity` -> another version's `core/` first on PYTHONPATH to time it.

    python bench/bench_layers_recurrent.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(40, 64, num_layers=3, batch_first=True)
        self.linear = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(x)
        e = torch.relu(self.linear(h[-1]))
        return e / (torch.norm(e, dim=1, keepdim=True) + 1e-5)


def _median(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import parity

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(2, 160, 40)
    feeds = {"x": x.numpy()}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        legacy, dynamo = Path(tmp) / "leg.onnx", Path(tmp) / "dyn.onnx"
        torch.onnx.export(model, (x,), str(legacy), dynamo=False, input_names=["x"])
        torch.onnx.export(model, (x,), dynamo=True, verbose=False).save(str(dynamo))
        print(f"parity from {Path(parity.__file__).parent}")
        for name, path in (("legacy", legacy), ("dynamo", dynamo)):
            plain = _median(
                lambda p=path, f=feeds: parity.validate(model, p, inputs=f), args.repeats
            )
            layered = _median(
                lambda p=path, f=feeds: parity.validate(model, p, inputs=f, layers=True),
                args.repeats,
            )
            run = parity.validate(model, path, inputs=feeds, layers=True)
            assert run.layers is not None
            print(
                f"{name}: plain {plain:.2f} CPU s, --layers {layered:.2f} CPU s "
                f"({layered / plain:.1f}x); {run.layers.matched} values matched, "
                f"first divergence {run.layers.first_divergence is not None}"
            )


if __name__ == "__main__":
    main()
