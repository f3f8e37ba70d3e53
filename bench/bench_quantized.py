"""Benchmark: the quantization-aware reference on an int4 LLM, against a plain run. Not a test.

The model is the Qwen2.5-0.5B architecture with fewer layers (bench_llm.py's builder:
hidden 896, 14 heads, 2 KV heads, intermediate 4864, vocab 151936, tied embeddings; random
weights), exported by Optimum (`text-generation-with-past`) and quantized to int4 by ONNX
Runtime's `MatMulNBitsQuantizer(block_size=32, is_symmetric=True)` (every MatMul, lm_head
included). Each run is `parity validate --model hf:DIR --onnx int4.onnx --max-new-tokens N`
in its own process: `--no-quantized-reference` (plain) and the default (the file's own
weights put into torch: the weights read and checked, every captured call again, one more
generate()), each without and with free-running generation; wall time, peak RSS (getrusage
of the child) and the run's own `timings.quantization`.

    nice python bench/bench_quantized.py                     # 4 layers, in a temp dir
    nice python bench/bench_quantized.py --work /tmp/q4      # keeps (and reuses) the files
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_llm import GB, build_model, optimum_export, run  # noqa: E402


def quantize(src: Path, dst: Path) -> float:
    if dst.exists():
        return 0.0
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger().setLevel(logging.ERROR)
    t0 = time.perf_counter()
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=32, is_symmetric=True)
    quantizer.process()
    dst.parent.mkdir(parents=True, exist_ok=True)
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="keep the files here")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers")
    parser.add_argument("--steps", type=int, default=4, help="--max-new-tokens")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="parity-bench-int4-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model_dir = work / "qwen2"
        size, n = build_model(model_dir, args.layers)
        print(f"Qwen2 ({args.layers} layers): {n / 1e6:.0f}M parameters, {size / GB:.2f} GB fp32")
        raw = work / "optimum" / "model.onnx"
        seconds = optimum_export(model_dir, raw.parent)
        int4 = work / "int4" / "model.onnx"
        q_seconds = quantize(raw, int4)
        on_disk = sum(p.stat().st_size for p in int4.parent.iterdir() if p.is_file())
        print(
            f"Optimum export {seconds:.0f} s, MatMulNBitsQuantizer {q_seconds:.0f} s (not "
            f"counted): int4 file {on_disk / GB:.2f} GB"
        )
        base = ["--model", f"hf:{model_dir}", "--onnx", str(int4)]
        base += ["--max-new-tokens", str(args.steps), "--max-memory", "8G"]
        rows = []
        for label, extra in (
            ("plain", ["--no-quantized-reference", "--no-generation"]),
            ("quantization-aware", ["--no-generation"]),
            ("plain + generation", ["--no-quantized-reference"]),
            ("quantization-aware + generation", []),
        ):
            code, wall, peak, data = run([*base, *extra], work / f"{label}.json")
            stage = (data.get("timings") or {}).get("quantization")
            rows.append((label, code, wall, peak, stage))
            q = data.get("quantization")
            if q:
                logits = next((o for o in q["outputs"] if o["name"] == "logits"), {})
                t = q.get("tokens") or {}
                print(
                    f"  {label}: {len(q['weights'])} weights, "
                    f"{sum(w['status'] == 'rounding' for w in q['weights'])} rounding; logits "
                    f"export max abs {logits.get('export_max_abs')}, SQNR "
                    f"{logits.get('sqnr_db')} dB; tokens {t.get('greedy_agree')}/"
                    f"{t.get('greedy_total')}, top-1 {t.get('top1_agreement')}"
                )
        print(f"\n{'run':34s} {'exit':>4s} {'wall s':>7s} {'peak GB':>8s} {'stage s':>8s}")
        for label, code, wall, peak, stage in rows:
            said = f"{stage:8.1f}" if stage is not None else f"{'-':>8s}"
            print(f"{label:34s} {code:4d} {wall:7.1f} {peak / GB:8.2f} {said}")
        by = {label: (wall, peak) for label, _c, wall, peak, _s in rows}
        for plain, aware in (
            ("plain", "quantization-aware"),
            ("plain + generation", "quantization-aware + generation"),
        ):
            (w0, p0), (w1, p1) = by[plain], by[aware]
            print(f"{aware}: {w1 / w0:.2f}x {plain} time, {(p1 - p0) / GB:+.2f} GB peak")


if __name__ == "__main__":
    main()
