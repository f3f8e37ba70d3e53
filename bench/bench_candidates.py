"""Benchmark: N candidates in one `parity validate` against N separate `parity validate` runs.

Not a test. It builds one model (token embeddings through six residual MLP blocks, 7.5M
parameters: big enough that loading it and running torch cost something), exports it three
ways (dynamo, legacy, and legacy with a wrong GELU), and validates every export at each ORT
optimisation level of `--levels`:

* ``one run``     -- `python -m parity validate --model M.pt2 --onnx A --onnx B --onnx C
                     --ort-opt-level L1,L2 ...`: the reference runs once per input set, each
                     ONNX file is read once;
* ``separately``  -- one `python -m parity validate --model M.pt2 --onnx X --ort-opt-level L`
                     per candidate, one after another (what a shell loop does).

Both are timed end to end (processes included: that is what a user waits for), best of
`--repeat`; the verdicts must agree. It prints both times, the ratio, and the one run's own
timings (torch, ONNX Runtime, load) from its JSON report. On a shared machine, compare
ratios, not seconds (the load average is printed).

    python bench/bench_candidates.py                      # 3 files x 2 levels = 6 candidates
    python bench/bench_candidates.py --levels disable basic extended all --input-sets 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

MODELS = '''
"""The benchmark's model: token embeddings through residual MLP blocks (LayerNorm, GELU)."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width, approximate):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.act = nn.GELU(approximate)
        self.down = nn.Linear(4 * width, width)

    def forward(self, h):
        return h + self.down(self.act(self.up(self.norm(h))))


class Encoder(nn.Module):
    def __init__(self, width=384, layers=6, approximate="none"):
        super().__init__()
        self.emb = nn.Embedding(1000, width)
        self.blocks = nn.Sequential(*[Block(width, approximate) for _ in range(layers)])
        self.head = nn.Linear(width, 10)

    def forward(self, input_ids):
        return self.head(self.blocks(self.emb(input_ids)))


def make(approximate="none"):
    torch.manual_seed(0)
    return Encoder(approximate=approximate).eval()
'''


def build(folder: Path) -> dict[str, Path]:
    import torch

    (folder / "bench_models.py").write_text(MODELS)
    sys.path.insert(0, str(folder))
    from bench_models import make

    model = make()
    ids = torch.randint(0, 1000, (2, 32))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    dyn = ({0: batch, 1: seq},)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    names = {"input_names": ["input_ids"], "output_names": ["logits"]}
    paths = {k: folder / f"{k}.onnx" for k in ("dynamo", "legacy", "buggy")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(model, (ids,), dynamic_shapes=dyn), folder / "m.pt2")
        torch.onnx.export(
            model, (ids,), paths["dynamo"], dynamo=True, dynamic_shapes=dyn, verbose=False,
            **names,
        )  # fmt: skip
        legacy = {"dynamo": False, "dynamic_axes": axes, **names}
        torch.onnx.export(model, (ids,), paths["legacy"], **legacy)
        buggy = make(approximate="tanh")  # the same weights, GELU's tanh approximation
        torch.onnx.export(buggy, (ids,), paths["buggy"], **legacy)
    return {"pt2": folder / "m.pt2", **paths}


def validate(args: list[str], report: Path) -> tuple[float, dict]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "parity", "validate", *args, "--json", str(report)],
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"parity validate failed ({done.returncode}): {done.stderr.strip()}")
    return seconds, json.loads(report.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", default=["disable", "all"])
    parser.add_argument("--input-sets", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parity-bench-") as tmp:
        folder = Path(tmp)
        files = build(folder)
        onnx = [files["dynamo"], files["legacy"], files["buggy"]]
        common = ["--model", str(files["pt2"]), "--input-sets", str(opts.input_sets)]
        together = [*common, *(a for f in onnx for a in ("--onnx", str(f)))]
        together += ["--ort-opt-level", ",".join(opts.levels)]
        singles = [
            [*common, "--onnx", str(f), "--ort-opt-level", lv] for f in onnx for lv in opts.levels
        ]
        n = len(singles)
        best_one, best_sep = float("inf"), float("inf")
        for _ in range(opts.repeat):
            seconds, one = validate(together, folder / "one.json")
            best_one = min(best_one, seconds)
            total, verdicts = 0.0, []
            for k, args in enumerate(singles):
                seconds, rep = validate(args, folder / f"sep{k}.json")
                total += seconds
                verdicts.append(rep["verdict"])
            best_sep = min(best_sep, total)
        assert [c["verdict"] for c in one["candidates"]] == verdicts, (one["candidates"], verdicts)
        timings = {k: round(v, 3) for k, v in one["timings"].items()}
        print(
            f"load average {os.getloadavg()[0]:.1f}; {n} candidates "
            f"({len(onnx)} files x levels {','.join(opts.levels)}), {opts.input_sets} input sets"
        )
        print(f"verdicts: {', '.join(verdicts)}")
        print(f"one run, {n} candidates:   {best_one:7.2f} s   (its timings: {timings})")
        print(f"{n} separate runs:          {best_sep:7.2f} s")
        print(f"ratio separate / one run:  {best_sep / best_one:7.2f}x")


if __name__ == "__main__":
    main()
