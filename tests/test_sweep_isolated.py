"""`parity sweep --engine ray` on a cluster that shares no filesystem with the driver.

A real local Ray cluster (tests/helpers/isolated_ray.py): the head has no CPUs, and its one
worker node runs in a private mount namespace with a tmpfs over the zoo and over every --out,
so a pair can only get its files through Ray, and its report only comes back through Ray. A
probe task proves the worker sees neither. Token authentication is on. Skipped, with the
reason, only where `unshare --mount` is refused (not root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.cli import main
from tests.helpers import isolated_ray
from tests.helpers.moto_s3 import BUCKET, TEMP_MARKS, tree_bytes
from tests.helpers.sweep_zoo import (
    WORKER_KILLER,
    summary_without_times,
    write_isolated_zoo,
    write_manifest,
)

pytestmark = pytest.mark.slow
HANG_S = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    """(cluster, data folder): the worker sees an empty tmpfs where `data` is."""
    data = tmp_path_factory.mktemp("isolated")
    outs = ("ray_out", "retry_out", "lost_out", "s3_out", "replaced_out")
    hidden = [data / name for name in ("zoo", *outs)]
    with isolated_ray.for_module(hidden, s3_server) as made:
        yield made, data


PROBE = """
import json, os, sys, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")

@ray.remote(num_cpus=1)
def probe(paths):
    import parity
    return {"seen": [os.path.exists(p) for p in paths], "parity": parity.__file__}

