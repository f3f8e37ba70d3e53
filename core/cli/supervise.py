"""The `parity` console script: a command that runs models (validate, report) runs in a
forked child while this process waits, so a native crash that kills it (SIGSEGV in ONNX
Runtime's optimiser, glibc's SIGABRT inside torch's FX interpreter, the kernel's SIGKILL out of
memory) ends in one line instead of a bare exit 139: what died, in which step (the child's
last progress step, parity.run.progress.leave_crumbs) and what to try; exit 2. The fork is
made before torch or ONNX Runtime is imported and costs milliseconds. `main()` itself (the
tests', the API's callers') runs in-process as before; PARITY_NO_SUPERVISE=1 turns it off (a
sweep's pairs: parity.sweep.pair_process names their signals itself, and a sweep killed takes
its pairs with it).

The child dies with this process (Linux's parent-death signal: a `kill -9` or a SIGHUP of the
console script never leaves a run going on alone). A stop (SIGTERM, SIGINT, SIGHUP: a CI
timeout) is said as one (`parity: stopped`), not as a crash. A child that exits without
having said how it ended (a model's `os._exit(0)` in its factory or forward) is exit 2 with
one line, never a silent 0 that CI reads as a pass. Every line goes through
parity.text.terminal_text: the step's text holds names from the files."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from parity.run.progress import ENDED
from parity.text import terminal_text
from parity.verdict import ExitCode

PR_SET_PDEATHSIG = 1

SUPERVISED = ("validate", "report")  # a sweep says each pair's crash itself (pair_process)


def console() -> None:
    """The console script's entry point: `main()` in a supervised child (module doc)."""
    from parity.cli.run import main

    argv = sys.argv[1:]
    if (
        not hasattr(os, "fork")
        or os.environ.get("PARITY_NO_SUPERVISE") == "1"
        or not argv
        or argv[0] not in SUPERVISED
    ):
        sys.exit(main())
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: the run itself
        os.close(read)
        _die_with(parent)
        from parity.run.progress import leave_crumbs, say_ended

        leave_crumbs(write)
        try:
            code = main()
        finally:  # argparse's usage error or --help (SystemExit) has said its piece too
            say_ended()
        sys.exit(code)
    os.close(write)
    sys.exit(_wait(pid, read))


def _die_with(parent: int) -> None:
    """This (child) process gets SIGKILL when `parent` ends, however it ends (Linux); it ends
    now if the parent is gone already."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no prctl
        return
    if os.getppid() != parent:
        os._exit(int(ExitCode.ERROR))


def _wait(pid: int, read: int) -> int:
    """The child's exit code; a death by signal said in one line (exit 2)."""

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and _from_terminal():
            return  # the terminal's Ctrl-C reached the child too: it is the child's
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGHUP, forward)
    last, pending, ended = "", b"", False
    while chunk := _read(read):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for crumb in lines:
            if crumb + b"\n" == ENDED:
                ended = True
            else:
                last = crumb.decode("utf-8", "replace")
        pending = pending[-4096:]  # a crumb is at most 500 characters
    os.close(read)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        line = stop_line(number, last) if number in STOPS else crash_line(number, last)
        print(terminal_text(line, lines=True), file=sys.stderr, flush=True)
        return int(ExitCode.ERROR)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else int(ExitCode.ERROR)
    if not ended:
        print(terminal_text(ended_line(code, last), lines=True), file=sys.stderr, flush=True)
        return int(ExitCode.ERROR)
    return code


def _from_terminal() -> bool:
    """This process group is a terminal's foreground one: its Ctrl-C went to every process
    in it, the child included (a signal sent to this pid alone must be passed on)."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except (AttributeError, OSError, ValueError):
            continue
    return False


def _read(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 65536)
        except InterruptedError:
            continue


STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals that stop a run (a CI timeout, Ctrl-C, a closed terminal): said as a stop."""


def _step_text(crumb: str) -> tuple[str, str]:
    """(step, ' while MESSAGE' or ' before its first step'), the message escaped."""
    step, _, message = crumb.partition("\t")
    where = f" while {terminal_text(message)}" if message else " before its first step"
    return terminal_text(step), where


def stop_line(number: int, crumb: str) -> str:
    """``parity: stopped (SIGTERM) while ...``: a run ended from outside, not a crash."""
    _, where = _step_text(crumb)
    return f"parity: stopped ({signal.Signals(number).name}){where}"


def ended_line(code: int, crumb: str) -> str:
    """The run's process exited without a verdict or an error said: the model's code ended it."""
    _, where = _step_text(crumb)
    return (
        f"parity: error: the run ended without a result: its process exited with status {code}"
        f"{where}, with no verdict and no error said (did the model's code call os._exit or "
        "exit?)"
    )


_SIGNALS = {
    "SIGSEGV": "a segmentation fault",
    "SIGABRT": "an abort",
    "SIGBUS": "a bus error",
    "SIGILL": "an illegal instruction",
    "SIGFPE": "an arithmetic fault",
    "SIGKILL": "killed, most often by the system out of memory",
}


def crash_line(number: int, crumb: str) -> str:
    """``parity: error: ...``: the signal, the step it died in, what to try."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    what = f"{name}, {_SIGNALS[name]}" if name in _SIGNALS else name
    step, where = _step_text(crumb)
    message = crumb.partition("\t")[2]
    if name == "SIGKILL":
        tip = "try --max-memory, fewer or smaller --input-sets, or a machine with more memory"
    elif step == "layers":
        tip = (
            "the outputs' verdict was made before it; retry without --layers (a dynamo "
            "export's layers run torch's FX interpreter, a legacy export's do not)"
        )
    elif step == "onnx" or (step == "load" and "ONNX" in message):
        tip = "ONNX Runtime's native code: try --ort-opt-level disable, or another --provider"
    elif step in ("torch", "load"):
        tip = "the torch model's native code: run it alone on these inputs to see it"
    else:
        tip = "run again with --debug to see the native libraries' own messages"
    return (
        f"parity: error: the process crashed in native code ({what}){where} ({step or 'start'}"
        f"); {tip}"
    )
