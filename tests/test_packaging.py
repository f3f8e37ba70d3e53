"""Parity as a user installs it (issue 19): the wheel `pip wheel .` builds, installed into a
folder of its own and run from an empty folder with that folder first on PYTHONPATH (which
shadows this checkout's editable install). Its one top-level package is `parity`, with the
dashboard inside; the CLI validates the demos; `parity dashboard` opens on a validation, or
on a saved run, in Chromium with no click.

Also held here: `parity dashboard`'s Streamlit options are the checkout's
.streamlit/config.toml (`streamlit run app.py` and `parity dashboard` serve the same app).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, RUN_TIMEOUT_MS, free_port, serving, settle

ROOT = Path(__file__).resolve().parents[1]
NOT_SHIPPED = shutil.ignore_patterns(
    ".git", "build", "*.egg-info", "__pycache__", "test-artifacts", ".ruff_cache",
    ".pytest_cache", ".venv", "tmp", "*.parity.npz",
)  # fmt: skip
"""What a fresh clone does not hold (.gitignore): the wheel is built from a copy without it."""


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PARITY_CACHE_DIR of every installed-wheel process: the demos export once."""
    return tmp_path_factory.mktemp("wheel-demo-cache")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m pip wheel --no-deps -w DIR .` on a copy of the checkout."""
    source = tmp_path_factory.mktemp("checkout") / "parity"
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), "."],
        cwd=source, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (found,) = out.glob("onnx_parity-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed with `pip install --no-deps --target T` (its dependencies are
    this environment's)."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return target


@pytest.fixture(scope="module")
def user(installed: Path, demo_cache: Path, tmp_path_factory: pytest.TempPathFactory):
    """(empty folder, environment) of a user of the installed wheel."""
    folder = tmp_path_factory.mktemp("empty")
    env = {
        **os.environ,
        "PYTHONPATH": str(installed),
        "PARITY_CACHE_DIR": str(demo_cache),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return folder, env


def run_python(user, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    folder, env = user
    return subprocess.run(
        [sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def broken_run(user, tmp_path_factory: pytest.TempPathFactory):
    """`python -m parity validate --model demo:broken --save-run RUN` from the wheel:
    (its result, RUN)."""
    saved = tmp_path_factory.mktemp("wheel-run") / "broken.parity.npz"
    result = run_python(user, "-m", "parity", "validate", "--model", "demo:broken",
                        "--save-run", str(saved))  # fmt: skip
    return result, saved


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package_parity_with_the_dashboard(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"parity"}  # no core, pages, tests, bench or app.py beside it
    assert "parity/dashboard/main.py" in names and "parity/dashboard/frame.py" in names
    assert "parity/launch.py" in names and "parity/judge/compare.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    # the console script waits on the command in a forked child: a native crash is one line
    assert re.search(r"^parity = parity\.cli\.supervise:console$", scripts, re.M), scripts


@pytest.mark.slow
def test_from_an_empty_folder_parity_imports_from_the_wheel_and_core_does_not(
    user, installed: Path
):
    where = run_python(user, "-c", "import parity, parity.dashboard; print(parity.__file__)")
    assert where.returncode == 0, where.stderr[-2000:]
    assert Path(where.stdout.strip()).resolve().is_relative_to(installed.resolve())
    api = "from parity import validate, assert_export_close, ValidationRun, Tolerance, Tolerances"
    assert run_python(user, "-c", api).returncode == 0
    for name in ("core", "pages"):
        missing = run_python(user, "-c", f"import {name}")
        assert missing.returncode == 1 and "ModuleNotFoundError" in missing.stderr, name


@pytest.mark.slow
def test_the_installed_cli_fails_demo_broken_and_passes_demo_cnn(user, broken_run):
    result, saved = broken_run
    assert result.returncode == 1, result.stderr[-2000:]
    assert "FAIL" in result.stdout and saved.is_file()
    cnn = run_python(user, "-m", "parity", "validate", "--model", "demo:cnn")
    assert cnn.returncode == 0, cnn.stdout[-2000:] + cnn.stderr[-2000:]
    assert "PASS" in cnn.stdout


@pytest.fixture
def dashboard(user, tmp_path: Path):
    """start(*ARGS): `python -m parity dashboard ARGS --port P` from the wheel, in its own
    process group, until it answers; yields its URL. Stopped with Ctrl-C (SIGINT to the
    group, as a terminal sends it) or, given `alone=True`, with `kill -INT` to its process
    alone; either must end it cleanly, Streamlit with it."""
    folder, env = user
    started: list[tuple[subprocess.Popen, Path, bool]] = []

    def start(*args: str, alone: bool = False) -> str:
        port = free_port()
        log = tmp_path / f"dashboard-{port}.log"
        command = [sys.executable, "-m", "parity", "dashboard", *args, "--port", str(port)]
        out = open(log, "w")  # noqa: SIM115 (closed with the process below)
        proc = subprocess.Popen(
            command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        started.append((proc, log, alone))
        url = f"http://localhost:{port}"
        if not serving(url, proc, within_s=600):  # the validation runs before the server starts
            pytest.fail(f"parity dashboard did not start:\n{log.read_text()[-3000:]}")
        return url

    try:
        yield start
        for proc, log, alone in started:
            _stop_cleanly(proc, log, alone)
    finally:  # whatever failed above, no dashboard outlives the test
        for proc, _, _ in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _stop_cleanly(proc: subprocess.Popen, log: Path, alone: bool) -> None:
    """Ctrl-C (or `kill -INT` to the process alone) ends it with exit 2 (stopped), its last
    words, and Streamlit gone with it (tests/test_launch.py follows each of its processes)."""
    try:
        if proc.poll() is not None:
            return
        if alone:
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Ctrl-C did not stop parity dashboard:\n{log.read_text()[-3000:]}")
        text = log.read_text()
        assert code == 2 and "parity: dashboard stopped" in text, text[-3000:]
        with pytest.raises(ProcessLookupError):  # Streamlit stopped with it
            os.killpg(proc.pid, 0)
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(log, ARTIFACTS / f"wheel-{log.name}")


def _opened_on_a_failing_mask(chromium, url: str, name: str) -> str:
    """Open the dashboard's first page and wait, with no click, for the run's FAIL and its
    failing output; returns the page's text."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1600})
    try:
        page = context.new_page()
        page.set_default_timeout(RUN_TIMEOUT_MS)
        page.goto(url)
        page.get_by_text(re.compile(r"\bmask fails\b")).first.wait_for()  # its one sentence
        settle(page)
        page.screenshot(path=str(ARTIFACTS / f"wheel-{name}.png"))
        return page.locator("body").inner_text()
    finally:
        context.close()


@pytest.mark.slow
def test_installed_dashboard_opens_on_the_validation_its_flags_give(chromium, dashboard):
    url = dashboard("--model", "demo:broken")
    body = _opened_on_a_failing_mask(chromium, url, "dashboard-model")
    assert "FAIL" in body and "demo:broken" in body


@pytest.mark.slow
def test_installed_dashboard_opens_a_saved_run(chromium, dashboard, broken_run):
    _, saved = broken_run
    url = dashboard(str(saved), alone=True)
    body = _opened_on_a_failing_mask(chromium, url, "dashboard-saved-run")
    assert "FAIL" in body and "demo:broken" in body  # no model flag: the run is the file


def test_dashboard_options_are_the_checkouts_streamlit_config():
    """`parity dashboard` passes its settings as flags (an installed dashboard has no
    .streamlit/ folder); a checkout's `streamlit run app.py` reads config.toml. Both are the
    same app: every setting agrees, address and port aside (flags of `parity dashboard`)."""
    from parity.launch import DEFAULT_HOST, SERVER_OPTIONS

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    flat = {f"{section}.{key}": value for section, table in config.items()
            for key, value in table.items()}  # fmt: skip
    as_flags = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in flat.items()}
    bound = {"server.address", "browser.serverAddress"}  # --host
    assert {k: v for k, v in as_flags.items() if k not in bound} == SERVER_OPTIONS
    assert flat["server.address"] == flat["browser.serverAddress"] == DEFAULT_HOST