print(json.dumps(ray.get(probe.remote(sys.argv[2:]))))
"""


def _python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**os.environ, **env},
    )
    return done


def _tree(out: Path) -> dict[str, str | None]:
    """Every file under `out` (summary and index aside), with its verdict for reports."""
    found: dict[str, str | None] = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.parent != out:
            rel = path.relative_to(out).as_posix()
            found[rel] = (
                json.loads(path.read_text())["verdict"] if path.name == "report.json" else None
            )
    return found


def test_a_sweep_on_a_cluster_sharing_nothing_equals_the_local_one_and_replaces_stale_results(
    cluster, model_zoo, tiny_artifacts
):
    made, data = cluster
    shared = made.base / "shared"  # outside the tmpfs: a file:// URI every node can read
    manifest = write_isolated_zoo(data / "zoo", model_zoo, tiny_artifacts, shared)

    marker = data / "ray_out" / "marker.txt"
    marker.write_text("the driver's --out")
    probe = _python(["-c", PROBE, made.address, str(manifest), str(marker)], made.env)
    assert probe.returncode == 0, probe.stderr[-2000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["seen"] == [False, False]  # the worker cannot see the zoo nor --out
    assert seen["parity"] == str(Path(__file__).parents[1] / "core" / "__init__.py")

    local = data / "local_out"
    assert main(["sweep", str(manifest), "--out", str(local), "--workers", "2"]) == 2

    # --out holds an earlier sweep's different verdicts: all pass, and a file no longer made
    on_ray = data / "ray_out"
    shutil.copytree(local, on_ray, dirs_exist_ok=True)
    for report in on_ray.glob("*/report.json"):
        report.write_text(json.dumps({**json.loads(report.read_text()), "verdict": "pass"}))
    (on_ray / "bug" / "old.html").write_text("<p>stale pass</p>")
    record = json.loads((on_ray / "bug" / "pair.json").read_text())
    record["result"].update(verdict="pass", html="old.html")
    (on_ray / "bug" / "pair.json").write_text(json.dumps(record))
    stale = json.loads((on_ray / "summary.json").read_text())
    stale["pairs"] = [{**p, "verdict": "pass", "error": None} for p in stale["pairs"]]
    (on_ray / "summary.json").write_text(json.dumps(stale))

    sweep = ["-m", "parity", "sweep", str(manifest), "--out", str(on_ray), "--engine", "ray"]
    done = _python([*sweep, "--ray-address", made.address], made.env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "raylet" not in done.stdout and "WARNING" not in done.stdout
    assert all(line.startswith(("FAIL ", "ERROR ", "sweep: ")) for line in done.stdout.splitlines())

    expected = summary_without_times(local)
    assert summary_without_times(on_ray) == expected
    verdicts = {p["name"]: p["verdict"] for p in expected["pairs"]}
    assert verdicts == {
        "passing": "pass", "bug": "fail", "broken": "error", "imports": "pass", "uri": "pass",
        "oom": "error",
    }  # fmt: skip
    by_name = {p["name"]: p for p in expected["pairs"]}
    assert by_name["passing"]["html"] == "report.html"
    assert by_name["passing"]["saved_run"] == "run.parity.npz"
    assert "corrupt.onnx" in by_name["broken"]["error"]
    assert by_name["oom"]["error"].startswith("crashed: killed by SIGKILL: out of memory?")
    assert by_name["oom"]["exit_code"] == -9
    assert _tree(on_ray) == _tree(local)  # the same files, the same verdicts: nothing stale
    assert (on_ray / "passing" / "run.parity.npz").stat().st_size > 0
    assert "old.html" not in (on_ray / "index.html").read_text()

    summary = json.loads((on_ray / "summary.json").read_text())
    for pair in summary["pairs"]:
        (attempt,) = pair["attempts"]
        assert attempt["outcome"] == pair["verdict"] and attempt["node"]
    assert "put in the object store" in done.stderr

    # --resume trusts only what this sweep wrote: everything it ran is resumed (connecting
    # through Ray Client, ray://, which the [ray] extra installs)
    again = _through_ray_client([*sweep, "--ray-address", made.client_address, "--resume"], made)
    assert "(6 resumed)" in again.stdout, again.stdout + again.stderr[-2000:]


RAY_CLIENT_DID_NOT_START = (
    "Starting Ray client server failed",
    # the same failure seen a step earlier: the proxy reads the command line of its per-client
    # server's process, which had already exited (psutil raises on the unreaped child)
    "psutil.ZombieProcess",
)


def _through_ray_client(args: list[str], made) -> subprocess.CompletedProcess:
    """A ray:// driver, tried again (at most 4 times) where Ray's own client proxy could not
    start its per-client server (seen while another cluster's proxy on this machine starts
    one too: both pick from the same port range): Ray's start-up, not the sweep, failed."""
    for _ in range(4):
        done = _python(args, made.env)
        if not any(sign in done.stdout + done.stderr for sign in RAY_CLIENT_DID_NOT_START):
            return done
        time.sleep(5)
    return done


