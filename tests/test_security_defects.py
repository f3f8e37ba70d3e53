"""The attack matrix's other defects (issue 49), each fixed: a float range beyond float32, a
time limit beyond any clock, a negative memory bound from the API, a second Ctrl-C, a port
held on [::1] only, and a big non-ONNX file re-read on every rerun."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.cli import main
from parity.errors import OnnxLoadError, UsageError


def _one_line(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("given", ["-1e39:1e39", "-3e38:3e38", "0:1e300"])
def test_a_float_range_beyond_float32_is_refused(given, capsys):
    err = _one_line(["validate", "--model", "demo:cnn", f"--float-range={given}"], capsys)
    assert "beyond float32's range" in err, err


def test_a_float_range_within_float32_still_runs(capsys):
    assert main(["validate", "--model", "demo:cnn", "--float-range=-1e3:1e3"]) in (0, 1)


@pytest.mark.parametrize("seconds", ["1e10", "1e308"])
def test_a_time_limit_beyond_any_clock_is_a_usage_error(seconds):
    done = subprocess.run(
        [sys.executable, "-m", "parity", "validate", "--model", "demo:cnn", "--timeout", seconds],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)  # not 134 (abort)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--timeout" in lines[0] and "onnx" not in lines[0].lower(), lines


def test_the_api_refuses_a_negative_memory_bound_or_an_endless_timeout(tiny_artifacts):
    from parity.api import validate

    with pytest.raises(UsageError, match="max_memory.*at least 1 byte"):
        validate(str(tiny_artifacts.pt2), str(tiny_artifacts.onnx), max_memory=-1)
    with pytest.raises(UsageError, match="timeout"):
        validate(str(tiny_artifacts.pt2), str(tiny_artifacts.onnx), timeout=1e308)


def test_a_second_ctrl_c_exits_2_not_130(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "validate", "--model", "demo:broken", "--layers",
         "--input-sets", "8"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _wait_until_torch_is_loaded(proc)  # however slow the import under load
    time.sleep(5)  # then the run itself (the model, the export, the layers)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=120)
    assert code == 2, (code, proc.stderr.read())


def _wait_until_torch_is_loaded(proc: subprocess.Popen, limit: float = 120.0) -> None:
    """Under load, importing takes longer than any fixed sleep: wait for libtorch to be
    mapped into the process (the run has started), however long that takes."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if "libtorch" in maps.read_text(errors="replace"):
                return
        except OSError:
            return
        time.sleep(0.2)


def test_the_port_check_sees_a_program_on_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    other = socket.socket(socket.AF_INET6)
    try:
        other.bind(("::1", 0))
    except OSError as exc:
        other.close()
        pytest.skip(f"no [::1] here: {exc}")
    other.listen(1)
    port = other.getsockname()[1]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "parity", "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        other.close()
    assert done.returncode == 2, done.stderr
    assert f"{port}" in done.stderr and "free port" in done.stderr, done.stderr


def test_a_big_non_onnx_file_is_read_once_not_on_every_rerun(tmp_path, monkeypatch):
    import parity.load.onnx_model as onnx_model
    from parity.dashboard import state

    path = tmp_path / "not-onnx.bin"
    with open(path, "wb") as fh:
        fh.write(os.urandom(1 << 20))
    reads = []
    real = onnx_model.load_onnx

    def counted(p):
        reads.append(p)
        return real(p)

    monkeypatch.setattr(onnx_model, "load_onnx", counted)
    messages = []
    for _ in range(3):  # three reruns
        with pytest.raises(OnnxLoadError) as refused:
            state.load_onnx_cached(str(path))
        messages.append(refused.value.message)
    assert len(reads) == 1 and len(set(messages)) == 1, (reads, messages)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # changed: read again
    with pytest.raises(OnnxLoadError):
        state.load_onnx_cached(str(path))
    assert len(reads) == 2
