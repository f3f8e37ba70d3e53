"""Issue 36, reads: a path Parity did not create is read only if it is a regular file.

`/dev/zero` would be read until memory runs out, a FIFO would hang `open()` forever, and a
link to either looks like a file to a size check. Every reader (the saved-run reader behind
`?run=`, `parity report`, sweep folders, the --inputs / --reference / --onnx / --model /
--weights / --tolerances files, the launcher's PATH) goes through parity.files.safe_read and
names what it was given in one line. A hang is caught by running each read in a thread
that must end (HANG_S is a guard against a test that never ends, not a timing assertion).
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from parity.errors import ParityError, SavedRunError, UsageError
from parity.files.safe_read import open_regular, read_bytes, read_text
from tests.test_security_io import Ran, one_error_line

HANG_S = 120


@pytest.fixture
def cli(capsys):
    from parity.cli import main

    def run(*args: str) -> Ran:
        capsys.readouterr()
        code = _ends(lambda: main(list(args)))
        return Ran(code, capsys.readouterr().err)

    return run


def _ends(call):
    """call()'s result, or its exception re-raised; fails the test if it never returns."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), "the read never returned (a FIFO's open, or /dev/zero)"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


@pytest.fixture
def nodes(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, the words that must name it)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "zero-link"
    link.symlink_to("/dev/zero")
    fifo_link = tmp_path / "fifo-link"
    fifo_link.symlink_to(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    folder = tmp_path / "folder"
    folder.mkdir()
    yield {
        "device": (Path("/dev/zero"), "/dev/zero is a character device, not a file"),
        "fifo": (fifo, "is a named pipe, not a file"),
        "device link": (link, "is a symlink to /dev/zero (a character device), not a file"),
        "fifo link": (fifo_link, "(a named pipe), not a file"),
        "socket": (sock_path, "is a socket, not a file"),
        "folder": (folder, "is a folder, not a file"),
    }
    sock.close()


KINDS = ["device", "fifo", "device link", "fifo link", "socket", "folder"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_helper_names_what_is_not_a_regular_file(kind: str, nodes) -> None:
    path, words = nodes[kind]
    with pytest.raises(SavedRunError) as raised:
        _ends(lambda: read_text(path, what="saved run", error=SavedRunError))
    assert raised.value.message.startswith("saved run ") and words in raised.value.message
    assert "\n" not in raised.value.message
    with pytest.raises(SavedRunError, match="not a file"):
        _ends(
            lambda: open_regular(
                path, what="saved run", limit=None, error=SavedRunError
            ).__enter__()
        )


def test_a_read_stops_at_its_limit_when_the_size_lies(tmp_path: Path) -> None:
    """/proc files say 0 bytes and hold more: the bound is on what is read, not on st_size."""
    proc_file = Path("/proc/self/maps")
    assert proc_file.stat().st_size == 0 and len(proc_file.read_bytes()) > 64
    with pytest.raises(UsageError, match="more than the 64 B"):
        read_bytes(proc_file, what="", limit=64, error=UsageError)
    with open_regular(proc_file, what="", limit=64, error=UsageError) as fh:
        assert len(fh.read()) == 64  # a bounded reader ends at its limit
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 1000)
    with pytest.raises(UsageError, match="big.json is 1000 B, more than the 100 B"):
        read_bytes(big, what="", limit=100, error=UsageError)
    assert read_bytes(big, what="", limit=1000, error=UsageError) == b" " * 1000


@pytest.mark.parametrize("kind", ["device", "fifo", "device link", "socket", "folder"])
def test_parity_report_names_a_device_or_fifo_in_one_line(kind: str, nodes, cli) -> None:
    path, words = nodes[kind]
    line = one_error_line(cli("report", str(path)))
    assert words in line, line


@pytest.mark.parametrize(
    ("flag", "kind"),
    [
        ("--inputs", "device"),
        ("--inputs", "fifo"),
        ("--reference", "device link"),
        ("--reference", "fifo"),
        ("--onnx", "device"),
        ("--onnx", "fifo link"),
        ("--weights", "device"),
        ("--tolerances", "fifo"),
        ("--tolerances", "device"),
    ],
)
def test_validate_names_a_device_or_fifo_given_as_a_file(
    flag: str, kind: str, nodes, model_zoo, tiny_artifacts, cli, tmp_path
) -> None:
    path, words = nodes[kind]
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.ones((2, 4), np.float32))
    args = {
        "--inputs": ["--model", model_zoo.spec("make_tiny"), "--onnx", str(tiny_artifacts.onnx)],
        "--reference": ["--onnx", str(tiny_artifacts.onnx), "--inputs", str(feeds)],
        "--onnx": ["--model", model_zoo.spec("make_tiny")],
        "--weights": ["--model", model_zoo.spec("make_tiny"), "--onnx", str(tiny_artifacts.onnx)],
        "--tolerances": [
            "--model",
            model_zoo.spec("make_tiny"),
            "--onnx",
            str(tiny_artifacts.onnx),
        ],
    }[flag]
    line = one_error_line(cli("validate", *args, flag, str(path)))
    assert words in line and "no such file" not in line, line


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_model_path_that_is_a_device_or_fifo_is_named(kind: str, nodes, tiny_artifacts, cli):
    path, words = nodes[kind]
    line = one_error_line(cli("validate", "--model", str(path), "--onnx", str(tiny_artifacts.onnx)))
    assert words in line and "no such file" not in line, line


@pytest.mark.parametrize("kind", ["device", "fifo", "socket"])
def test_the_launcher_names_a_device_or_fifo_path(kind: str, nodes, cli) -> None:
    path, _ = nodes[kind]
    what = {"device": "a character device", "fifo": "a named pipe", "socket": "a socket"}[kind]
    line = one_error_line(cli("dashboard", str(path)))
    assert f"is {what}, not a saved run or sweep folder" in line, line


