"""Sweeps over object storage (issue 55): moto's S3 server on 127.0.0.1, read by s3fs through
fsspec in the pairs' own processes, on the local engine.

URIs are the names of everything a pair writes (no temporary folder anywhere in --out, the
same text from run to run); a storage outage is retried with back-off and each failed read is
an attempt; `--resume` runs a pair again whose storage failed, and keeps a pin mismatch; the
sweep's worst output is the Overview's (parity.labels.badness).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from parity.cli import main
from parity.reports.saved_run import load_run
from tests.helpers.moto_s3 import BUCKET, TEMP_MARKS, Moto, tree_bytes
from tests.helpers.sweep_zoo import tiny_zoo, write_manifest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3():
    server = Moto()
    server.start()
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_every_output_of_an_s3_pair_names_its_uri_and_two_runs_name_the_same(
    tmp_path, model_zoo, tiny_artifacts, s3
):
    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    s3.put("models/tiny.onnx", (zoo / "tiny.onnx").read_bytes())
    uri = f"s3://{BUCKET}/models/tiny.onnx"
    local = f"file://{zoo / 'tiny.onnx'}"
    args = ["--model", "models.py:make_tiny", "--html", "r.html", "--save-run", "run.parity.npz"]
    manifest = write_manifest(
        zoo,
        [
            {"name": "s3", "args": [*args, "--onnx", uri]},
            {"name": "file", "args": [*args, "--onnx", local]},
            {"name": "gone", "args": ["--model", "models.py:make_tiny", "--onnx",
                                      f"s3://{BUCKET}/models/absent.onnx"]},
        ],
    )  # fmt: skip
    outs = [tmp_path / "out1", tmp_path / "out2"]
    for out in outs:
        assert main(["sweep", str(manifest), "--out", str(out), "--workers", "2"]) == 2

    report = json.loads((outs[0] / "s3" / "report.json").read_text())
    assert report["verdict"] == "pass"
    assert report["onnx"] == uri and report["candidates"][0]["onnx"] == uri
    assert json.loads((outs[0] / "file" / "report.json").read_text())["onnx"] == local
    assert load_run(outs[0] / "s3" / "run.parity.npz").onnx == uri
    assert uri in (outs[0] / "s3" / "r.html").read_text()
    gone = json.loads((outs[0] / "summary.json").read_text())["pairs"][2]
    assert gone["verdict"] == "error" and f"s3://{BUCKET}/models/absent.onnx" in gone["error"]

    first, second = tree_bytes(outs[0]), tree_bytes(outs[1])
    for name, data in first.items():
        assert not any(mark in data for mark in TEMP_MARKS), (name, data[:300])
    # the same manifest names the same things: the reports differ only in their timings
    for pair in ("s3", "file"):
        a, b = (json.loads(t[f"{pair}/report.json"]) for t in (first, second))
        for side in (a, b):
            side.pop("timings")
            for c in side["candidates"]:
                c.pop("seconds")
        assert a == b


class Outage:
    """Back-offs the sweep waited, and what to put back when S3 starts again."""

    def __init__(self) -> None:
        self.waited: list[float] = []
        self.data = b""


@pytest.fixture
def outage(s3, monkeypatch):
    """S3 stops; the sweep's first back-off starts it again with the object back in place."""
    seen = Outage()

    def pause(seconds: float) -> None:
        seen.waited.append(seconds)
        if len(seen.waited) == 1:
            s3.start()
            s3.put("models/tiny.onnx", seen.data)

    from parity.sweep import delivery

    monkeypatch.setattr(delivery, "pause", pause)
    s3.stop()
    yield seen
    if s3.proc is None:
        s3.start()


def test_s3_stopped_then_started_again_mid_pair_is_retried_and_the_pass_says_so(
    tmp_path, model_zoo, tiny_artifacts, s3, outage
):
    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    outage.data = (zoo / "tiny.onnx").read_bytes()
    uri = f"s3://{BUCKET}/models/tiny.onnx"
    manifest = write_manifest(
        zoo, [{"name": "s3", "args": ["--model", "models.py:make_tiny", "--onnx", uri]}]
    )
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "1"]) == 0
    pair = json.loads((out / "summary.json").read_text())["pairs"][0]
    assert pair["verdict"] == "pass"
    outcomes = [a["outcome"] for a in pair["attempts"]]
    assert outcomes[-1] == "pass" and len(outcomes) == 2, outcomes
    assert outcomes[0].startswith("storage: cannot read s3://zoo/models/tiny.onnx"), outcomes
    assert all(a["node"] for a in pair["attempts"])
    assert outage.waited == [1.0]
    assert "pass (retried)" in (out / "index.html").read_text()


