"""Every write is an output (issue 49): `--export-path` and `--repro` go through the checks
`--json` does; no output may replace an input or another output; a full disk leaves every
previous file and never turns a finished verdict into an error report; concurrent writers of
one path each end with their own verdict. Real CLI runs (demo:broken and a tiny exported
model), a real tmpfs, real concurrent processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parity.cli import main
from parity.files.atomic import atomic_path
from parity.reports.saved_run import load_run


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def copies(tmp_path: Path, tiny_artifacts) -> tuple[Path, Path]:
    pt2, onnx = tmp_path / "m.pt2", tmp_path / "model.onnx"
    shutil.copy(tiny_artifacts.pt2, pt2)
    shutil.copy(tiny_artifacts.onnx, onnx)
    return pt2, onnx


@pytest.mark.parametrize(
    ("flag", "target"),
    [("--json", "onnx"), ("--save-run", "onnx"), ("--html", "pt2"), ("--export-path", "onnx")],
)
def test_an_output_may_not_replace_an_input(flag, target, copies, capsys):
    pt2, onnx = copies
    victim = onnx if target == "onnx" else pt2
    before = victim.read_bytes()
    err = _refused(
        ["validate", "--model", str(pt2), "--onnx", str(onnx), flag, str(victim)], capsys
    )
    assert f"{flag} {victim} is also" in err and "replace a file this run reads" in err, err
    assert victim.read_bytes() == before


def test_a_report_may_not_replace_the_tolerances_file_it_reads(copies, tmp_path, capsys):
    pt2, onnx = copies
    tol = tmp_path / "tol.json"
    tol.write_text('{"default": {"atol": 1e-4, "rtol": 0}}')
    err = _refused(
        ["validate", "--model", str(pt2), "--onnx", str(onnx), "--tolerances", str(tol),
         "--json", str(tol)], capsys,
    )  # fmt: skip
    assert "--tolerances" in err and json.loads(tol.read_text())["default"]["atol"] == 1e-4


def test_two_outputs_may_not_name_one_file(copies, tmp_path, capsys):
    pt2, onnx = copies
    same = tmp_path / "same.out"
    err = _refused(
        ["validate", "--model", str(pt2), "--onnx", str(onnx), "--json", str(same),
         "--html", str(tmp_path / "." / "same.out")], capsys,
    )  # fmt: skip
    assert "one would replace the other" in err and not same.exists()


def test_export_path_to_a_fifo_is_refused_before_the_run_not_hung(tmp_path):
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "parity", "validate", "--model", f"hf:{tmp_path}",
         "--export-path", str(fifo)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "named pipe" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert fifo.is_fifo()


# --- --repro DIR ------------------------------------------------------------------------------


def test_repro_through_a_linked_data_folder_is_refused_before_the_run(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "repro"
    folder.mkdir()
    (folder / "test_data_set_0").symlink_to(elsewhere)
    err = _refused(
        ["validate", "--model", "demo:broken", "--layers", "--repro", str(folder)], capsys
    )
    assert "is a link" in err and "test_data_set_0" in err
    assert not list(elsewhere.iterdir())


def test_repro_keeps_no_stale_input_of_an_earlier_repro(tmp_path, capsys):
    folder = tmp_path / "repro"
    (folder / "test_data_set_0").mkdir(parents=True)
    (folder / "test_data_set_1").mkdir()
    stale = [folder / "test_data_set_0" / "input_7.pb", folder / "test_data_set_1" / "input_0.pb"]
    for path in stale:
        path.write_bytes(b"stale")
    notes = folder / "notes.txt"
    notes.write_text("mine")
    assert main(["validate", "--model", "demo:broken", "--layers", "--repro", str(folder)]) == 1
    assert "repro written to" in capsys.readouterr().out
    assert not any(p.exists() for p in stale) and not (folder / "test_data_set_1").exists()
    assert (folder / "test_data_set_0" / "input_0.pb").is_file() and notes.read_text() == "mine"


# --- concurrent writers -----------------------------------------------------------------------


def test_a_second_writers_stale_sweep_leaves_a_live_writers_temp_file(tmp_path):
    target = tmp_path / "out.json"
    with atomic_path(target) as first:
        first.write_text("first")
        with atomic_path(target) as second:  # its stale sweep runs while `first` is live
            second.write_text("second")
        assert first.exists()
    assert target.read_text() == "first"  # the last complete write wins
    assert not list(tmp_path.glob(".*parity-tmp"))


def test_concurrent_runs_writing_one_path_each_end_with_their_own_verdict(tmp_path):
    outs = {
        "json": tmp_path / "r.json",
        "html": tmp_path / "r.html",
        "save-run": tmp_path / "r.npz",
    }
    argv = ["validate", "--model", "demo:broken"]
    for flag, path in outs.items():
        argv += [f"--{flag}", str(path)]
    procs = [
        subprocess.Popen([sys.executable, "-m", "parity", *argv], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    ends = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    assert [code for code, _ in ends] == [1] * 4, ends  # each its own FAIL, none an error
    assert json.loads(outs["json"].read_text())["verdict"] == "fail"
    assert load_run(outs["save-run"]).verdict == "fail"
    assert outs["html"].read_text().rstrip().endswith("</html>")
    assert not list(tmp_path.glob(".*parity-tmp"))


# --- a full disk ------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path) -> Path:
    """A 1 MiB tmpfs (root only; skipped elsewhere), unmounted however the test ends."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a 1 MiB tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int) -> None:
    """Fill `disk` until about `leave` bytes are free (0: full, to the last page)."""
    free = shutil.disk_usage(disk).free
    with open(disk / "filler", "wb", buffering=0) as fh:
        fh.write(b"\0" * max(free - leave, 0))
        while not leave:
            try:
                fh.write(b"\0" * 512)
            except OSError:
                break


