"""--layers on a fused BERT: ONNX Runtime's transformers optimizer's file (EmbedLayerNorm,
Attention, SkipLayerNorm, BiasGelu) against a plain run, and what it names.

    python bench/bench_fused.py                    # BERT 6 x 384, every weight random
    python bench/bench_fused.py --layers 2 --hidden 32 --heads 2

Builds the model from a config (random weights at std 1/sqrt(hidden), biases and LayerNorm
weights random too), exports it
with Optimum (feature-extraction), fuses it (`optimize_model(model_type="bert", opt_level=1)`),
converts it to float16 (keep_io_types), plants one column of layer L-2's intermediate weight
x1.05 in a copy, then times
`parity validate --model hf:DIR --onnx FILE` with and without --layers, each in its own process
(wall time and peak RSS from /usr/bin/time), and prints what --layers concluded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(
    root: Path, layers: int, hidden: int, heads: int, vocab: int = 96
) -> tuple[str, Path, Path]:
    import transformers

    from tests.helpers.hf_tasks import optimum_export, save_text_model
    from tests.test_layers_fused import _optimized, _randomized, _scaled_column

    config = transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=128,
    )
    # weights at std 1/sqrt(hidden): larger ones make a deep model chaotic (float32 noise
    # grows layer by layer through saturated softmaxes and drowns any planted bug)
    model = _randomized(transformers.BertModel(config), weight_std=hidden**-0.5)
    directory = save_text_model(model, root / "bert")
    raw = optimum_export(directory, root / "raw", "feature-extraction")
    fused = root / "fused.onnx"
    _optimized(raw, fused, "bert", heads, hidden)
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    fp16 = convert_float_to_float16(onnx.load(str(fused)), keep_io_types=True)
    onnx.save(fp16, str(root / "fp16.onnx"))
    bug = root / "bug.onnx"
    _scaled_column(fused, bug, f"/encoder/layer.{max(layers - 2, 0)}/intermediate/dense/MatMul")
    return directory, fused, bug


def timed(args: list[str], out: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS GB) of one `parity validate` in its own process."""
    cmd = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "parity", "validate", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall, kb = done.stderr.strip().splitlines()[-1].split()
    out.write_text(done.stdout)
    return float(wall), int(kb) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parity-bench-fused-") as tmp:
        root = Path(tmp)
        directory, fused, bug = build(root, a.layers, a.hidden, a.heads)
        base = ["--model", f"hf:{directory}"]
        plain = timed([*base, "--onnx", str(fused)], root / "plain.txt")
        report = root / "layers.json"
        layers = timed(
            [*base, "--onnx", str(fused), "--layers", "--json", str(report)], root / "l.txt"
        )
        clean = json.loads(report.read_text())["layers"]
        timed([*base, "--onnx", str(bug), "--layers", "--json", str(report)], root / "b.txt")
        planted = json.loads(report.read_text())["layers"]
        fp16 = root / "fp16.onnx"
        timed([*base, "--onnx", str(fp16), "--layers", "--json", str(report)], root / "f.txt")
        half = json.loads(report.read_text())["layers"]
    first = planted["first_divergence"] or {}
    print(f"BERT {a.layers} x {a.hidden}, fused by ONNX Runtime's optimizer")
    print(f"plain      {plain[0]:7.2f} s  peak RSS {plain[1]:.2f} GB")
    print(
        f"--layers   {layers[0]:7.2f} s  peak RSS {layers[1]:.2f} GB  ({layers[0] / plain[0]:.1f}x)"
    )
    statuses = [v["status"] for v in clean["values"]]
    print(
        f"clean: {clean['matched']} values, first divergence {clean['first_divergence']}, "
        f"{statuses.count('not_comparable')} not comparable (fused)"
    )
    half_first = half["first_divergence"] or {}
    print(
        f"float16: first divergence {half_first.get('torch_module')!r} "
        f"({half_first.get('onnx_op')}), confirmation {half_first.get('confirmation')}"
        if half_first
        else "float16: no value diverges"
    )
    print(
        f"planted: first divergence at {first.get('torch_module')!r} "
        f"({first.get('onnx_op')}), confirmation {first.get('confirmation')}"
    )


if __name__ == "__main__":
    main()
