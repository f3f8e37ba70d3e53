"""`parity sweep --engine ray` end to end: real pairs in real processes on real local Ray
clusters, each started by a `parity sweep` process of its own.

Kept apart from tests/test_sweep.py so that the suite's workers run the two long modules
side by side.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from parity.cli import main
from tests.helpers.sweep_zoo import (
    GOOD,
    summary_without_times,
    tiny_zoo,
    validating_in,
    write_manifest,
    write_zoo,
)

TIMEOUT_S = "30"  # the hanging pair is killed after this; every other pair takes seconds


HANG_S = 400
"""A sweep of tiny pairs on a local Ray cluster still running after this has hung."""


def _start_sweep(
    args: list[str], *, code: str | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`parity sweep ARGS` (or `code` given ARGS) in its own process group."""
    command = (
        [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "parity", *args]
    )
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def _finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    """Its end, killed whole with the Ray cluster it started if it hangs: a hang fails the
    test instead of stalling it."""
    try:
        out, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{' '.join(proc.args)} hung (killed after {HANG_S} s)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _sweep_process(
    args: list[str], *, code: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return _finish(_start_sweep(args, code=code, env=env))


@pytest.mark.slow
def test_local_and_ray_sweeps_give_the_same_summary_on_passing_failing_crashing_and_hanging_pairs(
    tmp_path, model_zoo, tiny_artifacts, capsys
):
    manifest = write_zoo(tmp_path / "zoo", model_zoo, tiny_artifacts)
    # this test's own mark in its hanging factory: the orphan check below must not see the
    # hanging pairs of sweep tests running beside it on other workers
    mark = f"# {tmp_path}\n"
    with (manifest.parent / "hanger.py").open("a") as f:
        f.write(mark)
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    common = ["sweep", str(manifest), "--workers", "2", "--timeout", TIMEOUT_S]

    # side by side: the Ray sweep in a process of its own (a local cluster of 2 CPUs)
    ray_sweep = _start_sweep([*common, "--out", str(on_ray), "--engine", "ray"])
    assert main([*common, "--out", str(local)]) == 2
    printed = capsys.readouterr().out
    done = _finish(ray_sweep)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "ERROR  hanging: timed out" in done.stdout

    summary = summary_without_times(local)
    assert summary == summary_without_times(on_ray)
    by_name = {p["name"]: p for p in summary["pairs"]}
    assert [p["name"] for p in summary["pairs"]] == [
        "passing", "failing", "corrupt", "crashing", "hanging"
    ]  # fmt: skip
    assert summary["schema"] == "parity.sweep/1" and summary["complete"]
    assert summary["counts"] == {"pass": 1, "fail": 1, "error": 3}
    assert by_name["passing"]["verdict"] == "pass" and by_name["passing"]["exit_code"] == 0
    assert by_name["passing"]["html"] == "report.html" and by_name["failing"]["html"] is None
    assert by_name["failing"]["verdict"] == "fail" and by_name["failing"]["failing"] == ["y"]
    assert by_name["corrupt"]["exit_code"] == 2
    assert "corrupt.onnx" in by_name["corrupt"]["error"]
    assert by_name["crashing"]["error"].startswith("crashed: killed by SIGABRT")
    assert by_name["hanging"]["exit_code"] is None
    assert by_name["hanging"]["error"] == f"timed out after {TIMEOUT_S} s (killed)"
    # the hanging pair was killed, not orphaned (on Ray it ran in a private copy of the zoo)
    assert not validating_in(manifest.parent) and not _ours(validating_in("parity-inputs-"), mark)

    for out in (local, on_ray):
        for name in by_name:  # every pair has a report, even those whose process died
            report = json.loads((out / name / "report.json").read_text())
            assert report["verdict"] == by_name[name]["verdict"]
        assert (out / "passing" / "report.html").stat().st_size > 0
        index = (out / "index.html").read_text()
        assert "href='passing/report.html'" in index and "href='failing/report.json'" in index
        assert "http://" not in index and "https://" not in index
    assert "FAIL   failing: y" in printed and "ERROR  hanging: timed out" in printed


def _ours(cwds: list[str], mark: str) -> list[str]:
    """The private folders among `cwds` whose copy of hanger.py carries this test's mark."""
    found = []
    for cwd in cwds:
        try:
            if mark in (Path(cwd) / "hanger.py").read_text():
                found.append(cwd)
        except OSError:
            continue
    return found


PROBE = """
\"\"\"sitecustomize: a `parity validate` process prints the CUDA_VISIBLE_DEVICES it got (into
its pair's log.txt, which the sweep brings back to DIR/NAME).\"\"\"
import os
import sys

if "--json" in sys.argv and "parity.sweep.pair_process" not in " ".join(sys.argv):
    print("CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"), flush=True)
"""


def _cuda_seen(folder) -> str | None:
    """What the probe printed in the pair's log (None: no log, the pair never started)."""
    log = folder / "log.txt"
    if not log.is_file():
        return None
    lines = [x for x in log.read_text().splitlines() if x.startswith("CUDA_VISIBLE_DEVICES=")]
    return lines[-1].split("=", 1)[1] if lines else "(no probe line)"


ON_A_GPU_CLUSTER = """
import sys
import ray
from parity.cli import main

ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, object_store_memory=128 << 20,
         log_to_driver=False)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_on_ray_a_gpu_pair_gets_a_gpu_where_there_is_one_and_a_clear_error_where_there_is_none(
    tmp_path, model_zoo, tiny_artifacts
):
    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    with_probe = {"PYTHONPATH": os.pathsep.join([str(probe), os.environ.get("PYTHONPATH", "")])}
    cuda = [*GOOD, "--provider", "CUDAExecutionProvider"]
    manifest = write_manifest(zoo, [{"name": "gpu", "args": cuda}, {"name": "cpu", "args": GOOD}])

    # a local cluster on this machine (no GPU): the GPU pair is an error at once, the other runs
    out = tmp_path / "no_gpu"
    argv = ["sweep", str(manifest), "--out", str(out), "--engine", "ray"]
    done = _sweep_process(argv, env=with_probe)
    assert done.returncode == 2, done.stderr
    pairs = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["pairs"]}
    assert pairs["cpu"]["verdict"] == "pass"
    assert pairs["gpu"]["verdict"] == "error" and pairs["gpu"]["exit_code"] is None
    assert pairs["gpu"]["error"].startswith(
        "asks for CUDAExecutionProvider, which needs a GPU, and the Ray cluster has none ("
    )
    assert f"ERROR  gpu: {pairs['gpu']['error']}" in done.stdout
    report = json.loads((out / "gpu" / "report.json").read_text())
    assert report["verdict"] == "error" and report["errors"][0]["kind"] == "usage"
    assert _cuda_seen(out / "gpu") is None  # never started
    assert _cuda_seen(out / "cpu") not in (None, "(no probe line)")  # (the probe works)

    assert not (out / "gpu" / "pair.json").exists()  # nothing for --resume to skip

    # resumed on a cluster that has a GPU: Ray reserves it for the pair, whose process sees it
    done = _sweep_process([*argv, "--resume"], code=ON_A_GPU_CLUSTER, env=with_probe)
    assert "(1 resumed)" in done.stdout  # the CPU pair
    assert _cuda_seen(out / "gpu") == "0", done.stderr
    assert _cuda_seen(out / "cpu") != "0"
    pairs = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["pairs"]}
    assert pairs["cpu"]["verdict"] == "pass"
    assert pairs["gpu"]["exit_code"] == 2  # it ran: this onnxruntime has no CUDA provider
    assert "CUDAExecutionProvider" in pairs["gpu"]["error"]
