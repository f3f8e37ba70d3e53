"""A Ray cluster on this machine whose only worker node cannot see the driver's files.

The head starts with no CPUs (no task runs there); the one worker node starts inside a
private mount namespace (`unshare --mount --propagation private`, root only) with a tmpfs
mounted over each `hidden` folder, so a task sees empty folders where the driver keeps the
zoo and --out: a cluster that shares no filesystem, as KubeRay's pods do. Token
authentication is on, with a token of this cluster's own in the environment.

Every Ray daemon of the cluster has the cluster's own temp folder in its command line; `stop`
kills exactly those and what they started (never `ray stop`, which would stop other people's
Ray on this machine).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.helpers.moto_s3 import Moto

RAY = [sys.executable, "-m", "ray.scripts.scripts"]


class Unavailable(Exception):
    """Why this machine cannot make such a cluster (e.g. unshare refused: not root)."""


@dataclass
class IsolatedCluster:
    base: Path
    address: str
    client_address: str
    env: dict[str, str]
    """RAY_AUTH_MODE, RAY_AUTH_TOKEN: what a driver needs (os.environ excluded)."""
    hidden: tuple[Path, ...] = ()
    """The folders a worker node sees as empty tmpfs."""
    worker_env: tuple[tuple[str, str], ...] = ()
    """More environment for the worker nodes (e.g. the S3 endpoint their pairs read)."""

    def add_worker_node(self, cpus: int = 1, timeout: float = 120) -> None:
        """Start one more worker node, as private as the first (a replacement joining)."""
        _start_worker(self, cpus, timeout)

    def wait_for_no_cpus(self, timeout: float = 120) -> None:
        """Until the cluster's resources show no CPU: its worker nodes' loss seen by the GCS."""
        _run(
            [sys.executable, "-c", WAIT_FOR_NO_CPUS, self.address, str(timeout)],
            {**os.environ, **self.env},
            timeout + 30,
        )

    def stop(self) -> None:
        """SIGKILL every process that names this cluster's temp folder and all they started
        (Ray renames its workers "ray::...": found as descendants), then remove the folder."""
        from parity.sweep.pair_process import descendants

        mine = str(self.base)
        for _ in range(5):
            roots = _pids_mentioning(mine)
            pids = roots + [pid for root in roots for pid in descendants(root)]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)
        shutil.rmtree(self.base, ignore_errors=True)

    def kill_worker_node(self) -> list[int]:
        """SIGKILL the worker node (its daemons: those of this cluster in another mount
        namespace) and all they started, as a lost machine; the pids killed."""
        from parity.sweep.pair_process import descendants

        ours = os.readlink("/proc/self/ns/mnt")
        roots = []
        for pid in _pids_mentioning(str(self.base)):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/mnt") != ours:
                    roots.append(pid)
        pids = roots + [p for root in roots for p in descendants(root)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids


def _commands(text: str) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd:
            found.append((int(entry.name), cmd))
    return found


def _pids_mentioning(text: str) -> list[int]:
    return [pid for pid, _ in _commands(text)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_unshare() -> None:
    """Unavailable (with the reason) where a private mount namespace cannot be made."""
    if shutil.which("unshare") is None:
        raise Unavailable("no unshare command")
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise Unavailable(f"unshare --mount refused: {done.stderr.strip() or done.returncode}")


@contextlib.contextmanager
def for_module(hidden: list[Path], s3: Moto | None = None) -> Iterator[IsolatedCluster]:
    """A test module's cluster, its worker reaching `s3` (the session's moto server, where
    there is one), stopped after; the module's tests skipped, with the reason, where no private
    mount namespace can be made here."""
    import pytest

    try:
        made = start(hidden, worker_env=s3.env if s3 is not None else None)
    except Unavailable as exc:
        pytest.skip(f"no private mount namespace here: {exc}")
    try:
        yield made
    finally:
        made.stop()


def start(
    hidden: list[Path],
    *,
    worker_cpus: int = 1,
    timeout: float = 120,
    worker_env: dict[str, str] | None = None,
) -> IsolatedCluster:
    check_unshare()
    base = Path(tempfile.mkdtemp(prefix="prt-", dir="/tmp"))  # short: Ray's socket paths
    port, client = _free_port(), _free_port()
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env_all = {**os.environ, **env, "RAY_USAGE_STATS_ENABLED": "0"}
    address = f"127.0.0.1:{port}"
    cluster = IsolatedCluster(
        base,
        address,
        f"ray://127.0.0.1:{client}",
        env,
        tuple(hidden),
        tuple((worker_env or {}).items()),
    )
    common = ["--disable-usage-stats", "--object-store-memory", str(100 << 20)]
    try:
        head = [
            *RAY, "start", "--head", "--num-cpus=0", f"--port={port}",
            f"--temp-dir={base}/t", "--include-dashboard=false",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={_free_port()}", "--node-ip-address=127.0.0.1",
            *common,
        ]  # fmt: skip
        _run(head, env_all, timeout)
        _start_worker(cluster, worker_cpus, timeout)
        _wait_for_cpus(cluster, worker_cpus, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start_worker(cluster: IsolatedCluster, cpus: int, timeout: float) -> None:
    """A worker node in a private mount namespace with a tmpfs over each hidden folder."""
    env_all = {**os.environ, **cluster.env, **dict(cluster.worker_env)}
    env_all["RAY_USAGE_STATS_ENABLED"] = "0"
    common = ["--disable-usage-stats", "--object-store-memory", str(100 << 20)]
    mounts = " && ".join(f"mount -t tmpfs tmpfs '{p}'" for p in cluster.hidden)
    worker = " ".join(
        [
            *RAY,
            "start",
            f"--address={cluster.address}",
            f"--num-cpus={cpus}",
            f"--dashboard-agent-listen-port={_free_port()}",
            "--node-ip-address=127.0.0.1",
            *common,
        ]  # fmt: skip
    )
    for p in cluster.hidden:
        p.mkdir(parents=True, exist_ok=True)
    script = f"{mounts} && {worker}" if mounts else worker
    _run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], env_all, timeout)


def _run(command: list[str], env: dict[str, str], timeout: float) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])}... failed: {done.stderr[-2000:]}")


WAIT_FOR_CPUS = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
deadline = time.monotonic() + float(sys.argv[3])
while ray.cluster_resources().get("CPU", 0) < float(sys.argv[2]):
    if time.monotonic() > deadline:
        sys.exit("the worker node never joined")
    time.sleep(0.5)
"""


WAIT_FOR_NO_CPUS = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
deadline = time.monotonic() + float(sys.argv[2])
while ray.cluster_resources().get("CPU", 0) > 0:
    if time.monotonic() > deadline:
        sys.exit("the cluster still shows CPUs")
    time.sleep(0.5)
"""


def _wait_for_cpus(cluster: IsolatedCluster, cpus: int, timeout: float) -> None:
    _run(
        [sys.executable, "-c", WAIT_FOR_CPUS, cluster.address, str(cpus), str(timeout)],
        {**os.environ, **cluster.env},
        timeout + 30,
    )