def test_a_full_disk_leaves_every_previous_file_and_the_verdict(tiny_disk: Path, capsys):
    outs = {f: tiny_disk / f"r.{f}" for f in ("json", "html", "save-run")}
    for path in outs.values():
        path.write_text("previous")
    _fill(tiny_disk, 0)
    argv = ["validate", "--model", "demo:broken"]
    for flag, path in outs.items():
        argv += [f"--{flag}", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the run finished: FAIL" in err, err
    assert "No space left on device" in err
    for path in outs.values():
        assert path.read_text() == "previous"  # whole, as it was: never an error report
    assert not list(tiny_disk.glob(".*parity-tmp"))


def test_a_full_disk_after_the_json_keeps_the_finished_report(tiny_disk: Path, capsys):
    json_path, html_path = tiny_disk / "r.json", tiny_disk / "r.html"
    html_path.write_text("previous")
    _fill(tiny_disk, 96 << 10)  # room for the JSON report, not for the HTML one
    argv = [
        "validate",
        "--model",
        "demo:broken",
        "--json",
        str(json_path),
        "--html",
        str(html_path),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot write HTML report" in err and "the run finished: FAIL" in err, err
    assert json.loads(json_path.read_text())["verdict"] == "fail"  # not an error report
    assert html_path.read_text() == "previous"


def test_a_factory_file_and_an_hf_folders_files_are_inputs_too(tmp_path):
    from parity.errors import UsageError
    from parity.files.outputs import Input, Output, check_run_files

    factory = tmp_path / "make.py"
    factory.write_text("def build(): ...\n")
    with pytest.raises(UsageError, match="replace a file this run reads"):
        check_run_files([Output("JSON report", str(factory), "--json")], [
            Input("--model", f"{factory}:build")
        ])  # fmt: skip
    config = tmp_path / "config.json"
    config.write_text("{}")
    with pytest.raises(UsageError, match="replace a file this run reads"):
        check_run_files(
            [Output("ONNX export", str(config), "--export-path")],
            [Input("--model", f"hf:{tmp_path}")],
        )
    check_run_files(  # a new file in the model's folder, and a demo's name: fine
        [Output("ONNX export", str(tmp_path / "model.onnx"), "--export-path"),
         Output("JSON report", str(tmp_path / "demo"), "--json")],
        [Input("--model", f"hf:{tmp_path}"), Input("--model", "demo:broken")],
    )  # fmt: skip
