"""The live progress line of a sweep: on a terminal only, so CI logs stay quiet."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from core.sweep.summary import counts


class Progress:
    def __init__(self, total: int, *, skipped: int = 0, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.live = self.stream.isatty()
        self.total = total
        self.skipped = skipped
        self.start = time.monotonic()

    def update(self, results: list) -> None:
        if not self.live:
            return
        done = len(results)
        c = counts(results)
        elapsed = time.monotonic() - self.start
        ran = done - self.skipped
        eta = ""
        if 0 < ran and done < self.total:
            eta = f", ETA {elapsed / ran * (self.total - done):.0f}s"
        self.stream.write(
            f"\r\033[K[{elapsed:6.1f}s] {done}/{self.total} done: {c['pass']} pass, "
            f"{c['fail']} fail, {c['error']} error{eta}"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()
