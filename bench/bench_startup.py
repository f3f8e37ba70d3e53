"""Benchmark: what starting `parity validate` costs, against a bare interpreter and the imports
any torch-vs-ONNX check pays.

Not a test. A CI check, a sweep pair and `parity dashboard --model ...` each start a fresh
`python -m parity validate`, so its start is paid once per check. This runs each command
`--repeat` times in a fresh process and prints the median wall time and the process's CPU
time: the floor (`python -c pass`), numpy, ml_dtypes (onnx's dtype extension: its version is
printed, as its import time differs tenfold between releases), torch + onnxruntime + onnx
(what a check that loads both frameworks pays before any work), `parity validate --help`
(the CLI without a model), `parity validate` on a tiny model and its legacy ONNX export
(made here), and Polygraphy's `polygraphy run --onnxrt` on that ONNX file (a peer that loads
only ONNX Runtime and runs the model once).

    python bench/bench_startup.py               # 5 runs each
    python bench/bench_startup.py --repeat 9
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

MODEL = """
import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


def make():
    torch.manual_seed(0)
    return Tiny().eval()
"""


def _timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `cmd`; a failed command stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # parity validate exits 1 on FAIL: still a full run
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {proc.stderr.read().decode()[-500:]}")
    proc.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def _export(folder: Path) -> None:
    import torch

    sys.path.insert(0, str(folder))
    from tiny_model import make

    torch.onnx.export(
        make(), (torch.randn(2, 4),), str(folder / "tiny.onnx"), dynamo=False,
        input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}},
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tiny_model.py").write_text(MODEL)
        _export(folder)
        rows = [
            ("python -c pass (floor)", [py, "-c", "pass"]),
            ("import numpy", [py, "-c", "import numpy"]),
            (f"import ml_dtypes ({version('ml_dtypes')})", [py, "-c", "import ml_dtypes"]),
            ("import torch, onnxruntime, onnx", [py, "-c", "import torch, onnxruntime, onnx"]),
            ("parity validate --help", [py, "-m", "parity", "validate", "--help"]),
            ("parity validate (tiny model + ONNX)",
             [py, "-m", "parity", "validate", "--model", "tiny_model.py:make", "--onnx",
              "tiny.onnx"]),
        ]  # fmt: skip
        polygraphy = shutil.which("polygraphy")
        if polygraphy:
            rows.append(
                ("polygraphy run --onnxrt (peer)", [polygraphy, "run", "tiny.onnx", "--onnxrt"])
            )
        results = []
        for label, cmd in rows:
            _timed(cmd, folder)  # warm the page cache and .pyc files
            runs = [_timed(cmd, folder) for _ in range(args.repeat)]
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            results.append((label, wall, cpu))
    floor = results[0][1]
    print(f"{args.repeat} runs each, median; load average {os.getloadavg()[0]:.1f}")
    print(f"{'command':40} {'wall s':>8} {'x floor':>8} {'CPU s':>8}")
    for label, wall, cpu in results:
        print(f"{label:40} {wall:8.3f} {wall / floor:8.1f} {cpu:8.3f}")


if __name__ == "__main__":
    main()
