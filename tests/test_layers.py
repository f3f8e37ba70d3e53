"""Layer localisation on real exports (dynamo and legacy) with bugs planted in known layers.

A bug edited into one ONNX node must be named as the first divergence, with its module
path; the clean export must flag nothing; the CLI keeps the outputs' exit code.
"""

from __future__ import annotations

import json
import textwrap
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from parity.cli import main
from parity.layers.extra_outputs import plan_batches
from parity.layers.localise import localise
from parity.layers.stats import value_stats
from parity.load.onnx_model import load_onnx
from parity.load.torch_model import load_torch_model
from parity.run.inputs import make_input_sets
from tests.helpers.plant_bug import plant

NET_SOURCE = textwrap.dedent(
    '''
    """A small transformer-like MLP stack: x [batch, seq, 8] -> [batch, seq, 4]."""
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(16, 32)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(32, 16)
            self.norm = nn.LayerNorm(16)

        def forward(self, x):
            return self.norm(x + self.fc2(self.act(self.fc1(x))))


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(8, 16)
            self.blocks = nn.ModuleList([Block(), Block(), Block()])
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            h = self.inp(x)
            for block in self.blocks:
                h = block(h)
            return torch.softmax(self.head(h), dim=-1)


    def make():
        torch.manual_seed(0)
        net = Net()
        with torch.no_grad():  # LayerNorm affine parameters as after training
            for block in net.blocks:
                block.norm.weight.uniform_(0.5, 1.5)
                block.norm.bias.uniform_(-0.5, 0.5)
        return net.eval()
    '''
)


