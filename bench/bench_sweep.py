"""Benchmark: `parity sweep` over a generated zoo, against running `parity validate` by hand.

Not a test. It writes a zoo of `--pairs` tiny models (MLPs of different widths and depths,
each exported with torch.onnx, one in four with a perturbed ONNX weight so it fails), then
times, on the same manifest:

* ``by hand``        -- `python -m parity validate ARGS --json R` for each pair, one after another
                        (what a shell loop would do; the floor for one worker);
* ``local, N``       -- `parity sweep --workers N` for each N of `--workers`;
* ``ray, N``         -- `parity sweep --engine ray --workers N` (a local Ray cluster of N CPUs,
                        started and stopped inside the timing; its one node sees the files);
* ``isolated, N``    -- the same sweep on a cluster sharing no filesystem with the driver
                        (tests/helpers/isolated_ray.py: a head with no CPUs, one worker node
                        of N CPUs in a private mount namespace with a tmpfs over the zoo and
                        --out; root only), started before the timing: every input file
                        travels through Ray's object store and every report comes back.

With `--s3`, every ONNX file is put in moto's S3 server (started here, on 127.0.0.1; needs the
dev extra: moto[server], s3fs) and the manifest names it `s3://zoo/mI.onnx`, pinned by
SHA-256: each pair's process reads its ONNX file from object storage, as a nightly zoo would.

It prints wall time, pairs per minute, the driver's peak memory (VmHWM of the `parity sweep`
process), the bytes the Ray runs shipped through the object store, and the sweep's overhead
per pair against by-hand ((sweep at 1 worker - by hand) /
pairs). Every configuration must give the same verdicts.
The machine's load average is printed: on a shared machine, compare ratios, not seconds.

    python bench/bench_sweep.py                         # 50 pairs; by hand, local 1 and 2, ray 2
    python bench/bench_sweep.py --pairs 20 --workers 1 2 4 --skip ray
    python bench/bench_sweep.py --pairs 24 --workers 2 --skip hand --isolated-workers 2
    python bench/bench_sweep.py --pairs 100 --workers 2 --skip hand ray --isolated-workers 2 --s3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

MODELS = '''
"""Tiny MLPs for the sweep benchmark."""
import torch
from torch import nn


def make(width: int, depth: int, seed: int):
    torch.manual_seed(seed)
    layers = [nn.Linear(16, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))
'''


DRIVER_PEAK: dict[str, int] = {}
"""--out -> the peak resident memory of that sweep's driver process (bytes)."""


def write_zoo(folder: Path, n_pairs: int) -> Path:
    import onnx
    import torch
    from onnx import numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "zoo_models.py").write_text(MODELS)
    sys.path.insert(0, str(folder))
    from zoo_models import make

    pairs = []
    for i in range(n_pairs):
        width, depth = 8 * (1 + i % 8), 1 + i % 3
        source = f"def model():\n    return make({width}, {depth}, {i})\n"
        (folder / f"m{i}.py").write_text(f"from zoo_models import make\n\n\n{source}")
        model = make(width, depth, i).eval()
        path = folder / f"m{i}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (torch.randn(2, 16),),
                str(path),
                dynamo=False,
                input_names=["x"],
                output_names=["y"],
                dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
            )
        if i % 4 == 3:  # a real export bug stand-in: one weight off by 1e-2
            proto = onnx.load(str(path))
            init = proto.graph.initializer[0]
            array = numpy_helper.to_array(init).copy()
            array.flat[0] += np.float32(1e-2)
            init.CopyFrom(numpy_helper.from_array(array, init.name))
            onnx.save(proto, str(path))
        pairs.append(
            {"name": f"m{i}", "args": ["--model", f"m{i}.py:model", "--onnx", f"m{i}.onnx"]}
        )
    manifest = folder / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "schema": "parity.sweep/1",
                "defaults": {"args": ["--input-sets", "2"]},
                "pairs": pairs,
            },
            indent=1,
        )  # fmt: skip
    )
    return manifest


def to_s3(manifest: Path, server) -> None:
    """Put every ONNX file the manifest names in the server's bucket; name it by URI, pinned."""
    import hashlib

    data = json.loads(manifest.read_text())
    pins = {}
    for pair in data["pairs"]:
        args = pair["args"]
        at = args.index("--onnx") + 1
        content = (manifest.parent / args[at]).read_bytes()
        uri = f"s3://zoo/{args[at]}"
        server.put(args[at], content)
        pins[uri] = hashlib.sha256(content).hexdigest()
        args[at] = uri
    data["sha256"] = pins
    manifest.write_text(json.dumps(data, indent=1))


def by_hand(manifest: Path, out: Path) -> tuple[float, dict[str, str]]:
    data = json.loads(manifest.read_text())
    defaults = data["defaults"]["args"]
    verdicts = {}
    start = time.perf_counter()
    for pair in data["pairs"]:
        report = out / f"{pair['name']}.json"
        code = subprocess.run(
            [sys.executable, "-m", "parity", "validate", *defaults, *pair["args"]]
            + ["--json", str(report)],
            cwd=manifest.parent,
            capture_output=True,
        ).returncode
        verdicts[pair["name"]] = {0: "pass", 1: "fail"}.get(code, "error")
    return time.perf_counter() - start, verdicts