def test_a_worker_sigkilled_mid_pair_is_retried_and_both_attempts_are_recorded(
    cluster, model_zoo, tiny_artifacts
):
    made, data = cluster
    zoo = data / "zoo"
    mark = made.base / "shared" / "killed-once"
    (zoo / "worker_killer.py").write_text(WORKER_KILLER.format(mark=str(mark)))
    if not (zoo / "models.py").exists():
        shutil.copy(model_zoo.file, zoo / "models.py")
        shutil.copy(tiny_artifacts.onnx, zoo / "tiny.onnx")
    pairs = [{"name": "lost", "args": ["--model", "worker_killer.py:make", "--onnx", "tiny.onnx"]}]
    manifest = write_manifest(zoo, pairs)
    out = data / "retry_out"
    sweep = ["-m", "parity", "sweep", str(manifest), "--out", str(out), "--engine", "ray"]
    done = _python([*sweep, "--ray-address", made.address], made.env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert mark.read_text() == "killed once"
    (pair,) = json.loads((out / "summary.json").read_text())["pairs"]
    assert pair["verdict"] == "pass"
    first, second = pair["attempts"]
    assert first["outcome"] == "lost: WorkerCrashedError" and second["outcome"] == "pass"
    assert first["node"] == second["node"] and second["node"]  # the cluster's one worker node
    assert "raylet" not in done.stdout and "worker died" not in done.stdout


def test_every_output_of_an_s3_pair_on_ray_names_its_uri_as_the_local_engine_does(
    cluster, s3, model_zoo, tiny_artifacts, tmp_path
):
    made, data = cluster
    zoo = data / "zoo"
    if not (zoo / "models.py").exists():
        shutil.copy(model_zoo.file, zoo / "models.py")
    s3.put("models/tiny.onnx", tiny_artifacts.onnx.read_bytes())
    uri = f"s3://{BUCKET}/models/tiny.onnx"
    args = ["--model", "models.py:make_tiny", "--onnx", uri]
    args += ["--html", "r.html", "--save-run", "run.parity.npz"]
    manifest = write_manifest(zoo, [{"name": "s3", "args": args}])
    local = tmp_path / "local"
    assert main(["sweep", str(manifest), "--out", str(local)]) == 0
    on_ray = data / "s3_out"
    sweep = ["-m", "parity", "sweep", str(manifest), "--out", str(on_ray), "--engine", "ray"]
    done = _python([*sweep, "--ray-address", made.address], made.env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads((on_ray / "s3" / "report.json").read_text())
    assert report["onnx"] == uri and report["candidates"][0]["onnx"] == uri
    assert uri in (on_ray / "s3" / "r.html").read_text()
    for name, content in tree_bytes(on_ray).items():
        assert not any(mark in content for mark in TEMP_MARKS), (name, content[:300])
    assert summary_without_times(on_ray)["pairs"] == summary_without_times(local)["pairs"]


def test_a_driver_without_the_clusters_token_or_with_a_wrong_one_gets_one_line(cluster, tmp_path):
    made, _ = cluster
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"schema": "parity.sweep/1", "pairs": [
        {"name": "a", "args": ["--model", "demo:cnn"]}]}))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    sweep = [sys.executable, "-m", "parity", "sweep", str(manifest), "--out", str(tmp_path / "o")]
    sweep += ["--engine", "ray", "--ray-address", made.address]
    for extra, said in [
        ({}, "the cluster asks for a token"),
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}, "refused this driver's token"),
    ]:
        done = subprocess.run(
            sweep, capture_output=True, text=True, timeout=HANG_S, env={**env, **extra}
        )
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and "RAY_AUTH_TOKEN" in lines[0], lines


RETURNS_SECOND_TIME = '''
"""A factory that says it started, then waits to be killed; run again, it returns the model."""
import threading
from pathlib import Path

from models import make_tiny


def make():
    mark = Path({mark!r})
    if mark.exists():
        return make_tiny()
    mark.write_text("started")
    threading.Event().wait()
'''


