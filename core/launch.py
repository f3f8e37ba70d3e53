"""`parity dashboard`: start the dashboard that ships in the package, from any folder.

Like `netron model.onnx` or `tensorboard --logdir runs`, one command opens on what to look
at: a saved run, a sweep folder, or a validation given by `validate`'s own flags, which runs
here first (with its progress in this terminal) and opens as a saved run with no click.
Streamlit runs in a child process, so this module never imports it; its settings are the
ones a checkout's `.streamlit/config.toml` holds (SERVER_OPTIONS, held to it by a test).

Stopping: SIGINT, SIGTERM and SIGHUP end the launcher at any point with one line and exit 2,
and Streamlit with it: it runs in its own session (so only the launcher decides when it ends),
is stopped as a process group, and on Linux dies with the launcher even if the launcher is
killed outright. The port is held from before the validation until Streamlit takes it.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from parity.errors import UsageError
from parity.verdict import ExitCode

DEFAULT_PORT = 8501
DEFAULT_HOST = "localhost"
STOP_GRACE_S = 10.0
"""How long Streamlit may take to stop after Ctrl-C before it is killed."""
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""What stops a dashboard: Ctrl-C, `kill`, and the terminal closing."""
STOPPED_LINE = "parity: dashboard stopped"
RUN_ENV = "PARITY_RUN"
"""A saved run to open in every new session (the dashboard's ?run=PATH)."""
RUN_SCRATCH_ENV = "PARITY_RUN_SCRATCH"
"""Set when PARITY_RUN is this launcher's temp copy of the run it validated: the dashboard
names the run by its model and files, never by that file."""
COMMAND_MODEL_ENV = "PARITY_COMMAND_MODEL"
"""The model spec the launcher validated (`parity dashboard --model SPEC ...`): the user typed
it, so the dashboard may run it again (Run, Suggest) without --trust-code."""
SWEEP_ENV = "PARITY_SWEEP"
"""A sweep folder to open in every new session (the dashboard's ?sweep=DIR)."""
HOSTS_ENV = "PARITY_ALLOWED_HOSTS"
"""Host names the dashboard serves under besides localhost (its DNS-rebinding check)."""

SERVER_OPTIONS: dict[str, str] = {
    "server.headless": "true",
    "server.maxUploadSize": "2048",
    "server.maxMessageSize": "200",
    "server.runOnSave": "false",
    "server.enableXsrfProtection": "true",
    "server.enableCORS": "true",
    "browser.gatherUsageStats": "false",
    "client.toolbarMode": "minimal",
    "client.showSidebarNavigation": "true",
    "theme.base": "light",
    "runner.magicEnabled": "false",
    "runner.postScriptGC": "false",
    "global.disableWidgetStateDuplicationWarning": "true",
}
"""Streamlit settings of every dashboard (the address, port and serverAddress are flags)."""
UPLOAD_OPTION = "server.maxUploadSize"
UPLOAD_LIMIT_WHERE = (
    "parity dashboard --max-upload MB; from a checkout, server.maxUploadSize in "
    ".streamlit/config.toml"
)
"""Where the uploads limit is set, as the Run page says it (an installed dashboard has no
.streamlit/ folder, and its settings are flags, which outrank Streamlit's env variables)."""

DASHBOARD_HELP = """\
Start the dashboard (bound to localhost) and print its address; Ctrl-C stops it.

  parity dashboard                                  the Run page, with the demos
  parity dashboard run.parity.npz                   open a saved run (--save-run)
  parity dashboard sweep-out/                       open a `parity sweep` folder
  parity dashboard --model demo:broken              validate first, open on the result
  parity dashboard --model m.pt2 --onnx m.onnx --input-sets 2 --layers

Sharing on a LAN: --host 0.0.0.0 binds every address, but the dashboard answers only under
the host names it trusts (DNS rebinding): localhost, and each --allow-host NAME (or the
comma-separated names in PARITY_ALLOWED_HOSTS), e.g.
  parity dashboard --host 0.0.0.0 --allow-host mybox.lan --allow-host 192.168.1.20
Everyone who can reach it can then read files this machine's user can read.

Exit status: 2 when stopped (Ctrl-C, SIGTERM or SIGHUP, while validating or serving: Streamlit
and its temp files go with it) or when it could not start (bad flags, a --port in use, a
validation that could not be made, the server failing); 0 when the server ended by itself.
A validation whose outputs fail still opens: its FAIL is on the page.
"""


