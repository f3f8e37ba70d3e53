"""Benchmark: `parity validate` on a causal LM at the size people ship. Not a test.

The model is built from the Qwen2.5-0.5B architecture (Qwen2Config: hidden 896, 14 heads,
2 KV heads, 24 layers, intermediate 4864, vocab 151936, tied embeddings: 494M parameters,
1.98 GB in float32) with random weights (std 0.02), saved with save_pretrained and an
in-code tokenizer. Two exports of it: Optimum's (`text-generation-with-past`, legacy
exporter, ~2.5 GB of external data) and Parity's own (torch.onnx.export(dynamo=True), made
by the first run with --export-path and timed with it).

Each run is `parity validate --model hf:DIR --onnx FILE --max-new-tokens 4` in its own
process: plain, `--layers` (intermediate values of every step compared, confirmation
included, default --layers-memory) and `--noise-floor` (every call again in float64), each
with `--no-generation`, then the default run (free-running generation after the steps);
wall time and peak RSS (bench.peak_memory.command_peak: the supervised child's included),
printed against the model's float32 size and the plain run. Goals (issue 40): plain <= 2.5x
the float32 size in peak memory; --layers <= plain + 1.5 GB and <= 5x plain time; generation
<= 1.5x plain.

    nice python bench/bench_llm.py                       # builds the model in a temp dir
    nice python bench/bench_llm.py --work /tmp/llm       # keeps (and reuses) the files
    nice python bench/bench_llm.py --layers 4            # a smaller model, same shape
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

from bench.peak_memory import command_peak  # noqa: E402

QWEN25_05B = {
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "initializer_range": 0.02,
}
GB = 1 << 30


def build_model(directory: Path, n_layers: int) -> float:
    """Save the random-weight model and its tokenizer; returns its float32 size in bytes."""
    import torch
    import transformers

    from tests.helpers.hf_models import SPECIAL, make_tokenizer

    config = transformers.Qwen2Config(**{**QWEN25_05B, "num_hidden_layers": n_layers}, **SPECIAL)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    n = sum(p.numel() for p in model.parameters())
    if not (directory / "config.json").exists():
        model.save_pretrained(directory)
        make_tokenizer().save_pretrained(directory)
    return float(n * 4), n


def optimum_export(model_dir: Path, out: Path) -> float:
    if (out / "model.onnx").exists():
        return 0.0
    t0 = time.perf_counter()
    code = (
        "import sys; from optimum.exporters import onnx as e; "
        "e.main_export(sys.argv[1], output=sys.argv[2], task='text-generation-with-past')"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(model_dir), str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def run(argv: list[str], report: Path) -> tuple[int, float, int, dict]:
    """(exit code, wall s, peak RSS bytes, JSON report) of one `parity validate`."""
    command = [sys.executable, "-m", "parity", "validate", *argv, "--json", str(report)]
    got = command_peak(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    data = json.loads(report.read_text()) if report.exists() else {}
    if got.returncode == 2:
        print(f"    (exit 2: {got.stderr.strip().splitlines()[-1:]})")
    return got.returncode, got.seconds, got.peak_bytes, data


def _external_bytes(onnx_file: Path) -> int:
    return sum(p.stat().st_size for p in onnx_file.parent.iterdir() if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="keep the files here")
    parser.add_argument("--layers", type=int, default=24, help="decoder layers (24: 0.5B)")
    parser.add_argument("--steps", type=int, default=4, help="--max-new-tokens")
    parser.add_argument("--skip-own", action="store_true", help="Optimum's export only")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="parity-bench-llm-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model_dir = work / "qwen2"
        t0 = time.perf_counter()
        size, n = build_model(model_dir, args.layers)
        print(
            f"Qwen2 ({args.layers} layers, random weights): {n / 1e6:.0f}M parameters, "
            f"{size / GB:.2f} GB float32 (built in {time.perf_counter() - t0:.0f} s)"
        )
        optimum = work / "optimum" / "model.onnx"
        seconds = optimum_export(model_dir, optimum.parent)
        print(
            f"Optimum export: {_external_bytes(optimum) / GB:.2f} GB on disk "
            f"({seconds:.0f} s, not counted)"
        )
        base = ["--model", f"hf:{model_dir}", "--max-new-tokens", str(args.steps)]
        files = [("optimum", optimum)]
        rows: list[tuple[str, int, float, int]] = []
        if not args.skip_own:
            own = work / "own" / "model.onnx"
            code, wall, peak, _ = run([*base, "--export-path", str(own)], work / "export.json")
            rows.append(("own: export + plain", code, wall, peak))
            files.append(("own", own))
        generation_seen = False
        for name, onnx_file in files:
            given = [*base, "--onnx", str(onnx_file)]
            for label, extra in (
                ("plain", ["--no-generation"]),
                ("--layers", ["--layers", "--no-generation"]),
                # the float64 copy of a 0.5B model is 5.5 GiB, over the 4 GiB default budget
                ("--noise-floor", ["--noise-floor", "--no-generation", "--max-memory", "8G"]),
                ("+ generation", []),
            ):
                code, wall, peak, data = run([*given, *extra], work / f"{name}{label}.json")
                rows.append((f"{name}: {label}", code, wall, peak))
                prompts = (data.get("generation") or {}).get("prompts")
                generation_seen |= bool(prompts)
                if prompts:
                    same = sum(p.get("first_divergence") is None for p in prompts)
                    seconds = (data.get("timings") or {}).get("generation", 0.0)
                    print(
                        f"  {name} generation: {seconds:.1f} s of the run; {same} of "
                        f"{len(prompts)} prompts give torch's tokens"
                    )
                layers = data.get("layers") or {}
                if layers:
                    first = layers.get("first_divergence")
                    print(
                        f"  {name} --layers: {layers.get('matched')} values matched "
                        f"({layers.get('matching')}), {len(layers.get('values') or [])} "
                        f"compared, first divergence "
                        f"{first and (first['input_set'], first['torch_module'])}"
                    )
        print(f"\n{'run':28s} {'exit':>4s} {'wall s':>8s} {'peak GB':>8s} {'x fp32':>7s}")
        plain: dict[str, tuple[float, int]] = {}
        for label, code, wall, peak in rows:
            name = label.split(":")[0]
            if label.endswith(": plain"):
                plain[name] = (wall, peak)
            print(f"{label:28s} {code:4d} {wall:8.1f} {peak / GB:8.2f} {peak / size:7.2f}")
        print()
        for name, (wall, peak) in plain.items():
            print(f"{name}: plain peak {peak / size:.2f}x the float32 size (goal <= 2.5x)")
            for label, _code, w, p in rows:
                if label.startswith((f"{name}: --", f"{name}: +")):
                    print(
                        f"{name}: {label.split(': ')[1]:14s} {w / wall:5.2f}x plain time, "
                        f"{(p - peak) / GB:+.2f} GB over plain"
                    )
        print(
            "goals: --layers <= plain + 1.5 GB and <= 5x plain time; + generation <= 1.5x plain "
            "(plain and the others with --no-generation)"
        )
        if not generation_seen:
            print(
                "generation: not measured (no generation.prompts in the reports: free-running "
                "generation is not on this branch)"
            )


if __name__ == "__main__":
    main()