def test_a_node_lost_late_in_a_queue_and_replaced_runs_the_queue_on_the_new_node(
    cluster, model_zoo, tiny_artifacts
):
    """The queued pairs were submitted longer ago than the wait for a node: the wait counts
    from the loss, so the replacement that joins meanwhile runs them. Leaves the replacement
    as the cluster's worker node."""
    import time

    made, data = cluster
    zoo = data / "zoo"
    mark = made.base / "shared" / "replaced-started"
    mark.parent.mkdir(parents=True, exist_ok=True)
    (zoo / "blocks.py").write_text(RETURNS_SECOND_TIME.format(mark=str(mark)))
    for src, name in ((model_zoo.file, "models.py"), (tiny_artifacts.onnx, "tiny.onnx")):
        if not (zoo / name).exists():
            shutil.copy(src, zoo / name)
    tiny = ["--model", "models.py:make_tiny", "--onnx", "tiny.onnx"]
    pairs = [{"name": "first", "args": ["--model", "blocks.py:make", "--onnx", "tiny.onnx"]}]
    pairs += [{"name": f"queued{i}", "args": [*tiny, "--seed", str(i)]} for i in range(2)]
    manifest = write_manifest(zoo, pairs)
    out = data / "replaced_out"
    wait_s = 40.0
    sweep = subprocess.Popen(
        [sys.executable, "-c", LOSE_THE_NODE, str(manifest), str(out), made.address, str(wait_s)],
        env={**os.environ, **made.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while not mark.exists():
            assert time.monotonic() < deadline and sweep.poll() is None, sweep.stderr
            time.sleep(0.5)
        time.sleep(wait_s + 5)  # the queued pairs have waited longer than the wait for a node
        assert made.kill_worker_node(), "no worker node found"
        made.wait_for_no_cpus()  # the loss, as the cluster sees it: the wait starts here
        made.add_worker_node()
        _, err = sweep.communicate(timeout=HANG_S)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, err[-3000:]
    by_name = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["pairs"]}
    first = by_name["first"]["attempts"]
    assert first[0]["outcome"].startswith("lost: ") and first[-1]["outcome"] == "pass"
    new_node = first[-1]["node"]
    assert new_node and new_node != first[0]["node"]
    for name in ("queued0", "queued1"):
        assert by_name[name]["verdict"] == "pass"
        assert by_name[name]["attempts"][-1]["node"] == new_node


STARTS_AND_WAITS = '''
"""A factory that says it started (a file every node sees), then waits to be killed."""
import threading
from pathlib import Path


def make():
    Path({mark!r}).write_text("started")
    threading.Event().wait()
'''

LOSE_THE_NODE = """
import sys
import time
from pathlib import Path
from parity.cli import build_parser
from parity.path_flags import PathFlags
from parity.sweep.driver import run_sweep
from parity.sweep.manifest import load_manifest
from parity.sweep.on_ray import ray_engine

manifest = load_manifest(sys.argv[1], flags=PathFlags.of(build_parser()))
wait = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
engine = ray_engine(address=sys.argv[3], workers=None, node_wait=wait)
outcome = run_sweep(manifest, Path(sys.argv[2]), engine, timeout=None)
sys.exit(int(outcome.exit_code))
"""


def test_a_node_lost_with_no_replacement_ends_its_pair_as_an_error_not_a_wait(
    cluster, model_zoo, tiny_artifacts
):
    """Last in this module: it takes the cluster's only worker node down."""
    import time

    made, data = cluster
    zoo = data / "zoo"
    mark = made.base / "shared" / "waiting-started"
    mark.parent.mkdir(parents=True, exist_ok=True)
    (zoo / "waits.py").write_text(STARTS_AND_WAITS.format(mark=str(mark)))
    if not (zoo / "tiny.onnx").exists():
        shutil.copy(tiny_artifacts.onnx, zoo / "tiny.onnx")
    manifest = write_manifest(
        zoo, [{"name": "stranded", "args": ["--model", "waits.py:make", "--onnx", "tiny.onnx"]}]
    )
    out = data / "lost_out"
    sweep = subprocess.Popen(
        [sys.executable, "-c", LOSE_THE_NODE, str(manifest), str(out), made.address],
        env={**os.environ, **made.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while not mark.exists():
            assert time.monotonic() < deadline and sweep.poll() is None, sweep.stderr
            time.sleep(0.5)
        killed = made.kill_worker_node()
        assert killed, "no worker node found"
        _, err = sweep.communicate(timeout=HANG_S)
    finally:
        sweep.kill()
    assert sweep.returncode == 2, err[-3000:]
    (pair,) = json.loads((out / "summary.json").read_text())["pairs"]
    assert pair["verdict"] == "error"
    assert "no Ray node can run it after" in pair["error"] and "0 CPU" in pair["error"]
    assert pair["attempts"][0]["outcome"].startswith("lost: ")
    assert pair["attempts"][-1]["outcome"] == "not placed"
    assert json.loads((out / "stranded" / "report.json").read_text())["verdict"] == "error"
