"""Issue 36, writes: Parity replaces only a regular file (or nothing), and says so up front.

`os.replace` swaps a regular file in for whatever the path names: a character device made
with mknod (as root, `--json /dev/null` would destroy the system's node), a FIFO, a link to
/proc/self/fd/1. Every output flag is checked before the run starts (nothing is printed,
no verdict is lost to an error report), and the node is still what it was afterwards.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from parity.errors import WriteError
from tests.precision_models import mlp, to_float16
from tests.test_security_io import Ran, one_error_line

FLAGS = ["--json", "--html", "--save-run", "--save-reference", "--model-explorer"]


@pytest.fixture
def cli(capsys):
    from parity.cli import main

    def run(*args: str) -> tuple[Ran, str]:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        return Ran(code, captured.err), captured.out

    return run


def _mode(path: Path) -> int:
    return os.lstat(path).st_mode


@pytest.fixture
def specials(tmp_path: Path) -> dict[str, tuple[Path, str, object]]:
    """name -> (path, words in the refusal, test the node must still pass afterwards)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    null_link = tmp_path / "null-link"
    null_link.symlink_to("/dev/null")
    stdout_link = tmp_path / "stdout-link"
    stdout_link.symlink_to("/proc/self/fd/1")
    found = {
        "fifo": (fifo, "it is a named pipe", lambda: stat.S_ISFIFO(_mode(fifo))),
        "link to /dev/null": (
            null_link,
            "a symlink to /dev/null (a character device)",
            lambda: stat.S_ISLNK(_mode(null_link)) and stat.S_ISCHR(os.stat("/dev/null").st_mode),
        ),
    }
    if os.geteuid() == 0:  # a real device node of our own, as the attack made
        device = tmp_path / "devnull"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        found["mknod device"] = (device, "a character device", lambda: stat.S_ISCHR(_mode(device)))
    return found


def _kinds() -> list[str]:
    return ["fifo", "link to /dev/null", "mknod device"]


@pytest.mark.parametrize("kind", _kinds())
@pytest.mark.parametrize("flag", FLAGS)
def test_an_output_flag_naming_a_device_or_fifo_is_refused_before_the_run(
    flag: str, kind: str, specials, cli
) -> None:
    if kind not in specials:
        pytest.skip("mknod needs root")
    path, words, still = specials[kind]
    extra = ["--layers"] if flag == "--model-explorer" else []
    ran, out = cli("validate", "--model", "demo:broken", *extra, flag, str(path))
    line = one_error_line(ran)
    assert words in line and "Parity replaces only a regular file" in line, line
    assert out == ""  # refused before the run: no verdict was printed
    assert still()


def test_report_outputs_are_checked_like_validates(specials, cli, tmp_path: Path) -> None:
    saved = tmp_path / "run.parity.npz"
    from parity.cli import main

    assert main(["validate", "--model", "demo:broken", "--save-run", str(saved)]) == 1
    path, words, still = specials["fifo"]
    ran, out = cli("report", str(saved), "--html", str(path))
    assert words in one_error_line(ran) and out == "" and still()


def test_the_atomic_writer_itself_refuses_a_special_node(specials) -> None:
    """The dashboard's "Save to" and every other writer end in parity.files.atomic."""
    from parity.files.atomic import write_output, write_text

    for path, words, still in specials.values():
        with pytest.raises(WriteError, match="Parity replaces only a regular file"):
            write_output(path, "{}", what="saved run")
        with pytest.raises(WriteError) as raised:
            write_text(path, "x")
        assert words.removeprefix("it is ") in raised.value.message
        assert still()


def test_save_to_in_the_dashboard_refuses_a_fifo(specials, tmp_path: Path) -> None:
    from parity.api import validate
    from parity.reports.saved_run import save_run

    run = validate("demo:cnn")
    path, _, still = specials["fifo"]
    with pytest.raises(WriteError, match="cannot write saved run .*named pipe"):
        save_run(run, path)
    assert still()
    assert save_run(run, tmp_path / "ok.parity.npz").is_file()  # a plain path still works


@pytest.mark.parametrize("value", ["", "file", "fifo", "under-a-file"])
def test_a_bad_repro_folder_is_refused_before_the_run(value: str, tmp_path: Path, cli) -> None:
    target = {
        "": "",
        "file": tmp_path / "a-file",
        "fifo": tmp_path / "fifo",
        "under-a-file": tmp_path / "a-file" / "repro",
    }[value]
    (tmp_path / "a-file").write_text("x")
    if value == "fifo":
        os.mkfifo(target)
    ran, out = cli("validate", "--model", "demo:broken", "--repro", str(target))
    line = one_error_line(ran)
    assert out == "" and ("repro folder" in line), line
    if value:
        assert "not a folder" in line, line
    assert (tmp_path / "a-file").read_text() == "x"


def test_the_api_refuses_a_bad_repro_folder_before_the_run(tmp_path: Path) -> None:
    from parity.api import validate

    (tmp_path / "a-file").write_text("x")
    with pytest.raises(WriteError, match="it is a file, not a folder"):
        validate("demo:broken", repro=tmp_path / "a-file")


@pytest.fixture(scope="module")
def fp16_pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fp16")
    ref = mlp(root / "mlp.onnx")
    return ref, to_float16(ref, root / "mlp_fp16.onnx")


@pytest.mark.parametrize("clash", ["--onnx reference", "--onnx candidate", "--json", "--html"])
def test_write_fixed_may_not_name_an_input_or_another_output(
    clash: str, fp16_pair, tmp_path: Path, cli
) -> None:
    ref, f16 = fp16_pair
    before = {p: p.read_bytes() for p in (ref, f16)}
    target = {
        "--onnx reference": ref,
        "--onnx candidate": f16,
        "--json": tmp_path / "r.json",
        "--html": tmp_path / "r.html",
    }[clash]
    args = ["validate", "--onnx", str(ref), "--onnx", str(f16), "--layers"]
    args += ["--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]
    ran, out = cli(*args, "--write-fixed", str(target))
    line = one_error_line(ran)
    assert f"is also {clash.split()[0]}" in line and out == "", line
    assert {p: p.read_bytes() for p in before} == before
    # the refusal is the JSON report's error, made before the run: no comparison was made
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "error"


def test_write_fixed_on_a_torch_run_is_refused_before_the_run(tmp_path: Path, cli) -> None:
    ran, out = cli(
        "validate", "--model", "demo:broken", "--layers", "--write-fixed", str(tmp_path / "f.onnx")
    )
    assert "--write-fixed needs ONNX against ONNX" in one_error_line(ran) and out == ""
