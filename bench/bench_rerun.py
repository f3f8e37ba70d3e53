"""Benchmark: what one dashboard rerun costs (a widget click), against a bare Streamlit app.

Not a test. Every widget change reruns the page's script on the server. Streamlit then, by
default (`runner.postScriptGC`), forces a full garbage collection, whose cost grows with
every object the process holds: torch, onnx, plotly and a loaded run are several hundred
thousand. Parity turns it off (`parity.launch.SERVER_OPTIONS`) and collects once after each
validation instead. This starts, one after the other, a bare Streamlit app (one radio: the
floor), the packaged dashboard with Parity's settings, and the dashboard with Streamlit's
default collection back on, each on the same saved run (`parity validate --model
demo:broken --layers`) in headless Chromium, and clicks the Layers page's "Error measure"
radio `--clicks` times. Per rerun it prints the wall time (click until the server's last
websocket message for that rerun) and the server's CPU seconds (its process, all threads,
measured over the clicks with a pause after each, so each collection is counted).

    python bench/bench_rerun.py                 # 12 clicks per app
    python bench/bench_rerun.py --clicks 30
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from parity.dashboard.routes import MAIN
from parity.launch import SERVER_OPTIONS

CHROMIUM = os.environ.get("PARITY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
CHOICES = ("error ratio (the criterion's number)", "max |error|")
"""The Layers page's "Error measure" radio, as shown; the floor app draws the same one."""
FLOOR_APP = f"""\
import streamlit as st
st.radio("Error measure", {CHOICES!r}, horizontal=True)
st.write("a bare app: one widget")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(script: str, options: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    flags = [f"--{k}={v}" for k, v in {**options, "server.port": str(port),
             "server.address": "127.0.0.1", "server.fileWatcherType": "none"}.items()]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", script, *flags],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"streamlit did not start; see {log}")


def _clicks(browser, url: str, pid: int, clicks: int) -> tuple[list[float], float]:
    """Wall seconds of each rerun and the server's CPU seconds per rerun.

    A rerun's wall time runs from the click to the last websocket message the server sends
    for it (its script-finished message comes last; a collection after it sends nothing)."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(60_000)
    frames: list[float] = []
    page.on(
        "websocket", lambda ws: ws.on("framereceived", lambda _: frames.append(time.perf_counter()))
    )
    page.goto(url)
    radio = page.locator('[data-testid="stRadio"]').filter(has_text="Error measure")
    radio.wait_for()
    walls = []
    for i in range(clicks + 2):  # two warm-up clicks
        _quiet(page, frames)
        if i == 2:
            cpu0 = _cpu_s(pid)
        t0 = time.perf_counter()
        radio.get_by_text(CHOICES[(i + 1) % 2], exact=True).click()
        _quiet(page, frames, after=t0)
        if i >= 2:
            walls.append(frames[-1] - t0)
    cpu = (_cpu_s(pid) - cpu0) / clicks
    page.context.close()
    return walls, cpu


def _quiet(page, frames: list[float], *, after: float = 0.0, quiet_s: float = 1.5) -> None:
    """Wait until a message came after `after` and none for `quiet_s` (the rerun, and the
    collection after it, if any, are over)."""
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        page.wait_for_timeout(100)
        last = frames[-1] if frames else 0.0
        if last > after and time.perf_counter() - last > quiet_s:
            return
    raise SystemExit("the dashboard did not answer a click within 120 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=12)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        saved = out / "broken.parity.npz"
        subprocess.run(
            [sys.executable, "-m", "parity", "validate", "--model", "demo:broken", "--layers",
             "--save-run", str(saved)],
            check=False, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        if not saved.exists():
            raise SystemExit("parity validate --model demo:broken --layers wrote no saved run")
        floor = out / "floor.py"
        floor.write_text(FLOOR_APP)
        layers = "/layers?run=" + urllib.parse.quote(str(saved))
        apps = [
            ("bare Streamlit app (floor)", str(floor), SERVER_OPTIONS, ""),
            ("dashboard (Parity's settings)", MAIN, SERVER_OPTIONS, layers),
            ("dashboard, Streamlit's collection per rerun", MAIN,
             {**SERVER_OPTIONS, "runner.postScriptGC": "true"}, layers),
        ]  # fmt: skip
        rows = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for label, script, options, path in apps:
                print(label, file=sys.stderr, flush=True)
                proc, url = _serve(script, options, out / f"{len(rows)}.log")
                try:
                    walls, cpu = _clicks(browser, url + path, proc.pid, args.clicks)
                finally:
                    proc.terminate()
                    proc.wait(timeout=20)
                rows.append((label, statistics.median(walls), cpu))
            browser.close()
    print(f"{args.clicks} reruns each (Layers page radio), load average {os.getloadavg()[0]:.1f}")
    floor_wall, floor_cpu = rows[0][1], rows[0][2]
    print(f"{'app':44} {'wall s':>8} {'x floor':>8} {'server CPU s':>13} {'x floor':>8}")
    for label, wall, cpu in rows:
        print(f"{label:44} {wall:8.3f} {wall / floor_wall:8.1f} {cpu:13.3f} {cpu / floor_cpu:8.1f}")


if __name__ == "__main__":
    main()
