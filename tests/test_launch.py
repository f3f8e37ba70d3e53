"""`parity dashboard` ends when told (issue 37): SIGTERM, SIGHUP or Ctrl-C at any point ends
the launcher with one line and exit 2, Streamlit and every process it started with it, and its
temp folder gone; a port in use is refused before any validation runs.

Each test starts a real `python -m parity dashboard` (this checkout, through PARITY_SRC) with
TMPDIR pointed at the test's folder, so that the launcher's temp folder can be looked for.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from parity.launch import STOPPED_LINE
from tests.helpers.browser import RUN_TIMEOUT_MS, free_port, serving, settle

pytestmark = pytest.mark.slow


class Dashboard:
    """A `parity dashboard ARGS --port P` subprocess in its own session (signals reach the
    launcher alone, as `kill PID` sends them), its stdout and stderr in files."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://localhost:{self.port}"
        self.temp = tmp_path / "tmp"
        self.temp.mkdir()
        self.out, self.err = tmp_path / "stdout", tmp_path / "stderr"
        command = [sys.executable, "-m", "parity", "dashboard", *args, "--port", str(self.port)]
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                env={**os.environ, "TMPDIR": str(self.temp), **(env or {})},
                start_new_session=True,
            )  # fmt: skip

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self, signum: int) -> int:
        os.kill(self.proc.pid, signum)
        return self.proc.wait(timeout=120)

    def stderr(self) -> str:
        return self.err.read_text()

    def kill(self) -> None:
        """Whatever a failed test left: the launcher, and what it started."""
        if self.proc.poll() is None:
            for child in self.children():
                child.kill()
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def dashboards():
    started: list[Dashboard] = []
    yield started
    for dashboard in started:
        dashboard.kill()


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _gone(processes: list[psutil.Process], within_s: float = 10.0) -> bool:
    """Whether every process has ended (orphans are reaped by init, which may take a moment)."""
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in processes):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_while_serving_ends_streamlit_and_removes_the_temp_folder(
    tmp_path, dashboards, signum
):
    dashboard = Dashboard(tmp_path, "--model", "demo:cnn")
    dashboards.append(dashboard)
    assert serving(dashboard.url, dashboard.proc, within_s=600), dashboard.stderr()[-3000:]
    with urllib.request.urlopen(dashboard.url, timeout=10) as page:
        assert page.status == 200
    assert list(dashboard.temp.glob("parity-dashboard-*/run.parity.npz"))  # the run it serves
    children = dashboard.children()
    assert children, "Streamlit runs as the launcher's child"

    code = dashboard.stop(signum)

    stderr = dashboard.stderr()
    assert code == 2, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == STOPPED_LINE
    assert "Traceback" not in stderr
    assert _gone(children), [p.cmdline() for p in children if _alive(p)]
    assert not _answers(dashboard.port)
    assert not list(dashboard.temp.glob("parity-dashboard-*"))


def test_ctrl_c_during_the_demos_export_prints_one_line_and_exits_2(tmp_path, dashboards):
    """The demo's export starts on a cold cache (its lock file appears); Ctrl-C lands in it."""
    cache = tmp_path / "cache"
    # a real export (not the shipped one copied in): the interrupt must land inside torch's
    env = {"PARITY_CACHE_DIR": str(cache), "PARITY_DEMO_SHIPPED": "0"}
    dashboard = Dashboard(tmp_path, "--model", "demo:cnn", env=env)
    dashboards.append(dashboard)
    deadline = time.monotonic() + 300
    while not (cache / ".parity-export.lock").exists():
        assert dashboard.proc.poll() is None, dashboard.stderr()[-3000:]
        assert time.monotonic() < deadline, "the demo's export did not start"
        time.sleep(0.05)

    code = dashboard.stop(signal.SIGINT)

    stderr = dashboard.stderr()
    assert code == 2, stderr[-3000:]
    assert stderr.strip().splitlines() == [STOPPED_LINE]
    assert "Parity dashboard: http" not in dashboard.out.read_text()  # it never served
    assert not _answers(dashboard.port)
    assert not list(cache.glob("*.onnx"))  # no half-written export left as the demo's file


def test_a_port_in_use_is_refused_before_any_validation(tmp_path, dashboards):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "parity", "dashboard", "--model", "demo:cnn",
             "--port", str(port)],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PARITY_CACHE_DIR": str(tmp_path / "cache")},
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"parity: error: --port {port}:") and "e.g. --port " in line
    suggested = int(line.rsplit("--port ", 1)[1])
    assert suggested != port
    assert result.stdout == ""  # no validation table, no URL
    assert not (tmp_path / "cache").exists()  # the demo was never exported


def test_help_documents_the_exit_codes():
    from parity.cli import build_parser

    parser = build_parser()
    text = parser._subparsers._group_actions[0].choices["dashboard"].format_help()
    assert "Exit status: 2 when stopped" in text and "SIGHUP" in text


@pytest.mark.browser
def test_max_upload_sets_the_limit_of_an_installed_dashboard(tmp_path, dashboards, chromium):
    """An installed dashboard has no .streamlit/config.toml: --max-upload is where its limit
    is set (its settings are flags, which outrank STREAMLIT_* variables), and the Run page
    says so."""
    dashboard = Dashboard(tmp_path, "--max-upload", "7")
    dashboards.append(dashboard)
    assert serving(dashboard.url, dashboard.proc, within_s=300), dashboard.stderr()[-3000:]
    context = chromium.new_context(viewport={"width": 1400, "height": 1600})
    try:
        page = context.new_page()
        page.set_default_timeout(RUN_TIMEOUT_MS)
        page.goto(dashboard.url)
        page.get_by_text("Uploads up to 7 MB").first.wait_for()  # the server's own option
        settle(page)
        body = page.locator("body").inner_text()
    finally:
        context.close()
    assert "set with parity dashboard --max-upload MB" in body, body


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_streamlit_does_not_outlive_a_launcher_killed_outright(tmp_path, dashboards):
    """SIGKILL leaves the launcher no handler: Streamlit was told at its start to end with
    its parent (what the temp folder then holds is left behind)."""
    dashboard = Dashboard(tmp_path)
    dashboards.append(dashboard)
    assert serving(dashboard.url, dashboard.proc, within_s=300), dashboard.stderr()[-3000:]
    children = dashboard.children()
    assert children

    assert dashboard.stop(signal.SIGKILL) == -signal.SIGKILL

    assert _gone(children, within_s=30), [p.cmdline() for p in children if _alive(p)]
    assert not _answers(dashboard.port)


def test_a_signal_inside_the_models_call_still_reads_stopped(tmp_path, dashboards):
    """The torch run wraps whatever its model raises into a ModelRunError; a stop signal that
    lands inside the model's forward is still the stop, not "torch model raised ..."."""
    import torch

    factory = tmp_path / "selfstop.py"
    factory.write_text(
        "import os, signal, torch\n"
        "class SelfStop(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        return x * 2\n"
        "def make():\n"
        "    return SelfStop()\n"
    )
    onnx_path = tmp_path / "double.onnx"

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    torch.onnx.export(Double(), (torch.zeros(2, 3),), str(onnx_path), dynamo=False)
    dashboard = Dashboard(tmp_path, "--model", f"{factory}:make", "--onnx", str(onnx_path))
    dashboards.append(dashboard)
    code = dashboard.proc.wait(timeout=300)
    stderr = dashboard.stderr()
    assert code == 2, stderr[-3000:]
    assert stderr.strip().splitlines() == [STOPPED_LINE]
    assert "Parity dashboard: http" not in dashboard.out.read_text()