def dashboard_script() -> Path:
    """The packaged dashboard's main script (parity.dashboard's main.py), found without
    importing Streamlit."""
    spec = importlib.util.find_spec("parity.dashboard")
    if spec is None or spec.origin is None:
        raise UsageError("the dashboard is not installed with this Parity (parity.dashboard)")
    return Path(spec.origin).parent / "main.py"


_CHILD_BOOT = """\
import os, signal, sys
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: end with the launcher
    if os.getppid() != {launcher}:  # it ended before prctl took hold
        sys.exit(0)
from streamlit.web.cli import main
main(prog_name="streamlit")
"""
"""`python -m streamlit`, told first to end when the launcher does (a SIGKILL leaves no
handler to stop it)."""


def streamlit_command(args: argparse.Namespace) -> list[str]:
    """The `streamlit run` command line of this dashboard."""
    max_upload = getattr(args, "max_upload", None)
    options = {
        **SERVER_OPTIONS,
        **({UPLOAD_OPTION: str(max_upload)} if max_upload is not None else {}),
        "server.address": args.host,
        "server.port": str(args.port),
        "browser.serverAddress": "localhost" if args.host in ("0.0.0.0", "::") else args.host,
    }
    flags = [f"--{key}={value}" for key, value in options.items()]
    script_args = ["--trust-code"] if args.trust_code else []
    return [
        sys.executable,
        "-c",
        _CHILD_BOOT.format(launcher=os.getpid()),
        "run",
        str(dashboard_script()),
        *flags,
        "--",
        *script_args,
    ]


def validation_given(args: argparse.Namespace) -> bool:
    return bool(args.model or args.onnx or args.reference)


class _Stopped(BaseException):
    """A stop signal landed while the launcher validated: unwinds the validation. A
    BaseException, so that no `except Exception` in the core or a library takes it for a
    failure of its own."""


class _StopSignals:
    """SIGINT, SIGTERM and SIGHUP recorded while the dashboard runs. While `unwinding`, the
    first one raises _Stopped where the launcher is; a second one (the first swallowed by a
    library) ends the process on the spot. Otherwise they are only recorded: the serving loop
    looks at them."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.unwinding = True
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self  # in-process from a thread (a test, a notebook): Python allows no handler
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if not self.unwinding:
            return
        if len(self.received) == 1:
            raise _Stopped
        _say_stopped()
        os._exit(ExitCode.ERROR)


def _say_stopped() -> None:
    """The one line a stopped dashboard prints (the terminal may be gone after SIGHUP)."""
    with suppress(OSError, ValueError):
        clear = "\r\033[K" if sys.stderr.isatty() else ""  # the validation's progress line
        print(f"{clear}{STOPPED_LINE}", file=sys.stderr, flush=True)


def dashboard_main(args: argparse.Namespace, validate) -> int:
    """Run the validation the flags give (if any), then serve until stopped. `validate`
    is the CLI's own (args -> ValidationRun), so the run is the one `parity validate` makes.
    A stop signal at any point ends it with STOPPED_LINE and exit 2."""
    with _StopSignals() as stop:
        try:
            return _dashboard(args, validate, stop)
        except _Stopped:
            pass
        except BaseException:
            if not stop.received:
                raise
            # an interrupt a library turned into an error of its own ("export failed: ...")
        _say_stopped()
        return ExitCode.ERROR


def _dashboard(args: argparse.Namespace, validate, stop: _StopSignals) -> int:
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: give a port between 1 and 65535")
    if getattr(args, "max_upload", None) is not None and args.max_upload < 1:
        raise UsageError(f"--max-upload {args.max_upload}: give a size in MB, at least 1")
    env = dict(os.environ)
    if args.allow_host:
        names = [n for n in env.get(HOSTS_ENV, "").split(",") if n.strip()] + args.allow_host
        env[HOSTS_ENV] = ",".join(names)
    if validation_given(args) and args.path:
        raise UsageError(f"give either PATH ({args.path}) or a model to validate, not both")
    scratch = None
    try:
        with _held_port(args.host, args.port):  # refused in seconds, before any validation
            if validation_given(args):
                from parity.reports.saved_run import save_run

                run = validate(args)
                scratch = Path(tempfile.mkdtemp(prefix="parity-dashboard-"))
                env[RUN_ENV] = str(save_run(run, scratch / "run.parity.npz"))
                env[RUN_SCRATCH_ENV] = "1"
                if run.provenance.config and run.provenance.config.get("model"):
                    env[COMMAND_MODEL_ENV] = str(run.provenance.config["model"])
            elif args.path:
                path = Path(args.path).expanduser()
                if path.is_dir():
                    env[SWEEP_ENV] = str(path.resolve())
                elif path.is_file():
                    env[RUN_ENV] = str(path.resolve())
                else:
                    from parity.files.kinds import not_a_regular_file

                    kind = not_a_regular_file(path)  # a FIFO, a device: named for what it is
                    if kind in ("", "missing"):
                        raise UsageError(f"{args.path}: no such saved run or sweep folder")
                    raise UsageError(f"{args.path} is {kind}, not a saved run or sweep folder")
        return _serve(streamlit_command(args), env, args, stop)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _held_port(host: str, port: int) -> Iterator[None]:
    """Listen on `host`:`port` for the block, as Streamlit will (every address the host
    resolves to), so that a port in use is refused now and nobody takes it meanwhile;
    UsageError naming --port (and a free one) if it is taken."""
    held = _listen(host, port)
    if held is None:
        raise UsageError(
            f"--port {port}: another program (another dashboard?) is listening on "
            f"{host}:{port}; choose a free port, e.g. --port {_free_port(host, port)}"
        )
    try:
        yield
    finally:
        for sock in held:
            sock.close()


def _listen(host: str, port: int) -> list[socket.socket] | None:
    """Sockets listening on every address of `host` at `port` (tornado's binding: address
    reuse on, IPv6 sockets IPv6 only, an absent ::1 skipped); None if the port is taken."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: not an address of this machine ({exc.strerror})") from exc
    if host in ("localhost", "127.0.0.1", "::1"):  # the browser's localhost may be either one
        infos = [*infos, *_loopbacks(port)]
    held: list[socket.socket] = []
    seen = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address[:2]) in seen:
                continue
            seen.add((family, address[:2]))
            sock = socket.socket(family, kind, proto)
            held.append(sock)
            if os.name != "nt":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
                sock.listen(1)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    for s in held:
                        s.close()
                    return None
                if family == socket.AF_INET6 and exc.errno == errno.EADDRNOTAVAIL:
                    continue  # no IPv6 loopback here: tornado skips it too
                raise UsageError(f"--host {host}: cannot listen on {address[0]}: {exc}") from exc
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


