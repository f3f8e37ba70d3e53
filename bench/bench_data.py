"""Benchmark: `parity validate --data` against a hand loop, and its peak memory by data size.

Not a test. A small CNN on 3x128x128 images (random weights, exported by torch.onnx with a
dynamic batch) and a `.npy` of N samples (N=4000 is 786 MB). Each size runs in a fresh
process, twice: the hand loop (batches of 64 read from the .npy by offset, torch and ONNX
Runtime on each, the answers compared by argmax: what a user writes by hand) and `parity
validate --data` in-process (`parity.cli.main`). It prints samples/s of each, their ratio,
and each process's peak resident memory (VmHWM): flat across sizes means memory of a batch,
never of the data set. Both read the file, never map it: a memory map's pages count
in the process's resident memory as they are read, so a mapped 786 MB file alone makes the
peak grow by its size.

    python bench/bench_data.py                       # 200, 1000 and 4000 samples
    python bench/bench_data.py --sizes 200 1000      # quicker
    python bench/bench_data.py --ray                 # also --engine ray (a local cluster)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peak_memory import own_peak_bytes  # noqa: E402

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
    rng = np.random.default_rng(0)
    with open(data, "wb") as f:  # written, never mapped: this process forks the children
        header = {"descr": "<f4", "fortran_order": False, "shape": (n, 3, 128, 128)}
        np.lib.format.write_array_header_1_0(f, header)
        for start in range(0, n, 500):
            stop = min(n, start + 500)
            f.write(rng.random((stop - start, 3, 128, 128), dtype=np.float32).tobytes())
    return model, onnx, data


def hand_loop(model: str, onnx: str, data: str) -> dict:
    import numpy as np
    import onnxruntime as ort
    import torch

    scope: dict = {}
    exec(compile(Path(model).read_text(), model, "exec"), scope)
    net = scope["make"]()
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    with open(data, "rb") as f:  # the header: shape and where the samples start
        version = np.lib.format.read_magic(f)
        shape, _, dtype = np.lib.format.read_array_header_1_0(f) if version == (1, 0) else (
            np.lib.format.read_array_header_2_0(f))  # fmt: skip
        offset = f.tell()
    n, per = shape[0], int(np.prod(shape[1:])) * dtype.itemsize
    t0 = time.perf_counter()
    same = 0
    for start in range(0, n, BATCH):
        rows = min(BATCH, n - start)
        batch = np.fromfile(data, dtype, rows * per // dtype.itemsize, offset=offset + start * per)
        batch = batch.reshape(rows, *shape[1:])
        with torch.inference_mode():
            ref = net(torch.from_numpy(batch)).numpy()
        out = session.run(None, {"x": batch})[0]
        same += int((ref.argmax(1) == out.argmax(1)).sum())
    return {"seconds": time.perf_counter() - t0, "samples": n, "same": same}


def parity_run(model: str, onnx: str, data: str, engine: str = "local") -> dict:
    import hashlib

    from parity.cli import main

    report = Path(data).with_suffix(f".{engine}.json")
    on_ray = ["--engine", "ray", "--workers", "2"] if engine == "ray" else []
    t0 = time.perf_counter()
    main(["validate", "--model", f"{model}:make", "--onnx", onnx, "--data", data,
          "--batch-size", str(BATCH), "--json", str(report), *on_ray])  # fmt: skip
    seconds = time.perf_counter() - t0
    found = json.loads(report.read_text())
    out = found["data"]["outputs"][0]
    timings = found["timings"]
    loop = sum(timings.get(k, 0.0) for k in ("inputs", "torch", "onnxruntime", "compare"))
    block = hashlib.sha256(json.dumps(found["data"], sort_keys=True).encode()).hexdigest()
    return {"seconds": seconds, "samples": out["samples"], "same": out["agree"],
            "loop": loop, "timings": timings, "data_block": block}  # fmt: skip


def child(kind: str, model: str, onnx: str, data: str) -> None:
    if kind == "hand":
        result = hand_loop(model, onnx, data)
    else:
        result = parity_run(model, onnx, data, "ray" if kind == "ray" else "local")
    result["peak_mb"] = own_peak_bytes() / 2**20
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 4000])
    parser.add_argument(
        "--ray", action="store_true",
        help="also --engine ray on a local cluster of 2 CPUs: its whole run, the driver's peak "
        "memory, and whether its data block is the local run's",
    )  # fmt: skip
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        load = [f"{os.getloadavg()[0]:.1f}"]
        rows = []
        for n in args.sizes:
            model, onnx, data = prepare(Path(tmp), n)
            found = {}
            for kind in ("hand", "parity", *(("ray",) if args.ray else ())):
                env = {**os.environ, "PARITY_NO_SUPERVISE": "1"}
                out = subprocess.run(
                    [sys.executable, __file__, "--child", kind, str(model), str(onnx), str(data)],
                    capture_output=True, text=True, env=env, check=True,
                )  # fmt: skip
                found[kind] = json.loads(out.stdout.strip().splitlines()[-1])
            hand, ours = found["hand"], found["parity"]
            rows.append((n, hand, ours, found.get("ray")))
            data.unlink()
        print(f"load average before / after: {load[0]} / {os.getloadavg()[0]:.1f}")
        print(f"{'samples':>8} {'hand s/s':>9} {'parity s/s':>11} {'ratio':>6} "
              f"{'whole run s/s':>14} {'hand MB':>8} {'parity MB':>10} agree")  # fmt: skip
        for n, hand, ours, ray in rows:
            h = hand["samples"] / hand["seconds"]
            p = ours["samples"] / ours["loop"]  # read, torch, ORT, compare: the loop's own
            whole = ours["samples"] / ours["seconds"]  # + imports, loading, the session
            print(f"{n:>8} {h:>9.0f} {p:>11.0f} {h / p:>6.2f} {whole:>14.0f} "
                  f"{hand['peak_mb']:>8.0f} {ours['peak_mb']:>10.0f} "
                  f"{ours['same']}/{ours['samples']}")  # fmt: skip
            print("         parity timings:", {k: round(v, 2) for k, v in ours["timings"].items()})
            if ray is not None:
                same = "the same" if ray["data_block"] == ours["data_block"] else "ANOTHER"
                print(f"         --engine ray: whole run {ray['samples'] / ray['seconds']:.0f} "
                      f"s/s, driver peak {ray['peak_mb']:.0f} MB, {same} data block")  # fmt: skip


if __name__ == "__main__":
    main()