def test_resume_runs_a_pair_whose_storage_failed_again_and_keeps_a_pin_mismatch(
    tmp_path, model_zoo, tiny_artifacts, s3, monkeypatch
):
    from parity.sweep import delivery

    monkeypatch.setattr(delivery, "pause", lambda seconds: None)
    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    data = (zoo / "tiny.onnx").read_bytes()
    s3.put("models/tiny.onnx", data)
    uri, pinned = f"s3://{BUCKET}/models/tiny.onnx", f"s3://{BUCKET}/models/pinned.onnx"
    s3.put("models/pinned.onnx", data)
    tiny = ["--model", "models.py:make_tiny", "--onnx"]
    manifest = write_manifest(
        zoo, [{"name": "plain", "args": [*tiny, uri]}, {"name": "pinned", "args": [*tiny, pinned]}]
    )
    raw = json.loads(manifest.read_text())
    raw["sha256"] = {pinned: "0" * 64}
    manifest.write_text(json.dumps(raw))
    out = tmp_path / "out"
    argv = ["sweep", str(manifest), "--out", str(out), "--workers", "1"]

    s3.stop()
    try:
        assert main(argv) == 2
    finally:
        s3.start()
    pairs = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["pairs"]}
    assert pairs["plain"]["verdict"] == "error"
    storage = [a for a in pairs["plain"]["attempts"] if a["outcome"].startswith("storage: ")]
    assert len(storage) == delivery.STORAGE_TRIES - 1, pairs["plain"]["attempts"]
    assert "(read 4 times)" in pairs["plain"]["error"]

    s3.put("models/tiny.onnx", data)
    s3.put("models/pinned.onnx", data)
    assert main([*argv, "--resume"]) == 2  # the storage error ran again; the pin did not
    pairs = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["pairs"]}
    assert pairs["plain"]["verdict"] == "pass"
    assert pairs["pinned"]["verdict"] == "error" and "manifest pins" in pairs["pinned"]["error"]
    assert main([*argv, "--resume"]) == 2
    pairs = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["pairs"]}
    assert pairs["pinned"]["verdict"] == "error"


def test_the_sweeps_worst_output_is_the_overviews(tmp_path, model_zoo):
    """Two outputs: `spike` has one element far off, `drift` every element a little. The
    Overview's worst is `drift` (most elements out of tolerance, parity.labels.badness); the
    sweep's summary, index and Sweep page read the same."""
    pytest.importorskip("streamlit")
    from parity.dashboard.overview import worst_failure

    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "two.py").write_text(TWO_OUTPUTS)
    _write_two_outputs_onnx(zoo / "two.onnx")
    args = ["--model", "two.py:make", "--onnx", "two.onnx", "--save-run", "run.parity.npz"]
    manifest = write_manifest(zoo, [{"name": "two", "args": args}])
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "1"]) == 1
    pair = json.loads((out / "summary.json").read_text())["pairs"][0]
    run = load_run(out / "two" / "run.parity.npz")
    worst = worst_failure(run)
    assert worst is not None and worst.name == "drift"
    assert pair["worst"]["output"] == worst.name
    assert pair["worst"]["max_abs"] == pytest.approx(worst.stats.max_abs)
    assert sorted(pair["failing"]) == ["drift", "spike"]
    spike = next(c for c in run.outputs if c.name == "spike")
    assert spike.stats.max_abs > worst.stats.max_abs  # the old rule would have named spike


TWO_OUTPUTS = """
import torch


class Two(torch.nn.Module):
    def forward(self, x):
        return x * 2.0, x + 1.0


def make():
    return Two()
"""


def _write_two_outputs_onnx(path: Path) -> None:
    """x[2, 8] -> spike = 2x with one element +5, drift = x + 1.01 (every element off)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    bump = np.zeros((2, 8), np.float32)
    bump[0, 0] = 5.0
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["doubled"]),
            helper.make_node("Add", ["doubled", "bump"], ["spike"]),
            helper.make_node("Add", ["x", "shift"], ["drift"]),
        ],
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [
            helper.make_tensor_value_info("spike", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("drift", TensorProto.FLOAT, [2, 8]),
        ],
        [
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(bump, "bump"),
            numpy_helper.from_array(np.array(1.01, np.float32), "shift"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_read_follows_the_endpoint_the_environment_names_now(s3, monkeypatch):
    """fsspec caches a filesystem per process: a driver whose environment now names another
    endpoint (or other credentials) must read from it, not from the one it first used."""
    from parity.sweep.delivery import read_uri

    other = Moto()
    other.start()
    try:
        s3.put("models/which.bin", b"first")
        other.put("models/which.bin", b"second")
        uri = f"s3://{BUCKET}/models/which.bin"
        assert read_uri(uri) == b"first"
        monkeypatch.setenv("AWS_ENDPOINT_URL", other.url)
        assert read_uri(uri) == b"second"
    finally:
        other.stop()
