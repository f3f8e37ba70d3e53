"""Peak resident memory, as the benches read it (not a bench: the ones that measure memory
import it).

A process's ru_maxrss is no measure of its own peak when it was made by fork + exec (Python's
subprocess: vfork + exec): the kernel starts it at the parent's high-water mark, so a bench
whose driver has built a model reads the driver's gigabytes in every child. Two readings
that count one process's own memory only:

- `own_peak_bytes()`: this process's VmHWM (/proc/self/status), ru_maxrss only where /proc
  is absent (tests/test_security_bounds.py reads it the same way);
- `command_peak(command)`: a command's peak, its forked children's included (`parity
  validate` runs its work in a forked child: parity.cli.supervise), from a fresh wrapper
  process (this file run as a script) that runs it and reads RUSAGE_CHILDREN: the command
  starts from the wrapper's few megabytes, never the bench's, and VmHWM of a process that
  has exited cannot be read.

Standard library only: the wrapper must stay small.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


def _maxrss_bytes(who: int) -> int:
    """getrusage's ru_maxrss in bytes (kilobytes on Linux, bytes on macOS)."""
    value = resource.getrusage(who).ru_maxrss
    return value if sys.platform == "darwin" else value * 1024


def own_peak_bytes() -> int:
    """This process's peak resident memory since it started (VmHWM)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _maxrss_bytes(resource.RUSAGE_SELF)


@dataclass(frozen=True)
class CommandPeak:
    """What `command_peak` measured of one command."""

    returncode: int
    seconds: float  # wall time of the command alone
    peak_bytes: int  # its peak resident memory, its children's included
    stderr: str  # the last 2,000 characters of its stderr


def command_peak(
    command: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> CommandPeak:
    """Run `command` (stdout discarded) in a fresh wrapper process and measure it."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *command],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        env=env,
    )
    return CommandPeak(**json.loads(out.stdout.strip().splitlines()[-1]))


def _wrapper(command: list[str]) -> None:
    t0 = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - t0
    peak = _maxrss_bytes(resource.RUSAGE_CHILDREN)
    stderr = done.stderr.decode(errors="replace")[-2000:]
    found = {"returncode": done.returncode, "seconds": seconds, "peak_bytes": peak}
    print(json.dumps({**found, "stderr": stderr}))


if __name__ == "__main__":
    _wrapper(sys.argv[1:])
