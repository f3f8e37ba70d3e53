"""Issue 9, files and limits: atomic outputs, bounded allocations, the time limit, strict files.

Every case is a real generated file run through the real CLI in a subprocess
(`python -m core validate ...`): exit 2 and one line on stderr, nothing half-written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ModelZoo, TinyArtifacts

_ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def run_cli(*args: str, prelude: str = "", timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m core ARGS`, or with `prelude` run first in the same process."""
    if prelude:
        code = f"{prelude}\nimport sys\nfrom core.cli import main\nsys.exit(main(sys.argv[1:]))"
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [sys.executable, "-m", "core", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_ENV)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """Exit 2 and exactly one stderr line, `parity: error: ...`; returns that line."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("parity: error: "), lines
    assert "Traceback" not in result.stderr
    return lines[0]


def tiny_args(zoo: ModelZoo, tiny: TinyArtifacts) -> list[str]:
    return ["validate", "--model", zoo.spec("make_tiny"), "--onnx", str(tiny.onnx)]


def temps_of(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*"))


def is_whole(path: Path, flag: str) -> bool:
    if flag == "--json":
        return json.loads(path.read_text())["verdict"] == "pass"
    if flag == "--html":
        return path.read_text().rstrip().endswith("</html>")
    with zipfile.ZipFile(path) as zf:
        return zf.testzip() is None


# --- atomic outputs ---------------------------------------------------------------------

OUTPUT_FLAGS = ["--json", "--html", "--save-run", "--save-reference"]


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
@pytest.mark.parametrize("where", ["missing folder", "read-only", "a directory"])
def test_unwritable_output_exits_2_with_one_line(
    flag: str, where: str, model_zoo, tiny_artifacts, tmp_path: Path
):
    target = {
        "missing folder": tmp_path / "no" / "such" / "out.bin",
        "read-only": Path("/sys/parity-out.bin"),  # refused even to root, unlike chmod
        "a directory": tmp_path,
    }[where]
    result = run_cli(*tiny_args(model_zoo, tiny_artifacts), flag, str(target))
    line = one_error_line(result)
    assert "cannot write" in line and str(target) in line


def test_failed_run_with_unwritable_json_exits_2_with_one_line(tmp_path: Path):
    result = run_cli(
        "validate", "--model", "demo:cnn", "--onnx", str(tmp_path / "absent.onnx"),
        "--json", str(tmp_path / "missing" / "r.json"),
    )  # fmt: skip
    assert "cannot write JSON report" in one_error_line(result)


def test_failed_run_writes_its_error_report_atomically(tmp_path: Path):
    report = tmp_path / "r.json"
    result = run_cli(
        "validate", "--model", "demo:cnn", "--onnx", str(tmp_path / "absent.onnx"),
        "--json", str(report),
    )  # fmt: skip
    one_error_line(result)
    assert '"verdict": "error"' in report.read_text()
    assert temps_of(report) == []


_PRELOAD = "import onnxruntime, torch  # importing ORT's library itself writes past a tiny limit\n"
_KILL_ON_SIZE = _PRELOAD + (
    "import resource, signal\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; a real kill instead\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))"
)
_REFUSE_ON_SIZE = _PRELOAD + (
    "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))"
)


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
def test_process_killed_mid_write_leaves_the_old_file_whole(
    flag: str, model_zoo, tiny_artifacts, tmp_path: Path
):
    out = tmp_path / ("out.npz" if flag.startswith("--save") else "out.txt")
    args = [*tiny_args(model_zoo, tiny_artifacts), "--input-sets", "2", "--dim", "batch=256"]
    args += [flag, str(out)]
    assert run_cli(*args).returncode == 0
    good = out.read_bytes()
    assert len(good) > 1000

    killed = run_cli(*args, prelude=_KILL_ON_SIZE.format(limit=len(good) // 2))
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr  # killed while writing
    assert out.read_bytes() == good  # the old file is whole
    assert len(temps_of(out)) == 1  # the killed writer's temp file is left ...

    assert run_cli(*args).returncode == 0
    assert temps_of(out) == []  # ... and the next write removes it
    assert is_whole(out, flag)


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
def test_file_size_limit_leaves_the_old_file_whole_and_no_temp(
    flag: str, model_zoo, tiny_artifacts, tmp_path: Path
):
    out = tmp_path / ("out.npz" if flag.startswith("--save") else "out.txt")
    args = [*tiny_args(model_zoo, tiny_artifacts), "--input-sets", "2", "--dim", "batch=256"]
    args += [flag, str(out)]
    assert run_cli(*args).returncode == 0
    good = out.read_bytes()
    refused = run_cli(*args, prelude=_REFUSE_ON_SIZE.format(limit=len(good) // 2))
    assert "File too large" in one_error_line(refused)
    assert out.read_bytes() == good
    assert temps_of(out) == []
