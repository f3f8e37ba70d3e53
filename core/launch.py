"""`parity dashboard`: start the dashboard that ships in the package, from any folder.

Like `netron model.onnx` or `tensorboard --logdir runs`, one command opens on what to look
at: a saved run, a sweep folder, or a validation given by `validate`'s own flags, which runs
here first (with its progress in this terminal) and opens as a saved run with no click.
Streamlit runs in a child process, so this module never imports it; its settings are the
ones a checkout's `.streamlit/config.toml` holds (SERVER_OPTIONS, held to it by a test).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from parity.errors import UsageError

DEFAULT_PORT = 8501
DEFAULT_HOST = "localhost"
STOP_GRACE_S = 10.0
"""How long Streamlit may take to stop after Ctrl-C before it is killed."""
RUN_ENV = "PARITY_RUN"
"""A saved run to open in every new session (the dashboard's ?run=PATH)."""
RUN_SCRATCH_ENV = "PARITY_RUN_SCRATCH"
"""Set when PARITY_RUN is this launcher's temp copy of the run it validated: the dashboard
names the run by its model and files, never by that file."""
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
}
"""Streamlit settings of every dashboard (the address, port and serverAddress are flags)."""

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
"""


def add_dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    """The dashboard's own flags; `validate`'s model flags are added by the caller."""
    parser.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="a saved run (.parity.npz) or a `parity sweep` folder to open",
    )
    serve = parser.add_argument_group("dashboard")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--host",
        default=DEFAULT_HOST,
        metavar="ADDR",
        help=f"address to bind (default {DEFAULT_HOST}); see --allow-host for 0.0.0.0",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name (or IP) the dashboard may be opened under besides localhost "
        "(repeatable; needed with --host 0.0.0.0)",
    )
    serve.add_argument(
        "--trust-code",
        action="store_true",
        help="let the dashboard load TorchScript files and Python factories (code) that "
        "users upload or name: everyone who can reach it can then run code here",
    )


def dashboard_script() -> Path:
    """The packaged dashboard's main script (parity.dashboard's main.py), found without
    importing Streamlit."""
    spec = importlib.util.find_spec("parity.dashboard")
    if spec is None or spec.origin is None:
        raise UsageError("the dashboard is not installed with this Parity (parity.dashboard)")
    return Path(spec.origin).parent / "main.py"


def streamlit_command(args: argparse.Namespace) -> list[str]:
    """The `streamlit run` command line of this dashboard."""
    options = {
        **SERVER_OPTIONS,
        "server.address": args.host,
        "server.port": str(args.port),
        "browser.serverAddress": "localhost" if args.host in ("0.0.0.0", "::") else args.host,
    }
    flags = [f"--{key}={value}" for key, value in options.items()]
    script_args = ["--trust-code"] if args.trust_code else []
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(dashboard_script()),
        *flags,
        "--",
        *script_args,
    ]


def validation_given(args: argparse.Namespace) -> bool:
    return bool(args.model or args.onnx or args.reference)


def dashboard_main(args: argparse.Namespace, validate) -> int:
    """Run the validation the flags give (if any), then serve until Ctrl-C. `validate`
    is the CLI's own (args -> ValidationRun), so the run is the one `parity validate` makes."""
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: give a port between 1 and 65535")
    env = dict(os.environ)
    if args.allow_host:
        names = [n for n in env.get(HOSTS_ENV, "").split(",") if n.strip()] + args.allow_host
        env[HOSTS_ENV] = ",".join(names)
    scratch = None
    try:
        if validation_given(args):
            if args.path:
                raise UsageError(f"give either PATH ({args.path}) or a model to validate, not both")
            from parity.reports.saved_run import save_run

            run = validate(args)
            scratch = Path(tempfile.mkdtemp(prefix="parity-dashboard-"))
            env[RUN_ENV] = str(save_run(run, scratch / "run.parity.npz"))
            env[RUN_SCRATCH_ENV] = "1"
        elif args.path:
            path = Path(args.path).expanduser()
            if path.is_dir():
                env[SWEEP_ENV] = str(path.resolve())
            elif path.is_file():
                env[RUN_ENV] = str(path.resolve())
            else:
                raise UsageError(f"{args.path}: no such saved run or sweep folder")
        return _serve(streamlit_command(args), env, args)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _serve(command: list[str], env: dict[str, str], args: argparse.Namespace) -> int:
    """Run Streamlit until it ends; Ctrl-C stops it cleanly. SIGINT is caught by a handler,
    not as KeyboardInterrupt: a terminal sends it to Streamlit too, which may then exit
    before this process raised, and an interrupt landing just after `wait` returned would
    escape as a traceback."""
    shown = "localhost" if args.host in ("0.0.0.0", "::") else args.host
    print(f"Parity dashboard: http://{shown}:{args.port}/  (Ctrl-C stops it)", flush=True)
    interrupted: list[float] = []
    previous = signal.signal(
        signal.SIGINT, lambda signum, frame: interrupted.append(time.monotonic())
    )
    try:
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
        code = _wait(proc, interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)
    if not interrupted:
        return code
    print("parity: dashboard stopped", file=sys.stderr)
    return 0


def _wait(proc: subprocess.Popen[bytes], interrupted: list[float]) -> int:
    """Streamlit's exit status. After Ctrl-C it gets one SIGINT of its own (`kill -INT` to
    this process alone must stop it too) and is killed if still running STOP_GRACE_S later."""
    forwarded = False
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            if not interrupted:
                continue
            if not forwarded:
                forwarded = True
                with suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGINT)
            elif time.monotonic() > interrupted[0] + STOP_GRACE_S:
                proc.kill()
                return proc.wait()