# --- sweep folders -------------------------------------------------------------------------


def _sweep_folder(root: Path, pairs: list[dict] | None = None, **summary) -> Path:
    from parity.sweep import SCHEMA

    root.mkdir(parents=True, exist_ok=True)
    data = {
        "schema": SCHEMA,
        "manifest": "m.json",
        "total": 1,
        "complete": True,
        "pairs": pairs
        if pairs is not None
        else [{"name": "a", "verdict": "pass", "exit_code": 0, "seconds": 1.0}],
        **summary,
    }
    (root / "summary.json").write_text(json.dumps(data))
    return root


@pytest.mark.parametrize("kind", ["fifo", "device link"])
def test_a_sweep_summary_that_is_a_fifo_or_a_device_link_is_refused(kind, nodes, tmp_path):
    from parity.sweep.folder import load_sweep

    folder = tmp_path / "sweep"
    folder.mkdir()
    target, words = nodes[kind]
    (folder / "summary.json").symlink_to(target) if kind == "device link" else os.mkfifo(
        folder / "summary.json"
    )
    with pytest.raises(UsageError) as raised:
        _ends(lambda: load_sweep(folder))
    message = raised.value.message
    assert "summary.json" in message and "not a file" in message and "\n" not in message
    assert ("character device" if kind == "device link" else "named pipe") in message


@pytest.mark.parametrize("kind", ["fifo", "device link"])
def test_a_pair_report_that_is_a_fifo_or_a_device_link_is_skipped(kind, nodes, tmp_path):
    from parity.sweep.folder import load_sweep

    folder = _sweep_folder(tmp_path / "sweep")
    (folder / "a").mkdir()
    report = folder / "a" / "report.json"
    report.symlink_to("/dev/zero") if kind == "device link" else os.mkfifo(report)
    sweep = _ends(lambda: load_sweep(folder))
    assert [p.name for p in sweep.pairs] == ["a"] and sweep.outputs == {"a": {}}


def test_a_sweep_summary_with_infinity_or_a_climbing_pair_name_is_one_line(tmp_path):
    from parity.sweep.folder import load_sweep

    infinite = tmp_path / "inf"
    infinite.mkdir()
    (infinite / "summary.json").write_text('{"schema": "parity.sweep/1", "total": Infinity}')
    with pytest.raises(UsageError, match="Infinity is not a JSON number"):
        load_sweep(infinite)
    climbing = _sweep_folder(
        tmp_path / "climb",
        pairs=[{"name": "../../outside", "verdict": "pass", "saved_run": "run.parity.npz"}],
    )
    with pytest.raises(UsageError, match="is not a folder inside the sweep folder"):
        load_sweep(climbing)
    text_total = _sweep_folder(tmp_path / "text", total="12")
    with pytest.raises(UsageError, match="is not a count of pairs"):
        load_sweep(text_total)


# --- the dashboard's ?run= ------------------------------------------------------------------

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.mark.parametrize("kind", ["device", "fifo", "device link"])
def test_run_url_naming_a_device_or_fifo_is_refused_in_one_line(kind, nodes) -> None:
    from streamlit.testing.v1 import AppTest

    path, words = nodes[kind]
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = str(path)
    _ends(at.run)
    assert not at.exception, at.exception
    shown = [c.value.replace("\\", "") for c in at.caption if "Could not open" in c.value]
    assert len(shown) == 1 and words.split("/dev/zero ")[-1] in shown[0], shown
    assert "parity_run" not in at.session_state  # nothing was opened


def test_the_helpers_error_is_a_parity_error() -> None:
    with pytest.raises(ParityError):
        read_text("/dev/zero", what="", error=UsageError)


def test_a_run_saved_under_a_future_schema_is_called_that(tmp_path: Path, cli) -> None:
    """Not "altered, damaged, or saved by an older Parity": a newer one may seal otherwise."""
    from parity.cli import main
    from tests.test_security_io import edited_run

    saved = tmp_path / "run.parity.npz"
    assert main(["validate", "--model", "demo:broken", "--save-run", str(saved)]) == 1
    future = edited_run(
        saved,
        tmp_path / "future.parity.npz",
        lambda text: text.replace('"parity.run/1"', '"parity.run/2"'),
        reseal=False,
    )
    line = one_error_line(cli("report", str(future)))
    assert "saved-run schema 'parity.run/2' is not supported" in line, line
    assert "altered" not in line


def test_garbage_onnx_bytes_are_named_as_bytes_not_a_temp_path(model_zoo) -> None:
    import parity
    from parity.errors import OnnxLoadError

    with pytest.raises(OnnxLoadError) as raised:
        parity.validate(model_zoo.build("make_tiny"), b"\x00not an onnx file")
    message = raised.value.message
    assert "<ONNX bytes in memory>" in message and "parity-api-" not in message, message


def test_sweep_url_naming_a_folder_whose_summary_is_a_fifo_says_so(tmp_path: Path) -> None:
    """The Sweep page's ?sweep= (and its path field) read through the same helper."""
    from streamlit.testing.v1 import AppTest

    folder = tmp_path / "sweep"
    folder.mkdir()
    os.mkfifo(folder / "summary.json")
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["sweep"] = str(folder)
    _ends(at.run)
    assert not at.exception, at.exception
    shown = [
        e.value.replace("\\", "")
        for kind in ("error", "caption", "markdown", "text")
        for e in getattr(at, kind)
        if "summary.json" in str(e.value)
    ]
    assert any("is a named pipe, not a file" in text for text in shown), shown
