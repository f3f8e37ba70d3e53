"""Issue 36 in real Chromium: `?run=/dev/zero` and `?run=FIFO` against a running dashboard.

Any web page the user opens can load such a URL in an invisible iframe. The server must
answer with one line naming what the path is, stay up, and not grow (the unbounded read
took it from 390 MB to 9.4 GB in 25 s).
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

from tests.browser import open_page, settle_loaded

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GROWTH_LIMIT = 512 << 20
"""The server may grow by a session's worth of pages, never by what /dev/zero holds."""


def _server_rss(port: int) -> int:
    """Resident bytes of the `streamlit run` process serving `port`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if b"streamlit" in b" ".join(argv) and str(port).encode() in argv:
            kb = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))
            return int(kb) << 10
    raise AssertionError(f"no streamlit process serves port {port}")


def test_run_url_naming_dev_zero_or_a_fifo_is_refused_with_the_server_up(
    app_url, chromium, tmp_path
):
    port = urlparse(app_url).port
    fifo = tmp_path / "run.parity.npz"
    os.mkfifo(fifo)
    before = _server_rss(port)
    for path, words in [
        ("/dev/zero", "is a character device, not a file"),
        (str(fifo), "is a named pipe, not a file"),
    ]:
        page = open_page(chromium, f"{app_url}/?run={quote(path)}")
        page.get_by_text(words).first.wait_for(timeout=120_000)
        settle_loaded(page)
        shown = [t for t in page.get_by_text(words).all_inner_texts() if "Could not open" in t]
        assert len(shown) == 1 and shown[0].count("\n") == 0, shown
        page.context.close()
    with urllib.request.urlopen(f"{app_url}/_stcore/health", timeout=30) as answer:
        assert answer.status == 200
    assert _server_rss(port) - before < GROWTH_LIMIT
