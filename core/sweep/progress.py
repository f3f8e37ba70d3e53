"""The live progress line of a sweep: on a terminal only, so CI logs stay quiet.

    sweep 7/24 done: 5 pass, 1 fail, 1 error; 1:02 elapsed, ETA 2:31

It is redrawn when a pair finishes and every second in between, so the elapsed time moves
while long pairs run. Nothing is written when the stream is not a terminal, when TERM is
"dumb", or when CI is set (CI runners that give jobs a pseudo-terminal set it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import TextIO

from parity.sweep.execute import PairResult
from parity.sweep.summary import counts

TICK_S = 1.0
CLEAR = "\r\033[K"


def is_live(stream: TextIO) -> bool:
    """Whether a line redrawn in place reads well on `stream`."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real stream
        return False
    return tty and os.environ.get("TERM") != "dumb" and not os.environ.get("CI")


def clock(seconds: float) -> str:
    """1:02, 12:00, 1:00:05."""
    s = int(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def progress_line(total: int, results: Sequence[PairResult], skipped: int, elapsed: float) -> str:
    """The line's text; the ETA assumes the pairs still to run take what those run so far
    took (resumed pairs, which took no time, are not counted)."""
    done = len(results)
    c = counts(results)
    text = (
        f"sweep {done}/{total} done: {c['pass']} pass, {c['fail']} fail, {c['error']} error"
        f"; {clock(elapsed)} elapsed"
    )
    ran = done - skipped
    if ran > 0 and done < total:
        text += f", ETA {clock(elapsed / ran * (total - done))}"
    return text


class Progress:
    def __init__(self, total: int, *, skipped: int = 0, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.live = is_live(self.stream)
        self.total = total
        self.skipped = skipped
        self.start = time.monotonic()
        self._results: list[PairResult] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def begin(self, results: Sequence[PairResult] = ()) -> None:
        """Draw the line now (with the pairs already done) and keep it moving each second."""
        self.update(results)
        if self.live and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="parity-progress", daemon=True)
            self._ticker.start()

    def update(self, results: Sequence[PairResult]) -> None:
        with self._lock:
            self._results = list(results)
            self._draw()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self.live:
                self.stream.write(CLEAR)
                self.stream.flush()
            self.live = False

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                self._draw()

    def _draw(self) -> None:
        if not self.live:
            return
        elapsed = time.monotonic() - self.start
        line = progress_line(self.total, self._results, self.skipped, elapsed)
        self.stream.write(CLEAR + line[: self._width() - 1])  # a wrapped line cannot be redrawn
        self.stream.flush()

    def _width(self) -> int:
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
        return columns if columns > 0 else 100  # 0: a terminal that does not say
