"""What the frozen-size search costs on plain value failures (issue 62): its time against the
run's own torch time, on files whose failure no frozen size explains.

    python bench/bench_frozen_search.py                 # every case, best of 2
    python bench/bench_frozen_search.py --cases cnn_int8 seg512 --repeat 3
    python bench/bench_frozen_search.py --layers 6 --hidden 384 --heads 12   # a bigger BERT
    python bench/bench_frozen_search.py --unbounded     # the search without its budget (before)

Cases (each a real export with dynamic axes, validated by `parity.validate` on generated
input sets, as `parity validate --model FILE.py:CALLABLE` runs them):

- cnn_int8: a small CNN, legacy export, ONNX Runtime's quantize_dynamic (int8 weights);
- seg512: a small FCN-like segmentation net at 512 x 512 with one decoder bias nudged by 0.05;
- bert_fused: a BERT exported by Optimum, fused by ONNX Runtime's transformer optimizer, one
  intermediate column scaled (bench/bench_fused.py's planted bug: values off by less than
  1 % of their scale, not searched);
- bert_gross / bert_gross_noise: the same fused file with its last LayerNorm bias moved by
  1.0 (values off by whole units: searched), without and with --noise-floor.

Prints per case: the verdict, `timings.frozen` (0 where the search did not run),
`timings.torch` and their ratio, and the search's note (what it ran and skipped). Not a test:
timings swing with the machine's load; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the BERT wrapper the fused-noise bench writes: its last hidden state from a saved folder
from bench.bench_fused_noise import MODULE as BERT  # noqa: E402

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2),
                nn.ReLU(), nn.Conv2d(64, 64, 3, stride=2), nn.ReLU(),
            )
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.body(x).mean((2, 3)))


    class Seg(nn.Module):
        '''FCN-like: a strided encoder, a 1x1 classifier, bilinear upsampling to the input.'''

        def __init__(self, classes=8):
            super().__init__()
            chans = [3, 16, 32, 64, 64]
            self.encoder = nn.Sequential(*[
                nn.Sequential(nn.Conv2d(a, b, 3, stride=2, padding=1), nn.BatchNorm2d(b),
                              nn.ReLU())
                for a, b in zip(chans, chans[1:])
            ])
            self.classifier = nn.Conv2d(64, classes, 1)

        def forward(self, x):
            y = self.classifier(self.encoder(x))
            return nn.functional.interpolate(y, size=x.shape[-2:], mode="bilinear",
                                             align_corners=False)


    def _seeded(cls):
        torch.manual_seed(0)
        return cls().eval()


    def cnn():
        return _seeded(Cnn)


    def seg():
        return _seeded(Seg)
    """
)

CASES = ("cnn_int8", "seg512", "bert_fused", "bert_gross", "bert_gross_noise")


def _export(model, shape: tuple[int, ...], path: Path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.randn(*shape),), str(path), dynamo=False, input_names=["x"],
            output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        )  # fmt: skip


def _nudged(path: Path, name: str, delta: float) -> Path:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    for init in model.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) + delta, name))
    out = path.with_name(path.stem + "_bug.onnx")
    onnx.save(model, str(out))
    return out


def _fused(root: Path) -> Path:
    return root / "fused.onnx"


def _last_layer_norm_bias(path: Path) -> str:
    """The last LayerNorm bias of the fused file (a SkipLayerNormalization's beta)."""
    import onnx

    names = [i.name for i in onnx.load(str(path)).graph.initializer]
    return [n for n in names if "LayerNorm" in n and n.endswith("bias")][-1]


def build(root: Path, cases: list[str], args: argparse.Namespace) -> dict[str, tuple]:
    """case -> (model spec, onnx path, validate flags)."""
    import importlib.util

    (root / "models.py").write_text(MODELS)
    spec = importlib.util.spec_from_file_location("bench_frozen_models", root / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built: dict[str, tuple] = {}
    if "cnn_int8" in cases:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        fp32 = root / "cnn.onnx"
        _export(module.cnn(), (1, 3, 64, 64), fp32)
        int8 = root / "cnn_int8.onnx"
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
        built["cnn_int8"] = (f"{root / 'models.py'}:cnn", int8, [])
    if "seg512" in cases:
        fp32 = root / "seg.onnx"
        _export(module.seg(), (1, 3, 512, 512), fp32)
        bug = _nudged(fp32, "classifier.bias", 0.05)
        dims = ["--dim", "height=512", "--dim", "width=512"]
        built["seg512"] = (f"{root / 'models.py'}:seg", bug, dims)
    if any(c.startswith("bert") for c in cases):
        from bench.bench_fused import build as build_bert

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            directory, _, bug = build_bert(root, args.layers, args.hidden, args.heads, args.vocab)
        (root / "bert_module.py").write_text(BERT.format(path=directory))
        ranges = ["--int-range", f"input_ids=0:{args.vocab}", "--int-range", "token_type_ids=0:2"]
        spec_ = f"{root / 'bert_module.py'}:make"
        built["bert_fused"] = (spec_, bug, ranges)
        gross = _nudged(_fused(root), _last_layer_norm_bias(_fused(root)), 1.0)
        built["bert_gross"] = (spec_, gross, ranges)
        built["bert_gross_noise"] = (spec_, gross, [*ranges, "--noise-floor"])
    return {c: built[c] for c in cases}


def measure(model: str, onnx: Path, flags: list[str]) -> dict:
    """One `parity validate` (in this process, as the CLI runs it): its JSON's figures."""
    import json

    from parity.cli import main as cli

    out = onnx.with_suffix(".json")
    args = ["validate", "--model", model, "--onnx", str(onnx), "--json", str(out), *flags]
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli(args)
    report = json.loads(out.read_text())
    timings = report.get("timings", {})
    note = next((a["text"] for a in report.get("analyses", []) if a["analysis"] == "frozen"), "")
    return {
        "verdict": report.get("verdict", "?"),
        "frozen": timings.get("frozen", 0.0),
        "torch": timings.get("torch", 0.0),
        "named": len(report.get("frozen", [])),
        "note": note,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--repeat", type=int, default=2)  # the first imports and compiles
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument(
        "--unbounded", action="store_true",
        help="no budget for failures of values only (the search as before issue 62)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.unbounded:
        import parity.run.frozen_search as search

        search.search_allowance = lambda *_: None  # type: ignore[assignment]
    with tempfile.TemporaryDirectory(prefix="parity-bench-frozen-") as tmp:
        cases = build(Path(tmp), args.cases, args)
        print(f"{'case':18} {'verdict':8} {'search s':>8} {'torch s':>8} {'search/torch':>12}"
              "  note")  # fmt: skip
        for name, (model, onnx, options) in cases.items():
            runs = [measure(model, onnx, options) for _ in range(args.repeat)]
            got = min(runs, key=lambda r: r["frozen"])
            ratio = got["frozen"] / got["torch"] if got["torch"] else float("nan")
            print(
                f"{name:18} {got['verdict']:8} {got['frozen']:8.2f} "
                f"{got['torch']:8.2f} {ratio:12.2f}  {got['note'] or '-'}"
            )


if __name__ == "__main__":
    main()
