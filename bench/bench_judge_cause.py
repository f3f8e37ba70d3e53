"""Benchmark: what the verdict by cause costs (`--judge cause`, issue 63): time and peak memory
against a plain run of the same file, on a 6-layer BERT (all-MiniLM-L6-v2's shape: hidden
384, 12 heads, intermediate 1536; random weights), float32 as exported and int8 by ONNX
Runtime's quantize_dynamic.

Not a test. Each measurement runs in a fresh child process (its peak RSS is its VmHWM, the
whole process: torch's own footprint included, so the difference between two lines is what
the judge adds); best wall time of `--repeat` runs per line, printed with its ratio to the
plain run of the same file.

    python bench/bench_judge_cause.py               # best of 3
    python bench/bench_judge_cause.py --repeat 5 --batch 8 --seq 128
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peak_memory import own_peak_bytes  # noqa: E402

SEQ, BATCH = 64, 4


def make_bert() -> torch.nn.Module:
    """The 6-layer BERT, seeded: every process builds the same weights."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
        vocab_size=30522, max_position_embeddings=512,
    )  # fmt: skip
    return BertModel(config).eval()


class Bert(torch.nn.Module):
    """BertModel's two outputs as a tuple (the ONNX file's order)."""

    def __init__(self) -> None:
        super().__init__()
        self.bert = make_bert()

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def make() -> torch.nn.Module:
    return Bert().eval()


def _export(folder: Path) -> dict[str, Path]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = folder / "bert.onnx"
    ids = torch.randint(0, 30522, (2, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            make(), (ids, torch.ones_like(ids)), str(fp32), dynamo=False,
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in ("input_ids", "attention_mask")},
        )  # fmt: skip
        int8 = folder / "bert_int8.onnx"
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return {"float32": fp32, "int8": int8}


def _child(onnx: str, judge: str, batch: int, seq: int) -> None:
    from parity import validate

    t0 = time.perf_counter()
    run = validate(
        make(), onnx, judge=judge, dims={"batch": batch, "sequence": seq}, input_sets=1,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    peak = own_peak_bytes()
    print(json.dumps({"wall": wall, "peak": peak, "verdict": str(run.verdict)}))


def _measure(onnx: Path, judge: str, args: argparse.Namespace) -> dict:
    best: dict | None = None
    for _ in range(args.repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(onnx), judge, str(args.batch), str(args.seq)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        got = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or got["wall"] < best["wall"]:
            best = got
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--seq", type=int, default=SEQ)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        onnx, judge, batch, seq = args.child
        _child(onnx, judge, int(batch), int(seq))
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = _export(Path(tmp))
        print(f"6-layer BERT (hidden 384), batch {args.batch} x {args.seq} tokens, one input set")
        print(f"{'file':8} {'judge':10} {'verdict':8} {'wall s':>7} {'x plain':>8} "
              f"{'peak GiB':>9} {'+ GiB':>6}")  # fmt: skip
        for name, path in files.items():
            plain = _measure(path, "tolerance", args)
            for judge in ("tolerance", "cause"):
                got = plain if judge == "tolerance" else _measure(path, judge, args)
                print(
                    f"{name:8} {judge:10} {got['verdict']:8} {got['wall']:7.2f} "
                    f"{got['wall'] / plain['wall']:8.2f} {got['peak'] / 2**30:9.2f} "
                    f"{(got['peak'] - plain['peak']) / 2**30:6.2f}"
                )


if __name__ == "__main__":
    main()
