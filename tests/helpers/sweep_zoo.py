"""A small real zoo for sweep tests: passing, failing, corrupt, crashing and hanging pairs.

Files are copied next to the manifest so that its paths are relative, as users write them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CRASHER = '''
"""A model factory that takes its process down (SIGABRT), as a native crash would."""
import os


def make():
    os.abort()
'''


HANGER = '''
"""A model factory that never returns and burns no CPU meanwhile, as a deadlock would."""
import threading


def make():
    threading.Event().wait()
'''


def write_loop_onnx(path: Path, trip_count: int = 10**15) -> Path:
    """x [batch, 4] -> y [batch, 3] after a Loop of `trip_count` no-op iterations: a hang
    inside ONNX Runtime's native code, like a pathological export."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "zero"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, ["batch", 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, ["batch", 4]),
        ],
        [numpy_helper.from_array(np.zeros((), np.float32), "zero")],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Loop", ["trips", "cond", "x"], ["looped"], body=body),
            helper.make_node("MatMul", ["looped", "w"], ["y"]),
        ],
        "hang",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [
            numpy_helper.from_array(np.array(trip_count, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "cond"),
            numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_manifest(folder: Path, pairs: list[dict], defaults: list[str] | None = None) -> Path:
    data: dict = {"schema": "parity.sweep/1", "pairs": pairs}
    if defaults is not None:
        data["defaults"] = {"args": defaults}
    path = folder / "manifest.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def copy_tiny(folder: Path, model_zoo, tiny_artifacts) -> None:
    """models.py (the factories), tiny.onnx and other_weights.pt into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(model_zoo.file, folder / "models.py")
    shutil.copy(tiny_artifacts.onnx, folder / "tiny.onnx")
    shutil.copy(tiny_artifacts.state_pt, folder / "other_weights.pt")


def write_zoo(folder: Path, model_zoo, tiny_artifacts) -> Path:
    """The five kinds of pair, and the manifest naming them. The hanging pair waits rather
    than spins (a sweep kills either the same way; tests/test_sweep.py's interrupt test
    kills pairs spinning in ONNX Runtime), so its timeout costs no core."""
    copy_tiny(folder, model_zoo, tiny_artifacts)
    (folder / "corrupt.onnx").write_bytes(b"\x08\x07not an onnx protobuf")
    (folder / "crasher.py").write_text(CRASHER)
    (folder / "hanger.py").write_text(HANGER)
    tiny = ["--model", "models.py:make_tiny"]
    return write_manifest(
        folder,
        [
            {"name": "passing", "args": [*tiny, "--onnx", "tiny.onnx", "--html", "report.html"]},
            {"name": "failing", "args": [*tiny, "--onnx=tiny.onnx", "--weights=other_weights.pt"]},
            {"name": "corrupt", "args": [*tiny, "--onnx", "corrupt.onnx"]},
            {"name": "crashing", "args": ["--model", "crasher.py:make", "--onnx", "tiny.onnx"]},
            {"name": "hanging", "args": ["--model", "hanger.py:make", "--onnx", "tiny.onnx"]},
        ],
        defaults=["--input-sets", "2"],
    )


def write_tokens_onnx(path: Path, model_zoo) -> Path:
    """The zoo's Tokens model (input_ids, attention_mask -> logits, extra.0, extra.1) by the
    legacy exporter: a pair with three outputs, exported in a second."""
    import warnings

    import torch

    model = model_zoo.build("make_tokens")
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "logits", "extra.0", "extra.1"]
    with warnings.catch_warnings():  # the legacy exporter warns it is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (ids, mask),
            str(path),
            dynamo=False,
            input_names=names[:2],
            output_names=names[2:],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in names},
        )
    return path


def summary_without_times(out: Path) -> dict:
    """summary.json without the pairs' seconds and attempts (which differ run to run and
    engine to engine: the node, the seconds)."""
    data = json.loads((out / "summary.json").read_text())
    for pair in data["pairs"]:
        pair.pop("seconds")
        pair.pop("attempts")
    return data


def processes_mentioning(text: str) -> list[str]:
    """The command lines of this machine's processes that contain `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(cmdline)
    return found


def validating_in(folder: Path | str) -> list[str]:
    """Command lines of the `parity validate` processes running in `folder` (pairs run in
    the manifest's folder, or a private copy of it on a Ray worker: found by working dir);
    a str: the working dirs of those in any folder whose name starts with it (e.g.
    "parity-inputs-", those copies), so a caller can tell its own copies from others'."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        here = Path(cwd).name.startswith(folder) if isinstance(folder, str) else cwd == str(folder)
        if " -m parity validate " in cmd and here:
            found.append(cwd if isinstance(folder, str) else cmd)
    return found


def tiny_zoo(tmp_path: Path, model_zoo, tiny_artifacts) -> Path:
    """tmp_path/zoo holding the tiny model and its export (see copy_tiny)."""
    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    return zoo


GOOD = ["--model", "models.py:make_tiny", "--onnx", "tiny.onnx"]
"""A passing pair's arguments in a tiny_zoo folder."""


WRAPPER = '''
"""A factory that imports the module beside it (it must travel with it)."""
from models import make_tiny


def make():
    return make_tiny()
'''

KILLER = '''
"""A factory whose process the kernel kills, as its OOM killer would (SIGKILL)."""
import os
import signal


def make():
    os.kill(os.getpid(), signal.SIGKILL)
'''

WORKER_KILLER = '''
"""A factory that, the first time only, SIGKILLs the Ray worker its pair runs under (a lost
worker), then builds the tiny model."""
import os
import signal
from pathlib import Path

from models import make_tiny

MARK = Path({mark!r})


def _ray_worker():
    pid = os.getppid()
    while pid > 1:
        cmd = Path(f"/proc/{{pid}}/cmdline").read_bytes()
        if cmd.startswith(b"ray::") or b"default_worker.py" in cmd:  # Ray renames its workers
            return pid
        stat = Path(f"/proc/{{pid}}/stat").read_text()
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
    return None


def make():
    if not MARK.exists():
        MARK.write_text("killed once")
        os.kill(_ray_worker(), signal.SIGKILL)
        import time

        time.sleep(60)
    return make_tiny()
'''


def write_isolated_zoo(folder: Path, model_zoo, tiny_artifacts, shared: Path) -> Path:
    """Pairs that need every kind of file to travel: a passing pair writing --html and
    --save-run, a planted bug (other weights), a broken ONNX file, a factory importing its
    neighbour with an ONNX file in external data and a --tolerances file, an ONNX file named
    by a pinned file:// URI (in `shared`, a folder every node sees), and a pair SIGKILLed
    (as by the OOM killer)."""
    from parity.files.hashing import file_sha256

    copy_tiny(folder, model_zoo, tiny_artifacts)
    (folder / "corrupt.onnx").write_bytes(b"\x08\x07not an onnx protobuf")
    (folder / "wrapper.py").write_text(WRAPPER)
    (folder / "killer.py").write_text(KILLER)
    (folder / "tol.json").write_text(json.dumps({"default": {"atol": 1e-4, "rtol": 1e-3}}))
    ext = folder / "ext"
    ext.mkdir()
    proto = onnx.load(str(tiny_artifacts.onnx))
    onnx.save_model(
        proto, str(ext / "tiny_ext.onnx"), save_as_external_data=True,
        all_tensors_to_one_file=True, location="tiny_ext.data", size_threshold=0,
    )  # fmt: skip
    shared.mkdir(parents=True, exist_ok=True)
    uri_onnx = shared / "tiny_uri.onnx"
    shutil.copy(tiny_artifacts.onnx, uri_onnx)
    tiny = ["--model", "models.py:make_tiny"]
    manifest = write_manifest(
        folder,
        [
            {"name": "passing", "args": [*tiny, "--onnx", "tiny.onnx", "--html", "report.html",
                                         "--save-run", "run.parity.npz"]},
            {"name": "bug", "args": [*tiny, "--onnx=tiny.onnx", "--weights=other_weights.pt"]},
            {"name": "broken", "args": [*tiny, "--onnx", "corrupt.onnx"]},
            {"name": "imports", "args": ["--model", "wrapper.py:make", "--onnx",
                                         "ext/tiny_ext.onnx", "--tolerances", "tol.json"]},
            {"name": "uri", "args": [*tiny, "--onnx", uri_onnx.as_uri()]},
            {"name": "oom", "args": ["--model", "killer.py:make", "--onnx", "tiny.onnx"]},
        ],
        defaults=["--input-sets", "2"],
    )  # fmt: skip
    data = json.loads(manifest.read_text())
    data["sha256"] = {uri_onnx.as_uri(): file_sha256(uri_onnx)}
    manifest.write_text(json.dumps(data, indent=1))
    return manifest


def with_ray_attempts(sweep_dir: Path, out: Path) -> Path:
    """A copy of a finished sweep folder whose first pair passed on its second try (its first
    worker died) with one more pair, a GPU pair a Ray cluster refused, that never got a node:
    the attempts a Ray sweep records, made by the Ray engine's own functions."""
    from dataclasses import replace

    from parity.sweep.execute import Attempt, refused
    from parity.sweep.folder import load_sweep
    from parity.sweep.index import write_index
    from parity.sweep.on_ray import _with_attempts
    from parity.sweep.plan import PairJob
    from parity.sweep.summary import summary_dict, write_summary

    shutil.copytree(sweep_dir, out)
    pairs = list(load_sweep(out).pairs)
    lost = Attempt("a" * 56, "lost: WorkerCrashedError", 3.0)
    this = Attempt("b" * 56, "pass", pairs[0].seconds)
    pairs[0] = replace(pairs[0], attempts=(lost, this))
    job = PairJob("gpu", (), str(out), str(out / "gpu"), "", None, "CUDAExecutionProvider")
    never = refused(job, "asks for CUDAExecutionProvider, which needs a GPU")
    never = _with_attempts(never, [Attempt(None, "not placed", 120.0)]).result
    summary = summary_dict("manifest.json", len(pairs) + 1, [*pairs, never])
    write_summary(out, summary)
    write_index(out, summary)
    return out