def sweep(
    manifest: Path,
    out: Path,
    engine: str,
    workers: int,
    *,
    address: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[float, dict[str, str], str]:
    """Seconds, verdicts, and what the sweep says it shipped through Ray ("" locally)."""
    start = time.perf_counter()
    extra = ["--ray-address", address] if address else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "sweep", str(manifest), "--out", str(out)]
        + ["--engine", engine, "--workers", str(workers), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    peak = [0]

    def watch() -> None:  # VmHWM only grows: the last reading before the exit is the peak
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                peak[0] = max(peak[0], int(re.search(r"VmHWM:\s+(\d+)", status).group(1)))
            except (OSError, AttributeError):
                pass
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, stderr = proc.communicate()
    watcher.join()
    seconds = time.perf_counter() - start
    DRIVER_PEAK[str(out)] = peak[0] << 10
    summary = json.loads((out / "summary.json").read_text())
    shipped = re.search(r"sweep: ray: (.*)", stderr)
    return (
        seconds,
        {p["name"]: p["verdict"] for p in summary["pairs"]},
        shipped.group(1) if shipped else "",
    )  # fmt: skip


def isolated(
    manifest: Path, out: Path, workers: int, worker_env: dict[str, str] | None = None
) -> tuple[float, dict[str, str], str]:
    """The sweep on a cluster whose worker sees neither the zoo nor --out (started first)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.helpers import isolated_ray

    out.mkdir()
    cluster = isolated_ray.start([manifest.parent, out], worker_cpus=workers, worker_env=worker_env)
    try:
        return sweep(manifest, out, "ray", workers, address=cluster.address, env=cluster.env)
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ray-workers", type=int, nargs="+", default=[2])
    parser.add_argument("--isolated-workers", type=int, nargs="+", default=[])
    parser.add_argument("--skip", nargs="*", default=[], choices=["hand", "ray"])
    parser.add_argument("--s3", action="store_true", help="ONNX files from moto's S3 server")
    args = parser.parse_args()
    server = None
    if args.s3:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.helpers.moto_s3 import Moto

        server = Moto()
        server.start()
        os.environ.update(server.env)
    try:
        run(args, server)
    finally:
        if server is not None:
            server.stop()


def run(args: argparse.Namespace, server) -> None:
    with tempfile.TemporaryDirectory(prefix="parity-bench-sweep-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        manifest = write_zoo(root / "zoo", args.pairs)
        if server is not None:
            to_s3(manifest, server)
        where = " (ONNX files in S3)" if server is not None else ""
        took = time.perf_counter() - t
        print(f"zoo: {args.pairs} pairs{where} written and exported in {took:.1f} s")
        print(f"cpus {os.cpu_count()}, load average at start {os.getloadavg()[0]:.2f}")
        rows: list[tuple[str, float, dict[str, str], str]] = []
        if "hand" not in args.skip:
            (root / "hand").mkdir()
            label = "by hand (validate, one after another)"
            rows.append((label, *by_hand(manifest, root / "hand"), ""))
        for n in args.workers:
            label = f"sweep local, {n} worker(s)"
            rows.append((label, *sweep(manifest, root / f"l{n}", "local", n)))
        if "ray" not in args.skip:
            for n in args.ray_workers:
                rows.append((f"sweep ray (local cluster, files seen), {n} CPU(s)",
                             *sweep(manifest, root / f"r{n}", "ray", n)))  # fmt: skip
        for n in args.isolated_workers:
            rows.append((f"sweep ray (isolated worker, nothing shared), {n} CPU(s)",
                         *isolated(manifest, root / f"i{n}", n,
                                   server.env if server else None)))  # fmt: skip
        print(f"load average at end {os.getloadavg()[0]:.2f}\n")
        print("| configuration | wall s | pairs/min | driver peak | shipped |")
        print("|---|---:|---:|---:|---|")
        peaks = iter([*([None] if "hand" not in args.skip else []), *DRIVER_PEAK.values()])
        for label, seconds, _, shipped in rows:
            peak = next(peaks, None)
            shown = f"{peak / 2**20:.0f} MiB" if peak else ""
            rate = 60 * args.pairs / seconds
            print(f"| {label} | {seconds:.1f} | {rate:.0f} | {shown} | {shipped} |")
        verdicts = [v for _, _, v, _ in rows]
        same = all(v == verdicts[0] for v in verdicts)
        counts = {k: list(verdicts[0].values()).count(k) for k in ("pass", "fail", "error")}
        print(f"\nverdicts {counts}, identical in every configuration: {same}")
        hand = next((s for label, s, *_ in rows if label.startswith("by hand")), None)
        one = next((s for label, s, *_ in rows if label == "sweep local, 1 worker(s)"), None)
        if hand is not None and one is not None:
            print(f"sweep overhead per pair vs by hand: {(one - hand) / args.pairs:+.3f} s")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