def _loopbacks(port: int) -> list:
    """127.0.0.1 and [::1] at `port` (getaddrinfo("localhost") may give only one, while a
    browser opening http://localhost:PORT tries both: another program on [::1] would get it)."""
    found = []
    for family, address in (
        (socket.AF_INET, ("127.0.0.1", port)),
        (socket.AF_INET6, ("::1", port, 0, 0)),
    ):
        if family == socket.AF_INET6 and not socket.has_ipv6:
            continue
        found.append((family, socket.SOCK_STREAM, 0, "", address))
    return found


def _free_port(host: str, port: int) -> int:
    """A port near `port` that is free on `host` now (else one the system picks)."""
    for candidate in range(port + 1, min(port + 50, 65536)):
        with suppress(UsageError):
            held = _listen(host, candidate)
            if held is not None:
                for sock in held:
                    sock.close()
                return candidate
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(
    command: list[str], env: dict[str, str], args: argparse.Namespace, stop: _StopSignals
) -> int:
    """Run Streamlit in its own session until it ends or a stop signal comes; then stop its
    process group. Signals are only recorded here (no exception can land between starting
    Streamlit and stopping it)."""
    stop.unwinding = False
    if stop.received:
        raise _Stopped
    shown = "localhost" if args.host in ("0.0.0.0", "::") else args.host
    print(f"Parity dashboard: http://{shown}:{args.port}/  (Ctrl-C stops it)", flush=True)
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        code = _wait(proc, stop)
    finally:
        _stop_group(proc)
    if stop.received:
        raise _Stopped
    if code != 0:
        print(f"parity: error: the dashboard's server ended with exit {code}", file=sys.stderr)
        return ExitCode.ERROR
    return code


def _wait(proc: subprocess.Popen[bytes], stop: _StopSignals) -> int:
    """Streamlit's exit status. After a stop signal its group gets SIGTERM (Streamlit's own
    clean shutdown) and is killed if still running STOP_GRACE_S later."""
    stopping_since = None
    while True:
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if not stop.received:
                continue
            if stopping_since is None:
                stopping_since = time.monotonic()
                _signal_group(proc, signal.SIGTERM)
            elif time.monotonic() > stopping_since + STOP_GRACE_S:
                _signal_group(proc, _KILL)
                return proc.wait()


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Whatever of Streamlit's process group is left: killed, Streamlit reaped."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)
    _signal_group(proc, _KILL)
    proc.wait()


_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signum)
        else:  # pragma: no cover - Windows: no process groups
            proc.send_signal(signum)
