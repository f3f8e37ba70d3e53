"""The process a sweep pair runs in: `python -m parity.sweep.pair_process PARENT validate ...`.

It runs `parity validate` as its child and answers for everything that child starts:

- it dies with the sweep: Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) sends it
  SIGTERM when the sweep's process ends, even by ``kill -9``, so no pair runs on as an
  orphan without a timeout (and it exits at once if the sweep was gone before that was set);
- it is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a grandchild that left the process
  group with ``setsid`` is still its descendant, found through /proc and killed when it is
  stopped (SIGTERM: the sweep's timeout or interrupt) and when validate ends.

Its exit status is validate's (a validate killed by a signal makes it die by that signal),
so `parity.sweep.execute` reads it as before. Off Linux it only runs validate.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_UNCATCHABLE = (signal.SIGKILL, signal.SIGSTOP)


def command(args: list[str] | tuple[str, ...]) -> list[str]:
    """The command line that runs `parity validate ARGS` as a pair of this process."""
    return [sys.executable, "-P", "-m", "parity.sweep.pair_process", str(os.getpid()), *args]


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: no prctl
        return False


def descendants(root: int) -> list[int]:
    """Every process below `root` (by /proc parent links), deepest last; [] without /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def kill_descendants() -> None:
    """SIGKILL every descendant until none is left (a dying one may still fork), reaping."""
    for _ in range(50):
        pids = descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    parent, args = int(argv[0]), argv[1:]
    linux = _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if linux and os.getppid() != parent:  # the sweep died before the signal was set
        return 128 + signal.SIGTERM
    linux = linux and _prctl(PR_SET_CHILD_SUBREAPER, 1)
    stopped: list[int] = []

    def stop(signum: int, frame: object) -> None:
        stopped.append(signum)
        kill_descendants()

    for signum in _STOP_SIGNALS:
        signal.signal(signum, stop)
    # unsupervised: this process names the pair's signal itself (parity.cli.supervise)
    env = {**os.environ, "PARITY_NO_SUPERVISE": "1"}
    proc = subprocess.Popen([sys.executable, "-P", "-m", "parity", *args], env=env)
    if stopped:  # stopped while it started
        kill_descendants()
    code = proc.wait()
    if linux:
        kill_descendants()
    if stopped:
        return 128 + stopped[0]
    if code < 0:  # die the way validate died, so the sweep reads the same signal
        die_by(-code)
    return code


def die_by(signum: int) -> None:
    """End this process by `signum`. SIGKILL and SIGSTOP take no handler (signal.signal
    raises for them) and need none: SIGKILL is sent as it is; any other signal gets its
    default action first, so a handler cannot swallow it."""
    if signum not in _UNCATCHABLE:
        with suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum if signum != signal.SIGSTOP else signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
