"""`parity sweep` defects of issue 23: a NUL byte in a pair's argument is one line (exit 2);
a pair dies with the sweep (even `kill -9`), and its timeout kills what it started, a
`setsid` grandchild included (real processes, real factory code that spawns one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.cli import main
from parity.sweep.pair_process import descendants
from tests.helpers.sweep_zoo import copy_tiny

GOOD = ["--model", "models.py:make_tiny", "--onnx", "tiny.onnx"]


@pytest.mark.parametrize(
    "extra",
    [["--html", "a\0b.html"], ["--html=a\0b.html"], ["--atol", "1\0"], ["--save-run", "\0"]],
)
def test_a_nul_byte_in_a_pair_argument_is_one_line_exit_2(
    extra, tmp_path, model_zoo, tiny_artifacts, capsys
):
    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    manifest = zoo / "manifest.json"
    pairs = [{"name": "a", "args": [*GOOD, *extra]}]
    manifest.write_text(json.dumps({"schema": "parity.sweep/1", "pairs": pairs}))
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("parity: error: "), err
    assert "holds a NUL byte" in err and "pairs[0].args" in err
    assert not out.exists()


# --- a pair dies with the sweep, and its timeout kills all it started ---------------------

SPAWNER = """
import subprocess
import sys
import time
from pathlib import Path

PIDS = Path({pids!r})


def make():
    # a grandchild in its own session: outside the pair's process group
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True
    )
    import os

    PIDS.write_text(f"{{os.getpid()}} {{child.pid}}")
    time.sleep(300)
"""


def _spawning_manifest(folder: Path, model_zoo, tiny_artifacts) -> tuple[Path, Path]:
    copy_tiny(folder, model_zoo, tiny_artifacts)
    pids = folder / "pids.txt"
    (folder / "spawner.py").write_text(SPAWNER.format(pids=str(pids)))
    manifest = folder / "manifest.json"
    pairs = [{"name": "spawns", "args": ["--model", "spawner.py:make", "--onnx", "tiny.onnx"]}]
    manifest.write_text(json.dumps({"schema": "parity.sweep/1", "pairs": pairs}))
    return manifest, pids


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _all_gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _pids(path: Path, within: float = 180.0) -> list[int]:
    deadline = time.monotonic() + within
    while not path.is_file() or len(path.read_text().split()) < 2:
        assert time.monotonic() < deadline, "the pair never started its grandchild"
        time.sleep(0.2)
    return [int(p) for p in path.read_text().split()]


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal and subreaper: Linux")
def test_a_pairs_timeout_kills_the_grandchild_it_setsid_started(
    tmp_path, model_zoo, tiny_artifacts, capsys
):
    manifest, pids_file = _spawning_manifest(tmp_path / "zoo", model_zoo, tiny_artifacts)
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--timeout", "20"]) == 2
    report = json.loads((out / "spawns" / "report.json").read_text())
    assert "timed out after 20 s" in json.dumps(report)
    pids = _pids(pids_file, within=1)
    assert _all_gone(pids, within=10), [p for p in pids if _alive(p)]


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal and subreaper: Linux")
def test_pairs_die_with_a_sweep_killed_by_sigkill(tmp_path, model_zoo, tiny_artifacts):
    manifest, pids_file = _spawning_manifest(tmp_path / "zoo", model_zoo, tiny_artifacts)
    sweep = subprocess.Popen(
        [sys.executable, "-m", "parity", "sweep", str(manifest), "--out", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pids = _pids(pids_file)
        pair = [p for p in descendants(sweep.pid) if p not in pids]
        assert pair, "no pair process below the sweep"
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait()
        everything = [*pair, *pids]
        assert _all_gone(everything, within=15), [p for p in everything if _alive(p)]
    finally:
        sweep.kill()
        sweep.wait()
