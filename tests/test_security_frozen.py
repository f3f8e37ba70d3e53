"""The frozen-at-export search is bounded like a run (issue 54, causes 1-3).

A size recovered from a file is never run past --max-memory (a divisor edited to 1,000,000
is skipped and said, torch never runs at 1000 x 1000); thousands of distinct Div / Mul
constants end within the run's --timeout (the scoring costs the explanations, not the
elements); the file is re-read only through the safe reader (a FIFO or /dev/zero swapped in
after the run read it is said in one line, never a hang).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import textwrap
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import parity
from parity.cli import main
from tests.helpers import frozen_models

N_CONSTANTS = 3000

LOGGED = textwrap.dedent(
    """
    import os
    import time

    import torch
    from torch import nn

    LOG = {log!r}
    SLEEPY = {sleepy!r}  # once it exists, Pool sleeps while traced (a re-trace, not an export)
    CONSTANTS = range(2, 2 + {n})


    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            if torch.jit.is_tracing() and os.path.exists(SLEEPY):
                time.sleep(20)
            with open(LOG, "a") as fh:  # every size torch is run at
                fh.write(f"{{x.shape[2]}} {{x.shape[3]}}\\n")
            y = self.conv(x)
            h, w = y.shape[2], y.shape[3]
            return self.fc(y.sum((2, 3)) / float(h * w))


    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 1, 3, padding=1)

        def forward(self, x):
            with open(LOG, "a") as fh:
                fh.write(f"{{x.shape[2]}} {{x.shape[3]}}\\n")
            y = self.conv(x)
            h, w = y.shape[2], y.shape[3]
            return y.reshape(y.shape[0], int(h * w)).mean(1, keepdim=True)


    class Idle(nn.Module):
        def forward(self, x):
            for c in CONSTANTS:
                x = x / float(c) * float(c)
            return x


    def pool():
        torch.manual_seed(0)
        return Pool().eval()


    def flat():
        torch.manual_seed(0)
        return Flat().eval()


    def idle():
        return Idle().eval()
    """
)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """models.py (a pool and a flatten that log their sizes, the idle Div / Mul chain), the
    pool's legacy export, and the flatten's with its frozen h x w edited to 1,000,000."""
    root = tmp_path_factory.mktemp("security_frozen")
    (root / "models.py").write_text(
        LOGGED.format(log=str(root / "sizes.log"), sleepy=str(root / "sleepy"), n=N_CONSTANTS)
    )
    with contextlib.redirect_stdout(io.StringIO()):
        _export_pool(root)
    return root


def _export_pool(root: Path) -> None:
    import warnings

    import torch

    for name in ("pool", "flat"):
        model = frozen_models.load(root, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (torch.randn(*frozen_models.EXPORT_SHAPE),), str(root / f"{name}.onnx"),
                dynamo=False, input_names=["x"], output_names=["y"],
                dynamic_axes=frozen_models.DYNAMIC_AXES,
            )  # fmt: skip
    proto = onnx.load(str(root / "flat.onnx"))
    edited = 0
    for node in proto.graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value":
                value = numpy_helper.to_array(attr.t)
                if value.size == 1 and float(value.reshape(-1)[0]) == 3072.0:
                    crafted = np.full(value.shape, 1_000_000, value.dtype)
                    attr.t.CopyFrom(numpy_helper.from_array(crafted))
                    edited += 1
    assert edited == 1
    onnx.save(proto, str(root / "crafted.onnx"))


def validate(root: Path, name: str, onnx_path: Path, *flags: str) -> tuple[int, dict]:
    report = root / f"{onnx_path.stem}.{name}.json"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(
            ["validate", "--model", f"{root / 'models.py'}:{name}", "--onnx", str(onnx_path)]
            # the search's own finding is said where no bug or rounding finding explains
            # the run: no default noise floor here, which would give one (issue 53)
            + ["--json", str(report), "--no-noise-floor", *flags]
        )
    return code, json.loads(report.read_text()) if report.exists() else {}


def test_a_crafted_size_is_not_run_past_max_memory(root) -> None:
    """The file reshapes to 1,000,000 columns (ONNX Runtime raises at every size, so the
    search runs): it would take 1000 x 1000 for the export's size; its forward is estimated
    against --max-memory 40M first, skipped and said in the search's note (no finding: it
    confirmed nothing), and torch never runs there."""
    log = root / "sizes.log"
    log.unlink(missing_ok=True)
    code, report = validate(root, "flat", root / "crafted.onnx", "--max-memory", "40M")
    assert code == 1 and report["frozen"] == []
    said = [a["text"] for a in report["analyses"] if a["analysis"] == "frozen"]
    assert said and "memory budget" in said[0] and "1000" in said[0]
    assert not [f for f in report["findings"] if f["kind"] == "frozen_search"]
    sizes = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert sizes and max(h * w for h, w in sizes) < 250_000


def test_the_same_file_at_its_own_size_is_still_named(root) -> None:
    """The control: the honest export under the same budget still names its Div (the export's
    64 x 48 fits)."""
    code, report = validate(root, "pool", root / "pool.onnx", "--max-memory", "40M")
    assert code == 1
    assert [f["node"] for f in report["frozen"]] == ["/Div"]


def test_a_retrace_that_never_ends_is_abandoned_at_the_search_limit(root) -> None:
    """The legacy export's re-trace (for its source line) sleeps 20 s: the search abandons it
    at its own limit (max(10 s, 4 x the run)), so a 15 s --timeout run still ends with its
    verdict, the node named without a source line."""
    (root / "sleepy").touch()
    try:
        run = parity.validate(f"{root / 'models.py'}:pool", root / "pool.onnx", timeout=15)
    finally:
        (root / "sleepy").unlink()
    assert not run.passed
    [frozen] = run.frozen
    assert frozen.node == "/Div" and frozen.source is None


def _idle_chain(path: Path) -> None:
    """x / c * c for thousands of distinct c, then + 0.1 (a bias bug: it fails everywhere)."""
    nodes, inits, last = [], [], "x"
    for k, c in enumerate(range(2, 2 + N_CONSTANTS)):
        inits.append(numpy_helper.from_array(np.array(float(c), np.float32), f"c{k}"))
        nodes.append(helper.make_node("Div", [last, f"c{k}"], [f"d{k}"], name=f"/Div_{k}"))
        nodes.append(helper.make_node("Mul", [f"d{k}", f"c{k}"], [f"m{k}"], name=f"/Mul_{k}"))
        last = f"m{k}"
    inits.append(numpy_helper.from_array(np.array(0.1, np.float32), "bug"))
    nodes.append(helper.make_node("Add", [last, "bug"], ["y"], name="/Add"))
    graph = helper.make_graph(
        nodes,
        "idle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_thousands_of_distinct_constants_end_within_the_bound(root) -> None:
    """6000 Div / Mul by 3000 distinct sizes: the scoring once took 600 s; under --timeout 120
    the run ends with its own verdict (exit 1, not a timeout), nothing named; what the search
    tried is its note (JSON analyses[]), no finding: it confirmed nothing."""
    path = root / "idle.onnx"
    _idle_chain(path)
    code, report = validate(root, "idle", path, "--timeout", "120")
    assert code == 1 and report["verdict"] == "fail"
    assert report["frozen"] == []
    said = [a["text"] for a in report["analyses"] if a["analysis"] == "frozen"]
    assert said and said[0].startswith("No size frozen at export was confirmed")
    assert not [f for f in report["findings"] if f["kind"] == "frozen_search"]


def _swapped(root: Path, kind: str) -> parity.ValidationRun:
    """The pool export validated while, as the frozen search begins, its path becomes a FIFO
    or a link to /dev/zero (the run already read the file)."""
    path = root / f"swap_{kind}.onnx"
    path.write_bytes((root / "pool.onnx").read_bytes())

    def swap(event) -> None:
        if event.step == "frozen" and path.is_file() and not path.is_symlink():
            spare = root / f"swap_{kind}.tmp"
            if kind == "fifo":
                os.mkfifo(spare)
            else:
                os.symlink("/dev/zero", spare)
            os.replace(spare, path)

    done: dict = {}

    def work() -> None:
        done["run"] = parity.validate(f"{root / 'models.py'}:pool", path, progress=swap)

    worker = threading.Thread(target=work, daemon=True)  # a hang must not hang the suite
    worker.start()
    worker.join(300)
    assert not worker.is_alive(), "the frozen search hung on a swapped file"
    return done["run"]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_file_swapped_during_the_search_is_said_not_read(root, kind) -> None:
    run = _swapped(root, kind)
    assert not run.passed and run.frozen == ()
    [note] = [n for n in run.analyses if n.analysis == "frozen"]
    assert not note.done and "\n" not in note.text
    what = "a named pipe" if kind == "fifo" else "a symlink to /dev/zero"
    assert note.text.startswith("ONNX file") and what in note.text
    said = [f.text for f in run.findings if f.kind == "unmeasured"]
    assert any(t.startswith("Asked for but not done (the frozen-size search)") for t in said)


@pytest.fixture(scope="module")
def contrib(root) -> Path:
    """crafted.onnx with its Conv as com.microsoft's FusedConv (ONNX Runtime runs it; ONNX
    shape inference cannot size it nor anything after it), and with its Conv inside an `If`
    branch (the branch's values are not the graph's)."""
    proto = onnx.load(str(root / "crafted.onnx"))
    (conv,) = [n for n in proto.graph.node if n.op_type == "Conv"]
    conv.op_type, conv.domain = "FusedConv", "com.microsoft"
    conv.attribute.append(helper.make_attribute("activation", "Relu"))
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(proto, str(root / "fused.onnx"))
    return root / "fused.onnx"


def test_a_value_shape_inference_cannot_size_is_not_tried_past_the_runs_sizes(
    root, contrib
) -> None:
    """Issue 61, cause 1: the FusedConv's output (64 MB at 1000 x 1000) and all after it
    counted 0 bytes, so under --max-memory 100M the search ran torch and ONNX Runtime at
    1000 x 1000 (its inputs alone fit). Now the size is not tried, said."""
    log = root / "sizes.log"
    log.unlink(missing_ok=True)
    code, report = validate(root, "pool", contrib, "--max-memory", "100M")
    assert code == 1 and report["frozen"] == []
    # a search that confirms nothing is its note in analyses[], not a finding (issue 60)
    said = [a["text"] for a in report["analyses"] if a["analysis"] == "frozen"]
    assert said and "cannot be estimated" in said[0], said
    assert "com.microsoft.FusedConv output" in said[0], said
    sizes = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert sizes and max(h * w for h, w in sizes) < 250_000


def test_values_inside_an_if_branch_are_not_sized_as_zero(root) -> None:
    """A forward whose big value lies in an If branch is not estimated as its outer values."""
    from parity.run.frozen_search import forward_bytes, skeleton
    from parity.signature import OnnxSignature, TensorSpec

    branch = helper.make_graph(
        [helper.make_node("Tile", ["x", "reps"], ["big"]),
         helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0)],
        "then", [], [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("reps", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    signature = OnnxSignature(
        inputs=(TensorSpec("x", "float32", ("n",)), TensorSpec("c", "bool", ()),
                TensorSpec("reps", "int64", (1,))),
        outputs=(TensorSpec("y", "float32", ()),), opset=17, producer="", ir_version=8,
    )  # fmt: skip
    size = forward_bytes(skeleton(model), signature, {"n": 1000})
    assert size.unsized is not None and "inside If" in size.unsized, size
