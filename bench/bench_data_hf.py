"""Benchmark: `parity validate --model hf:DIR --data texts.jsonl` against a hand loop, and its
peak memory by data size.

Not a test. A BERT sentence classifier (2 layers, hidden 64, 3 labels, random weights) saved
with a WordLevel tokenizer and exported by Optimum, and a `.jsonl` of N texts of 2 to 60
words. Each size runs in a fresh process, twice: the hand loop (batches of 64 texts through
the tokenizer, padded to each batch's longest, torch and ONNX Runtime on each, the classes
compared: what a user writes by hand) and `parity validate --data` in-process. It prints
samples/s of each, their ratio, and each process's peak resident memory (VmHWM): flat
across sizes means memory of a batch, never of the data set.

    python bench/bench_data_hf.py                    # 500 and 4000 texts
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

BATCH = 64


def prepare(folder: Path, sizes: list[int]) -> tuple[Path, Path, dict[int, Path]]:
    import numpy as np
    import torch
    import transformers

    from tests.helpers.hf_models import WORDS
    from tests.helpers.hf_tasks import BERT, optimum_export, save_text_model

    torch.manual_seed(0)
    shape = {**BERT, "hidden_size": 64, "intermediate_size": 128}
    config = transformers.BertConfig(**shape, num_labels=3)
    directory = Path(save_text_model(transformers.BertForSequenceClassification(config),
                                     folder / "model"))  # fmt: skip
    onnx = optimum_export(str(directory), folder / "onnx", "text-classification")
    rng = np.random.default_rng(0)
    files = {}
    for n in sizes:
        path = folder / f"texts{n}.jsonl"
        with open(path, "w") as f:
            for _ in range(n):
                words = rng.choice(WORDS, size=int(rng.integers(2, 61)))
                f.write(json.dumps({"text": " ".join(words)}) + "\n")
        files[n] = path
    return directory, onnx, files


def hand_loop(directory: str, onnx: str, data: str) -> dict:
    import onnxruntime as ort
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    t0 = time.perf_counter()
    same = n = 0
    with open(data) as f:
        texts = [json.loads(line)["text"] for line in f]  # a list of texts is what users hold
    for start in range(0, len(texts), BATCH):
        enc = tokenizer(texts[start : start + BATCH], padding=True, truncation=True,
                        max_length=64, return_tensors="np")  # fmt: skip
        feeds = {k: v for k, v in enc.items() if k in names}
        with torch.inference_mode():
            ref = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits.numpy()
        out = session.run(None, feeds)[0]
        same += int((ref.argmax(1) == out.argmax(1)).sum())
        n += len(ref)
    return {"seconds": time.perf_counter() - t0, "samples": n, "same": same}


def parity_run(directory: str, onnx: str, data: str) -> dict:
    from parity.cli import main

    report = Path(data).with_suffix(".json")
    t0 = time.perf_counter()
    main(["validate", "--model", f"hf:{directory}", "--onnx", onnx, "--data", data,
          "--batch-size", str(BATCH), "--json", str(report)])  # fmt: skip
    seconds = time.perf_counter() - t0
    raw = json.loads(report.read_text())
    out = raw["data"]["outputs"][0]
    timings = raw["timings"]
    loop = sum(timings.get(k, 0.0) for k in ("inputs", "torch", "onnxruntime", "compare"))
    return {"seconds": seconds, "samples": out["samples"], "same": out["agree"],
            "loop": loop, "timings": timings}  # fmt: skip


def child(kind: str, directory: str, onnx: str, data: str) -> None:
    result = (hand_loop if kind == "hand" else parity_run)(directory, onnx, data)
    result["peak_mb"] = own_peak_bytes() / 2**20
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 4000])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-data-hf-") as tmp:
        directory, onnx, files = prepare(Path(tmp), args.sizes)
        rows = []
        for n, data in files.items():
            found = {}
            for kind in ("hand", "parity"):
                env = {**os.environ, "PARITY_NO_SUPERVISE": "1"}
                out = subprocess.run(
                    [sys.executable, __file__, "--child", kind, str(directory), str(onnx),
                     str(data)],
                    capture_output=True, text=True, env=env, check=True,
                )  # fmt: skip
                found[kind] = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append((n, found["hand"], found["parity"]))
        print(f"{'samples':>8} {'hand s/s':>9} {'parity s/s':>11} {'ratio':>6} "
              f"{'whole run s/s':>14} {'hand MB':>8} {'parity MB':>10} agree")  # fmt: skip
        for n, hand, ours in rows:
            h = hand["samples"] / hand["seconds"]
            p = ours["samples"] / ours["loop"]  # read + tokenize, torch, ORT, compare
            whole = ours["samples"] / ours["seconds"]
            print(f"{n:>8} {h:>9.0f} {p:>11.0f} {h / p:>6.2f} {whole:>14.0f} "
                  f"{hand['peak_mb']:>8.0f} {ours['peak_mb']:>10.0f} "
                  f"{ours['same']}/{ours['samples']}")  # fmt: skip
            print("         parity timings:", {k: round(v, 2) for k, v in ours["timings"].items()})


if __name__ == "__main__":
    main()
