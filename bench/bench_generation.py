"""Benchmark: free-running generation's cost against the plain hf: run.

Not a test. It builds a Llama from a config with random weights (sizes from the flags;
the default is ~28M parameters), exports it with Optimum (text-generation-with-past), and
validates it in this process with `HfOptions(generation=False)` (the CLI's `--no-generation`)
and with generation on (the default), alternately, `--repeat` times each. It prints the best
wall time of each, their ratio, and generation's own time (`run.timings["generation"]`)
beside the step comparison's ONNX Runtime time: generation makes as many ONNX Runtime calls
as the steps, on its own KV cache. On a shared machine compare the generation's own time with
the plain run's; the wall times move with the load.

    python bench/bench_generation.py
    python bench/bench_generation.py --hidden 896 --layers 24 --vocab 151936 --new-tokens 8
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ("hello world", "continue : it rains , what should i do ?")


def build(folder: Path, args: argparse.Namespace) -> tuple[str, Path]:
    import torch
    import transformers
    from optimum.exporters.onnx import main_export

    sys.path.insert(0, str(ROOT))
    from tests.helpers.hf_models import SPECIAL, save_model

    config = transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 11 // 4,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 64),
        num_key_value_heads=max(1, args.hidden // 128),
        max_position_embeddings=256,
        **SPECIAL,
    )
    torch.manual_seed(0)
    model_dir = save_model(transformers.LlamaForCausalLM(config), folder / "model")
    main_export(model_dir, output=folder / "onnx", task="text-generation-with-past",
                do_validation=False)  # fmt: skip
    return model_dir, folder / "onnx" / "model.onnx"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from parity.pipeline import RunConfig, run_validation
    from parity.run.hf_options import HfOptions

    with tempfile.TemporaryDirectory(prefix="parity-bench-gen-") as tmp:
        model_dir, onnx = build(Path(tmp), args)
        best: dict[bool, float] = {}
        own: list[float] = []
        steps: list[float] = []
        for _ in range(args.repeat):
            for generation in (False, True):
                options = HfOptions(prompts=PROMPTS, max_new_tokens=args.new_tokens,
                                    generation=generation)  # fmt: skip
                t0 = time.perf_counter()
                run = run_validation(RunConfig(model=f"hf:{model_dir}", onnx=str(onnx), hf=options))
                wall = time.perf_counter() - t0
                best[generation] = min(best.get(generation, wall), wall)
                if generation:
                    own.append(run.timings["generation"])
                    steps.append(run.timings["onnxruntime"])
    plain, with_generation = best[False], best[True]
    alone = min(own)
    print(f"plain run (no generation): {plain:.2f} s   with generation: {with_generation:.2f} s")
    print(f"ratio {with_generation / plain:.2f}x   generation alone: {alone:.2f} s")
    print(f"({alone / plain:.1%} of the plain run; the steps' ONNX Runtime {min(steps):.2f} s)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
