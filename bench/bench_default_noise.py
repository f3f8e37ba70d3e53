"""Benchmark: what the default noise floor and the session crash probe cost (issue 53).

Not a test. A failing torch run that asks for no analysis measures the noise floor itself
(parity.analyses.noise: torch in float64 on the failing sets while the estimate fits in the
run's own torch time); every candidate's ONNX Runtime session is first opened in a forked
child (parity.load.sessions.crash_of). For each demo, and a plain run of a correct float32
export whose large logits fail atol 1e-5 by rounding ("logits"), it runs
`parity.pipeline.run_validation` with the default and with `noise_floor_default=False`
(--no-noise-floor), best of `--repeat`, and prints the wall seconds, torch's own seconds,
the float64 seconds the default spent and on which sets; then the probe's seconds per file.

    python bench/bench_default_noise.py             # best of 3
    python bench/bench_default_noise.py --repeat 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from parity.load.sessions import _probed, crash_of
from parity.pipeline import RunConfig, run_validation


class Logits(torch.nn.Module):
    """Two linear layers, one logit scaled to a few hundred (tests/test_first_run.py's)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 256)
        self.b = torch.nn.Linear(256, 16)
        scale = torch.ones(16)
        scale[3] = 400.0
        self.register_buffer("scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x))) * self.scale


def make_logits() -> torch.nn.Module:
    torch.manual_seed(0)
    return Logits().eval()


def _configs(folder: Path) -> dict[str, RunConfig]:
    onnx = folder / "logits.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(make_logits(), (torch.randn(2, 32),), str(onnx), dynamo=False,
                          input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "b"}})  # fmt: skip
    spec = f"{Path(__file__).resolve()}:make_logits"
    found = {f"demo:{n}": RunConfig(model=f"demo:{n}", onnx=None) for n in
             ("cnn", "transformer", "fp16", "broken")}  # fmt: skip
    found["logits"] = RunConfig(model=spec, onnx=str(onnx))
    return found


def _best(config: RunConfig, repeat: int):
    best = None
    for _ in range(repeat):
        _probed.clear()  # the probe is part of every fresh process's first run
        t0 = time.perf_counter()
        run = run_validation(config)
        wall = time.perf_counter() - t0
        if best is None or wall < best[0]:
            best = (wall, run)
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configs = _configs(Path(tmp))
        print("run            verdict  default s  off s  x off  torch s  float64 s  sets")
        for name, config in configs.items():
            run_validation(config)  # warm: the model's first call, the file's first read
            on, run = _best(config, args.repeat)
            off, _ = _best(replace(config, noise_floor_default=False), args.repeat)
            note = next((n.text for n in run.analyses if n.analysis == "noise_floor"), "")
            sets = note.split("input set", 1)[1].split("(", 1)[0].strip(" s") if note else "-"
            print(
                f"{name:<14} {run.verdict.value:<8} {on:9.2f}  {off:5.2f}  {on / off:5.2f}  "
                f"{run.timings.get('torch', 0.0):7.3f}  {run.timings.get('float64', 0.0):9.3f}"
                f"  {sets}"
            )
        print("\nsession probe (forked child, level all):")
        for name, config in configs.items():
            run = run_validation(replace(config, noise_floor_default=False))
            _probed.clear()
            t0 = time.perf_counter()
            crash_of(run.onnx, provider="CPUExecutionProvider", opt_level="all")
            print(f"  {name:<14} {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
