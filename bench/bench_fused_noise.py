"""--noise-floor on a fused float16 BERT against a plain run: wall time and peak memory.

    python bench/bench_fused_noise.py                    # BERT 6 x 384, every weight random
    python bench/bench_fused_noise.py --layers 2 --hidden 32 --heads 2
    python bench/bench_fused_noise.py --hidden 768 --heads 12 --vocab 30522   # BERT-base wide

Builds the model, its Optimum export, ONNX Runtime's fused file and its float16 copy
(keep_io_types) as bench/bench_fused.py does, then runs `parity validate` on the float16
file, each in its own process (wall time and peak RSS from /usr/bin/time): plain (neither
--noise-floor nor the intended reference: --no-noise-floor --no-quantized-reference), the
intended reference alone (torch with the file's float16 weights against its wide twin, on by
default), --noise-floor alone, and both; for the hf: run and for the same model as a torch
module (FILE.py:CALLABLE, generated input sets). Prints each against plain and what the
findings said.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODULE = """
import torch, transformers
class Last(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = transformers.BertModel.from_pretrained({path!r}).eval()
    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids).last_hidden_state
def make():
    return Last()
"""


def main() -> None:
    from bench.bench_fused import build, timed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=96)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parity-bench-fused-noise-") as tmp:
        root = Path(tmp)
        directory, _, _ = build(root, a.layers, a.hidden, a.heads, a.vocab)
        fp16 = root / "fp16.onnx"
        module = root / "bert_module.py"
        module.write_text(MODULE.format(path=directory))
        ranges = ["--int-range", f"input_ids=0:{a.vocab}", "--int-range", "token_type_ids=0:2"]
        sides = {
            "hf:": ["--model", f"hf:{directory}"],
            "torch module": ["--model", f"{module}:make", *ranges],
        }
        bare = ["--no-noise-floor", "--no-quantized-reference"]
        variants = {
            "the intended reference alone (the default)": ["--no-noise-floor"],
            "--noise-floor": ["--noise-floor", "--no-quantized-reference"],
            "--noise-floor and the intended reference": ["--noise-floor"],
        }
        for side, base in sides.items():
            plain = timed([*base, "--onnx", str(fp16), *bare], root / "p.txt")
            print(f"{side} plain (neither): {plain[0]:.1f} s, peak {plain[1]:.2f} GB")
            for words, extra in variants.items():
                report = root / "r.json"
                args = [*base, "--onnx", str(fp16), *extra, "--json", str(report)]
                wall, peak = timed(args, root / "n.txt")
                kinds = [f["kind"] for f in json.loads(report.read_text())["findings"]]
                print(
                    f"{side} {words}: {wall:.1f} s ({wall / plain[0]:.2f}x), peak "
                    f"{peak:.2f} GB ({peak / plain[1]:.2f}x); findings {kinds}"
                )


if __name__ == "__main__":
    main()
