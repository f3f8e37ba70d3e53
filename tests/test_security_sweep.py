"""Sweep safety (issue 54, causes 5 and 6): what a pair prints and returns is bounded before
the driver holds it, a pair folder that is a link is replaced, never written through, and an
input that is a FIFO or a device is refused by what it is. Real pairs on the local engine; the
driver's landing and the pair's bounds are the same code on Ray (parity.sweep.land,
parity.sweep.execute.run_pair runs inside the Ray task)."""

from __future__ import annotations

import json
import os

import pytest

from parity.cli import main
from parity.sweep import execute
from tests.helpers.sweep_zoo import GOOD, copy_tiny, write_manifest

PRINTER = '''
"""A factory that prints a lot (a model logging every step) before it returns the model."""
import sys

from models import make_tiny


def make():
    for i in range(40000):
        sys.stdout.write(f"line {i:06d} " + "x" * 40 + "\\n")
    sys.stdout.write("LAST LINE\\n")
    sys.stdout.flush()
    return make_tiny()
'''


@pytest.fixture
def zoo(tmp_path, model_zoo, tiny_artifacts):
    folder = tmp_path / "zoo"
    copy_tiny(folder, model_zoo, tiny_artifacts)
    return folder


def _pairs(out):
    return {p["name"]: p for p in json.loads((out / "summary.json").read_text())["pairs"]}


def test_a_pair_printing_without_end_comes_back_as_the_tail_of_its_log_said_in_the_summary(
    zoo, tmp_path, monkeypatch
):
    monkeypatch.setattr(execute, "MAX_LOG", 64 << 10)  # 2 MiB printed, 64 KiB kept
    (zoo / "printer.py").write_text(PRINTER)
    manifest = write_manifest(
        zoo,
        [
            {"name": "loud", "args": ["--model", "printer.py:make", "--onnx", "tiny.onnx"]},
            {"name": "quiet", "args": GOOD},
        ],
    )
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "1"]) == 0
    log = (out / "loud" / "log.txt").read_bytes()
    assert len(log) <= (64 << 10) + 100
    assert log.startswith(b"[log cut: its first ") and b"LAST LINE" in log
    assert b"line 000000 " not in log
    pairs = _pairs(out)
    (note,) = pairs["loud"]["notes"]
    assert note.startswith("log.txt cut to its last 64.0 KiB"), note
    assert pairs["loud"]["verdict"] == "pass" and pairs["quiet"]["notes"] == []
    assert not (out / "quiet" / "log.txt").read_bytes().startswith(b"[log cut")


def test_a_pairs_files_are_counted_against_a_limit_before_they_are_read(zoo, tmp_path, monkeypatch):
    args = [*GOOD, "--html", "r.html", "--save-run", "run.parity.npz"]
    manifest = write_manifest(zoo, [{"name": "a", "args": args}])
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out)]) == 0
    sizes = {p.name: p.stat().st_size for p in (out / "a").iterdir()}
    small = sizes["report.json"] + sizes["log.txt"]
    assert sizes["r.html"] > 1024 and sizes["run.parity.npz"] > 1024
    read: list[str] = []
    real_read = execute.read_bytes

    def counting(path, **kwargs):
        read.append(os.path.basename(path))
        return real_read(path, **kwargs)

    monkeypatch.setattr(execute, "read_bytes", counting)
    monkeypatch.setattr(execute, "MAX_RETURNED_BYTES", small + 512)
    assert main(["sweep", str(manifest), "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "a").iterdir()) == ["log.txt", "pair.json", "report.json"]
    assert "r.html" not in read and "run.parity.npz" not in read  # left unread, not cut after
    pair = _pairs(out)["a"]
    assert pair["html"] is None and pair["saved_run"] is None
    assert sorted(n.split(" ")[0] for n in pair["notes"]) == ["r.html", "run.parity.npz"]
    assert all("not returned" in n for n in pair["notes"])


@pytest.mark.parametrize("kind", ["link to a folder", "link to nothing", "file"])
def test_a_pair_folder_that_is_a_link_or_a_file_is_replaced_never_written_through(
    zoo, tmp_path, kind
):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "report.json").write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    if kind == "link to a folder":
        (out / "a").symlink_to(victim)
    elif kind == "link to nothing":
        (out / "a").symlink_to(tmp_path / "nowhere")
    else:
        (out / "a").write_text("not a folder")
    manifest = write_manifest(zoo, [{"name": "a", "args": GOOD}])
    assert main(["sweep", str(manifest), "--out", str(out), "--resume"]) == 0
    assert not (out / "a").is_symlink() and (out / "a").is_dir()
    assert json.loads((out / "a" / "report.json").read_text())["verdict"] == "pass"
    assert sorted(p.name for p in victim.iterdir()) == ["report.json"]
    assert (victim / "report.json").read_text() == "precious"
    assert not (tmp_path / "nowhere").exists()


def test_a_resumed_record_behind_a_linked_pair_folder_is_not_trusted(zoo, tmp_path, capsys):
    manifest = write_manifest(zoo, [{"name": "a", "args": GOOD}])
    first = tmp_path / "first"
    assert main(["sweep", str(manifest), "--out", str(first)]) == 0
    out = tmp_path / "out"
    out.mkdir()
    (out / "a").symlink_to(first / "a")  # a record for this very key, through a link
    capsys.readouterr()
    assert main(["sweep", str(manifest), "--out", str(out), "--resume"]) == 0
    assert "(1 resumed)" not in capsys.readouterr().out
    assert (out / "a").is_dir() and not (out / "a").is_symlink()


@pytest.mark.parametrize(
    "kind, said",
    [
        ("fifo", "a named pipe, not a regular file"),
        ("device link", "a symlink to /dev/zero (a character device), not a regular file"),
        ("folder", "a folder, not a regular file"),
    ],
)
def test_a_sweep_input_that_is_a_fifo_or_a_device_is_refused_by_what_it_is(
    zoo, tmp_path, capsys, kind, said
):
    odd = zoo / "odd.onnx"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "device link":
        odd.symlink_to("/dev/zero")
    else:
        odd.mkdir()
    manifest = write_manifest(
        zoo, [{"name": "a", "args": ["--model", "models.py:make_tiny", "--onnx", "odd.onnx"]}]
    )
    assert main(["sweep", str(manifest), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "no such file" not in err[0], err
    assert not (tmp_path / "out").exists()
