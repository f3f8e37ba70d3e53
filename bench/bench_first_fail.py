"""Benchmark: seconds from `parity dashboard --model demo:broken` to its FAIL on screen.

Not a test. A new user's first minute: the command validates the demo (exporting it on first
use), starts Streamlit, and the browser opens on the result. Each repeat runs with an empty
demo cache (`PARITY_CACHE_DIR` in a fresh folder: what a fresh install has) unless `--warm`,
and prints when the launcher printed its address, when the server answered its health
check, and when Chromium (headless, /usr/bin/chromium) showed "FAIL" with the failing
output's sentence; with the launcher's process CPU time (user + system, children included).

    python bench/bench_first_fail.py              # 3 fresh runs
    python bench/bench_first_fail.py --warm --repeat 5
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def once(browser, *, warm: bool, cache: Path) -> dict[str, float]:
    port = free_port()
    env = dict(os.environ)
    if not warm:
        cache = Path(tempfile.mkdtemp(prefix="parity-bench-cache-"))
    env["PARITY_CACHE_DIR"] = str(cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "dashboard", "--model", "demo:broken",
         "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    times: dict[str, float] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Parity dashboard: http" in line:
                times["address printed"] = time.perf_counter() - t0
                break
        url = f"http://localhost:{port}"
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        times["server answers"] = time.perf_counter() - t0
        page = browser.new_page()
        page.set_default_timeout(120_000)
        page.goto(url)
        page.get_by_text(re.compile(r"\bmask fails\b")).first.wait_for()
        page.get_by_text("FAIL", exact=True).first.wait_for()
        times["FAIL on screen"] = time.perf_counter() - t0
        page.close()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    times["cpu (user+sys)"] = (after.ru_utime - before.ru_utime) + (
        after.ru_stime - before.ru_stime
    )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="keep one demo cache for all runs")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    cache = Path(tempfile.mkdtemp(prefix="parity-bench-cache-"))
    rows: list[dict[str, float]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for i in range(args.repeat):
            rows.append(once(browser, warm=args.warm, cache=cache))
            said = ", ".join(f"{k} {v:.1f} s" for k, v in rows[-1].items())
            print(f"run {i + 1}: {said}", flush=True)
        browser.close()
    print(f"median of {len(rows)} ({'warm' if args.warm else 'fresh'} demo cache):")
    for key in rows[0]:
        print(f"  {key:<16} {statistics.median(r[key] for r in rows):6.1f} s")


if __name__ == "__main__":
    main()