@dataclass(frozen=True)
class NetExports:
    factory: str  # FILE.py:CALLABLE
    weights: Path
    pt2: Path
    dynamo: Path
    legacy: Path


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> NetExports:
    root = tmp_path_factory.mktemp("layers")
    source = root / "layers_net.py"
    source.write_text(NET_SOURCE)
    factory = f"{source}:make"
    model = load_torch_model(factory).module
    weights = root / "net.pt"
    torch.save(model.state_dict(), weights)
    x = torch.randn(2, 6, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # static shapes: Parity's restricted .pt2 reader refuses some symbolic expressions
        program = torch.export.export(model, (x,))
        torch.export.save(program, root / "net.pt2")
        torch.onnx.export(program, dynamo=True, verbose=False).save(str(root / "dyn.onnx"))
        torch.onnx.export(
            model,
            (x,),
            str(root / "leg.onnx"),
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch", 1: "seq"}},
        )
    return NetExports(factory, weights, root / "net.pt2", root / "dyn.onnx", root / "leg.onnx")


def _node(path: Path, op: str, scope: str) -> str:
    """The name of the `op` node made inside module `scope` (either exporter's spelling)."""
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        legacy = "/" + scope.replace(".", "/").replace("blocks/", "blocks.") + "/"
        if node.op_type == op and (
            f"'{scope}'" in meta.get("pkg.torch.onnx.name_scopes", "") or legacy in node.name
        ):
            return node.name
    raise AssertionError(f"no {op} node in {scope} of {path}")


def _localise(spec: str, onnx_path: Path, weights: Path | None = None, **kw):
    model = load_torch_model(spec, weights=weights)
    signature = load_onnx(onnx_path).signature
    sets = make_input_sets(signature, dims={}, n_sets=2, seed=0)
    return localise(model, onnx_path, sets, signature, **kw)


@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_clean_export_flags_nothing(net: NetExports, exporter: str) -> None:
    if exporter == "dynamo":
        result = _localise(str(net.pt2), net.dynamo)
        assert result.matching == "fx names"
    else:
        result = _localise(net.factory, net.legacy, net.weights)
        assert result.matching == "module boundaries"
    assert result.first_divergence is None
    assert result.matched >= 10
    assert {v.status for v in result.values} == {"pass"}
    assert {v.input_set for v in result.values} == {0, 1}
    assert any("blocks.2.norm" == v.torch_module for v in result.values)


BUGS = [
    ("LayerNormalization", "blocks.1.norm", "scale", 0.02),
    ("LayerNormalization", "blocks.2.norm", "attribute", ("epsilon", 0.1)),
    ("Add", "blocks.0.fc2", "bias", 0.05),
    ("Gelu", "blocks.1.act", "op", "Relu"),
]


@pytest.mark.parametrize(("op", "scope", "kind", "value"), BUGS)
@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_planted_bug_is_named(
    net: NetExports, tmp_path: Path, exporter: str, op: str, scope: str, kind: str, value
) -> None:
    src = net.dynamo if exporter == "dynamo" else net.legacy
    if op == "Add" and exporter == "dynamo":
        op = "Add"  # linear -> MatMul + Add in both exporters' output
    buggy = tmp_path / "bug.onnx"
    planted = plant(src, buggy, _node(src, op, scope), kind, value)
    if exporter == "dynamo":
        result = _localise(str(net.pt2), buggy)
    else:
        result = _localise(net.factory, buggy, net.weights)
    first = result.first_divergence
    assert first is not None, result.notes
    assert first.torch_module == scope
    assert first.onnx_value == planted
    assert first.status == "diverges"
    born = result.confirmation_of(first)  # re-run alone on torch's inputs: it still errs
    assert born is not None and born.outcome == "born", result.confirmations
    assert born.max_abs is not None and born.max_abs * 10 >= first.max_abs
    # the error is born there: every earlier value passes, on every input set
    assert all(v.status == "pass" for v in result.values if v.order < first.order)
    assert result.kept_value(first.order, first.input_set) is not None


def test_batches_under_a_tiny_budget_give_the_same_numbers(net: NetExports, tmp_path) -> None:
    buggy = tmp_path / "bug.onnx"
    plant(
        net.dynamo, buggy, _node(net.dynamo, "LayerNormalization", "blocks.1.norm"), "scale", 0.02
    )
    # Unoptimised, each node runs its own kernel whichever values a batch marks as outputs:
    # the numbers are the same bit for bit. (Optimised, ONNX Runtime may fuse across a value
    # one batch leaves unmarked, and whether a fused kernel rounds differently depends on the
    # CPU, FMA or not: equality there would rest on the machine. The default level's batches
    # are run by the other tests here.)
    one = _localise(str(net.pt2), buggy, opt_level="disable")
    many = _localise(str(net.pt2), buggy, opt_level="disable", memory_mb=1, keep_mb=0)
    assert [v.error_ratio for v in one.values] == [v.error_ratio for v in many.values]
    assert one.first_divergence == many.first_divergence
    assert many.kept == ()
    assert plan_batches(["a", "b", "c"], {"a": 3, "b": 3, "c": 9}, 6) == [("a", "b"), ("c",)]


def test_cli_layers_block_and_exit_code(net: NetExports, tmp_path: Path, capsys) -> None:
    buggy = tmp_path / "bug.onnx"
    node = _node(net.legacy, "LayerNormalization", "blocks.1.norm")
    plant(net.legacy, buggy, node, "scale", 0.02)
    report = tmp_path / "r.json"
    args = ["validate", "--model", net.factory, "--weights", str(net.weights), "--dim", "batch=2"]
    code = main([*args, "--dim", "seq=6", "--onnx", str(buggy), "--layers", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 1  # the outputs' verdict
    data = json.loads(report.read_text())
    first = data["layers"]["first_divergence"]
    assert first["torch_module"] == "blocks.1.norm" and first["onnx_node"] == node
    assert data["layers"]["matched"] == len({v["order"] for v in data["layers"]["values"]})
    assert "diverges first at 'blocks.1.norm'" in out
    code = main([*args, "--dim", "seq=6", "--onnx", str(net.legacy), "--layers"])
    assert code == 0
    assert "no value diverges" in capsys.readouterr().out


def test_what_cannot_be_compared_is_said(net: NetExports, tmp_path: Path, capsys) -> None:
    ref = tmp_path / "ref.npz"
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.ones((2, 6, 8), np.float32))
    base = ["validate", "--onnx", str(net.legacy), "--inputs", str(feeds)]
    main(
        [*base, "--model", net.factory, "--weights", str(net.weights), "--save-reference", str(ref)]
    )
    capsys.readouterr()
    report = tmp_path / "r.json"
    assert main([*base, "--reference", str(ref), "--layers", "--json", str(report)]) == 0
    layers = json.loads(report.read_text())["layers"]
    assert layers["matched"] == 0 and "torch model" in layers["notes"][0]
    # a .pt2 against a legacy export: no FX names in the file, no modules to hook
    result = _localise(str(net.pt2), net.legacy)
    assert result.matched == 0 and any("FILE.py:CALLABLE" in n for n in result.notes)


def test_stats_ignore_mask_sentinels_and_count_one_sided_nan() -> None:
    ref = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    ref[:, 32:] = np.finfo(np.float32).min  # an additive attention mask
    onnx_ = ref.copy()
    onnx_[:, :32] *= np.float32(1 + 1e-7)
    onnx_[0, 0] = np.nan
    stats = value_stats(ref, onnx_)
    assert stats.n_nonfinite_mismatch == 1
    assert stats.error_ratio is not None and stats.error_ratio < 1e-6
    assert value_stats(ref, ref[:, :3]).shape_ok is False


def test_a_torch_pass_keeps_nothing_its_callback_holds(net: NetExports) -> None:
    """The callback holds a batch's ONNX Runtime arrays: once a pass is over, nothing may keep
    it alive until the cyclic GC runs (that was +1 GB per batch on a 3 GB model)."""
    import gc
    import weakref

    from parity.layers.matching import make_plan
    from parity.layers.onnx_graph import read_graph

    model = load_torch_model(str(net.pt2))
    signature = load_onnx(net.dynamo).signature
    input_set = make_input_sets(signature, dims={}, n_sets=1, seed=0)[0]
    capture = make_plan(model, read_graph(net.dynamo), input_set, signature).capture

    class Sink:
        seen = 0

        def __call__(self, _name, _value) -> None:
            Sink.seen += 1

    gc.collect()
    gc.disable()
    try:
        sink = Sink()
        alive = weakref.ref(sink)
        capture.run(input_set, capture.nodes.keys(), sink)
        del sink
        assert Sink.seen > 10
        assert alive() is None
    finally:
        gc.enable()


def test_layers_lets_the_runs_own_session_go_before_it_opens_its_own(net: NetExports) -> None:
    """--layers opens a session with extra outputs; the plain run's is let go first (held by
    the analyses' view of the candidates, a 0.5B LLM's weights were twice in memory: +2.4 GB
    over plain, bench/bench_llm.py). Followed by a weak reference to each session the run
    opened, when the layers analysis starts reading the graph."""
    import gc
    import weakref

    from parity.load.onnx_model import make_session
    from parity.pipeline import run_validation
    from parity.run.config import RunConfig, default_loaders

    class Session:  # ONNX Runtime's session, wrapped so that a weak reference can follow it
        def __init__(self, real) -> None:
            self.real = real

        def __getattr__(self, name: str):
            return getattr(self.real, name)

    opened: list[weakref.ref] = []

    def make(model, **kwargs):
        session = Session(make_session(model, **kwargs))
        opened.append(weakref.ref(session))
        return session

    alive: list[int] = []  # sessions the run opened still held when the layers start

    def progress(event) -> None:
        if event.message.startswith("reading the ONNX graph"):
            gc.collect()
            alive.append(sum(ref() is not None for ref in opened))

    config = RunConfig(
        model=net.factory, weights=str(net.weights), onnx=(str(net.legacy),), layers=True
    )
    loaders = replace(default_loaders(), make_session=make)
    run = run_validation(config, progress=progress, loaders=loaders)
    assert len(opened) == 1 and run.layers is not None and run.layers.matched >= 10
    assert alive == [0]
