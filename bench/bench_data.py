"""Benchmark: `parity validate --data` against a hand loop, and its peak memory by data size.

Not a test. A small CNN on 3x128x128 images (random weights, exported by torch.onnx with a
dynamic batch) and a `.npy` of N samples (memory-mapped: N=4000 is 786 MB). Each size runs
in a fresh process, twice: the hand loop (numpy batches of the .npy, torch and ONNX Runtime
on each, the answers compared by argmax: what a user writes by hand) and `parity validate
--data` in-process (`parity.cli.main`). It prints samples/s of each, their ratio, and each
process's peak resident memory (ru_maxrss): flat across sizes means memory of a batch, never
of the data set.

    python bench/bench_data.py                       # 200 and 1000 samples
    python bench/bench_data.py --sizes 200 4000      # the issue's sizes (786 MB of data)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.mean((2, 3)))


def make():
    return Net().eval()
"""
BATCH = 64


def prepare(folder: Path, n: int) -> tuple[Path, Path, Path]:
    import numpy as np
    import torch

    model = folder / "net.py"
    model.write_text(MODEL)
    scope: dict = {}
    exec(compile(MODEL, str(model), "exec"), scope)
    onnx = folder / "net.onnx"
    torch.onnx.export(
        scope["make"](), (torch.zeros(2, 3, 128, 128),), str(onnx), input_names=["x"],
        output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
        dynamo=False,
    )  # fmt: skip
    data = folder / f"images{n}.npy"
    array = np.lib.format.open_memmap(data, mode="w+", dtype=np.float32, shape=(n, 3, 128, 128))
    rng = np.random.default_rng(0)
    for start in range(0, n, 500):
        stop = min(n, start + 500)
        array[start:stop] = rng.random((stop - start, 3, 128, 128), dtype=np.float32)
    array.flush()
    return model, onnx, data


def hand_loop(model: str, onnx: str, data: str) -> dict:
    import numpy as np
    import onnxruntime as ort
    import torch

    scope: dict = {}
    exec(compile(Path(model).read_text(), model, "exec"), scope)
    net = scope["make"]()
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    x = np.load(data, mmap_mode="r")
    t0 = time.perf_counter()
    same = 0
    for start in range(0, len(x), BATCH):
        batch = np.ascontiguousarray(x[start : start + BATCH])
        with torch.inference_mode():
            ref = net(torch.from_numpy(batch)).numpy()
        out = session.run(None, {"x": batch})[0]
        same += int((ref.argmax(1) == out.argmax(1)).sum())
    return {"seconds": time.perf_counter() - t0, "samples": len(x), "same": same}


def parity_run(model: str, onnx: str, data: str) -> dict:
    from parity.cli import main

    report = Path(data).with_suffix(".json")
    t0 = time.perf_counter()
    main(["validate", "--model", f"{model}:make", "--onnx", onnx, "--data", data,
          "--batch-size", str(BATCH), "--json", str(report)])  # fmt: skip
    seconds = time.perf_counter() - t0
    out = json.loads(report.read_text())["data"]["outputs"][0]
    timings = json.loads(report.read_text())["timings"]
    loop = sum(timings.get(k, 0.0) for k in ("inputs", "torch", "onnxruntime", "compare"))
    return {"seconds": seconds, "samples": out["samples"], "same": out["agree"],
            "loop": loop, "timings": timings}  # fmt: skip


def child(kind: str, model: str, onnx: str, data: str) -> None:
    result = (hand_loop if kind == "hand" else parity_run)(model, onnx, data)
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        rows = []
        for n in args.sizes:
            model, onnx, data = prepare(Path(tmp), n)
            found = {}
            for kind in ("hand", "parity"):
                env = {**os.environ, "PARITY_NO_SUPERVISE": "1"}
                out = subprocess.run(
                    [sys.executable, __file__, "--child", kind, str(model), str(onnx), str(data)],
                    capture_output=True, text=True, env=env, check=True,
                )  # fmt: skip
                found[kind] = json.loads(out.stdout.strip().splitlines()[-1])
            hand, ours = found["hand"], found["parity"]
            rows.append((n, hand, ours))
            data.unlink()
        print(f"{'samples':>8} {'hand s/s':>9} {'parity s/s':>11} {'ratio':>6} "
              f"{'whole run s/s':>14} {'hand MB':>8} {'parity MB':>10} agree")  # fmt: skip
        for n, hand, ours in rows:
            h = hand["samples"] / hand["seconds"]
            p = ours["samples"] / ours["loop"]  # read, torch, ORT, compare: the loop's own
            whole = ours["samples"] / ours["seconds"]  # + imports, loading, the session
            print(f"{n:>8} {h:>9.0f} {p:>11.0f} {h / p:>6.2f} {whole:>14.0f} "
                  f"{hand['peak_mb']:>8.0f} {ours['peak_mb']:>10.0f} "
                  f"{ours['same']}/{ours['samples']}")  # fmt: skip
            print("         parity timings:", {k: round(v, 2) for k, v in ours["timings"].items()})


if __name__ == "__main__":
    main()
