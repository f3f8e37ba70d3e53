"""Issue 9, files and limits: atomic outputs, bounded allocations, the time limit, strict files.

Every case is a real generated file run through the real CLI: exit 2 and one line on stderr,
nothing half-written. Cases about the process itself (killed mid-write, a file-size limit,
the watchdog that ends a run past --timeout) run `python -m parity` in a subprocess; the
others call `parity.cli.main` in this process (the same parser, run and exit code).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from parity.cli import main
from tests.conftest import ModelZoo, TinyArtifacts

_ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def run_cli(*args: str, prelude: str = "", timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m parity ARGS`, or with `prelude` run first in the same process."""
    if prelude:
        code = f"{prelude}\nimport sys\nfrom parity.cli import main\nsys.exit(main(sys.argv[1:]))"
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [sys.executable, "-m", "parity", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_ENV)


@dataclass(frozen=True)
class Ran:
    """What an in-process run of the CLI gave: its exit code and its stderr."""

    returncode: int
    stderr: str


@pytest.fixture
def cli(capsys):
    """`cli(*ARGS)`: `parity.cli.main(ARGS)` in this process, as Ran."""

    def run(*args: str) -> Ran:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
        return Ran(code, capsys.readouterr().err)

    return run


def one_error_line(result: subprocess.CompletedProcess | Ran) -> str:
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
    flag: str, where: str, model_zoo, tiny_artifacts, tmp_path: Path, cli
):
    target = {
        "missing folder": tmp_path / "no" / "such" / "out.bin",
        "read-only": Path("/sys/parity-out.bin"),  # refused even to root, unlike chmod
        "a directory": tmp_path,
    }[where]
    result = cli(*tiny_args(model_zoo, tiny_artifacts), flag, str(target))
    line = one_error_line(result)
    assert "cannot write" in line and str(target) in line


def test_failed_run_with_unwritable_json_exits_2_with_one_line(tmp_path: Path, cli):
    result = cli(
        "validate", "--model", "demo:cnn", "--onnx", str(tmp_path / "absent.onnx"),
        "--json", str(tmp_path / "missing" / "r.json"),
    )  # fmt: skip
    assert "cannot write JSON report" in one_error_line(result)


def test_failed_run_writes_its_error_report_atomically(tmp_path: Path, cli):
    report = tmp_path / "r.json"
    result = cli(
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
    flag: str, model_zoo, tiny_artifacts, tmp_path: Path, cli
):
    out = tmp_path / ("out.npz" if flag.startswith("--save") else "out.txt")
    args = [*tiny_args(model_zoo, tiny_artifacts), "--input-sets", "2", "--dim", "batch=256"]
    args += [flag, str(out)]
    assert cli(*args).returncode == 0
    good = out.read_bytes()
    assert len(good) > 1000

    killed = run_cli(*args, prelude=_KILL_ON_SIZE.format(limit=len(good) // 2))
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr  # killed while writing
    assert out.read_bytes() == good  # the old file is whole
    assert len(temps_of(out)) == 1  # the killed writer's temp file is left ...

    assert cli(*args).returncode == 0
    assert temps_of(out) == []  # ... and the next write removes it
    assert is_whole(out, flag)


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
def test_file_size_limit_leaves_the_old_file_whole_and_no_temp(
    flag: str, model_zoo, tiny_artifacts, tmp_path: Path, cli
):
    out = tmp_path / ("out.npz" if flag.startswith("--save") else "out.txt")
    args = [*tiny_args(model_zoo, tiny_artifacts), "--input-sets", "2", "--dim", "batch=256"]
    args += [flag, str(out)]
    assert cli(*args).returncode == 0
    good = out.read_bytes()
    refused = run_cli(*args, prelude=_REFUSE_ON_SIZE.format(limit=len(good) // 2))
    assert "File too large" in one_error_line(refused)
    assert out.read_bytes() == good
    assert temps_of(out) == []


# --- strict files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"default": {"atol": "0.5"}}', "default.atol: expected a finite number"),
        ('{"default": {"atol": true}}', "default.atol: expected a finite number"),
        ('{"default": {"rtol": -1}}', "default.rtol: expected a finite number >= 0"),
        ('{"default": {"atol": 1e400}}', "got inf"),
        ('{"default": {"atol": NaN}}', "NaN is not a JSON number"),
        ('{"outputs": {"y": {"atol": 1, "atl": 2}}}', "unknown keys ['atl']"),
        ('{"default": {}, "output": {}}', "unknown keys ['output']"),
        ("[" * 100000 + "]" * 100000, "nested deeper than"),
        ('{"default": {"atol": 1' + "0" * 5000 + "}}", "not valid JSON"),
    ],
)
def test_tolerances_file_is_read_strictly(content: str, words: str, tmp_path: Path, cli) -> None:
    tol = tmp_path / "tol.json"
    tol.write_text(content)
    result = cli("validate", "--model", "demo:cnn", "--tolerances", str(tol))
    line = one_error_line(result)
    assert words in line and str(tol) in line


@pytest.fixture(scope="module")
def failing_saved_run(model_zoo, tiny_artifacts, tmp_path_factory) -> Path:
    """A real saved run whose one output fails (atol 1e-12 is below float32 noise)."""
    path = tmp_path_factory.mktemp("saved") / "fail.parity.npz"
    args = [*tiny_args(model_zoo, tiny_artifacts), "--atol", "1e-12", "--save-run", str(path)]
    assert main(args) == 1
    assert main(["report", str(path)]) == 1
    return path


def edited_run(source: Path, target: Path, edit, *, reseal: bool) -> Path:
    """Copy a saved run with its manifest edited; `reseal` recomputes the manifest hash."""
    import hashlib

    with zipfile.ZipFile(source) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
        comment = zf.comment
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zf:
        for info, data in items:
            if info.filename == "manifest.json":
                data = edit(data.decode()).encode()
                if reseal:
                    comment = b"parity.run/1 manifest.json sha256 " + (
                        hashlib.sha256(data).hexdigest().encode()
                    )
            zf.writestr(info, data)
        zf.comment = comment
    return target


def test_editing_statuses_from_fail_to_pass_is_refused(failing_saved_run, tmp_path: Path, cli):
    edited = edited_run(
        failing_saved_run,
        tmp_path / "edited.parity.npz",
        lambda text: text.replace('"status": "fail"', '"status": "pass"'),
        reseal=False,
    )
    assert '"status": "fail"' not in zipfile.ZipFile(edited).read("manifest.json").decode()
    line = one_error_line(cli("report", str(edited)))
    assert "does not match its manifest hash" in line


def test_a_manifest_without_its_hash_is_refused(failing_saved_run, tmp_path: Path, cli):
    target = tmp_path / "nohash.parity.npz"
    edited_run(failing_saved_run, target, lambda text: text, reseal=False)
    with zipfile.ZipFile(target, "a") as zf:
        zf.comment = b""
    assert "has no manifest hash" in one_error_line(cli("report", str(target)))


def _manifest_edit(path: str, value):
    """An edit that sets one manifest field (dotted path, list indices as ints)."""

    def edit(text: str) -> str:
        data = json.loads(text)
        *head, last = path.split(".")
        node = data
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
        return json.dumps(data)

    return edit


_ROW_AT, _ROW = "candidates.0.comparisons.0", "candidates[0].comparisons[0]"  # a saved row


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        (f"{_ROW_AT}.input_set", "1e400", f"{_ROW}.input_set: expected an integer"),
        (f"{_ROW_AT}.input_set", "true", f"{_ROW}.input_set: expected an integer"),
        (f"{_ROW_AT}.n_elements", "-3", f"{_ROW}.n_elements: expected an integer"),
        (f"{_ROW_AT}.status", '"great"', "unknown status"),
        (f"{_ROW_AT}.tolerance", '{"atol": "0.5", "rtol": 0}', "tolerance.atol"),
        (f"{_ROW_AT}.stats", '{"max_abs": 1}', "missing field"),
        ("input_sets.0.label", "7", "input_sets[0].label: expected a string"),
        ("input_sets.0.feeds", '"abc"', "input_sets[0].feeds: expected a list"),
        ("signature.inputs.0.shape", '"abc"', "signature.inputs[0].shape: expected a list"),
        ("signature.inputs.0.shape", "[1.5]", "shape[0]: expected an integer >= 0, a dim name"),
        ("extra", "[" * 100000 + "]" * 100000, "nested deeper than"),
        ("extra", "[" * 40 + "]" * 40, "nested deeper than 32"),
        ("timings.total", '"fast"', "timings.total: expected a finite number"),
    ],
)
def test_a_resealed_manifest_is_still_read_strictly(
    field: str, value: str, words: str, failing_saved_run, tmp_path: Path, cli
):
    """Behind the hash (a forger can recompute it), every field is type-checked.

    `value` is JSON text spliced in (1e400 and deep nesting do not survive json.dumps)."""
    marker = "__PARITY_RAW__"
    edit = _manifest_edit(field, marker)
    target = edited_run(
        failing_saved_run,
        tmp_path / "bad.parity.npz",
        lambda text: edit(text).replace(json.dumps(marker), value),
        reseal=True,
    )
    line = one_error_line(cli("report", str(target)))
    assert words in line and "Traceback" not in line


# --- bounded before allocating ----------------------------------------------------------


def _identity_model(folder: Path, shape: list, name: str = "x") -> tuple[str, Path]:
    """(model spec, ONNX file) of an identity with input `name` of `shape` (ints or names)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", [name], ["y"])],
        "identity",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx_path = folder / "identity.onnx"
    onnx.save(model, onnx_path)
    factory = folder / "identity_model.py"
    factory.write_text("import torch\n\ndef make():\n    return torch.nn.Identity()\n")
    return f"{factory}:make", onnx_path


def test_a_huge_fixed_input_dim_is_refused_before_allocating(tmp_path: Path, cli):
    spec, onnx_path = _identity_model(tmp_path, [100000, 100000])
    line = one_error_line(cli("validate", "--model", spec, "--onnx", str(onnx_path)))
    assert "needs 37.3 GiB" in line and "[100000, 100000]" in line
    assert "--max-memory" in line


def test_a_huge_dim_flag_is_refused_before_allocating(model_zoo, tiny_artifacts, cli):
    args = [*tiny_args(model_zoo, tiny_artifacts), "--dim", "batch=1000000000000"]
    line = one_error_line(cli(*args))
    # two sizes by default (the tiny file has a dynamic batch): both sets are counted
    assert "generating 2 input sets" in line and "needs 29.1 TiB" in line
    assert "smaller --dim sizes" in line


def test_many_input_sets_are_refused_before_the_first_is_made(cli):
    line = one_error_line(cli("validate", "--model", "demo:cnn", "--input-sets", "10000"))
    assert "generating 10000 input sets" in line and "fewer --input-sets" in line


def test_max_memory_sets_the_budget(model_zoo, tiny_artifacts, cli):
    args = [*tiny_args(model_zoo, tiny_artifacts), "--dim", "batch=100000"]  # 1.5 MiB of x
    line = one_error_line(cli(*args, "--max-memory", "1M"))
    assert "over the 1.0 MiB memory budget" in line
    assert cli(*args, "--max-memory", "64M").returncode == 0
    assert "--max-memory" in one_error_line(cli(*args, "--max-memory", "lots"))


def _npz_claiming(path: Path, key: str, shape: tuple[int, ...], *, deflate: bool) -> Path:
    """A small .npz whose member header claims `shape` float32 (the data is 64 bytes)."""
    import io

    import numpy as np

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as zf:
        zf.writestr(f"{key}.npy", header.getvalue() + b"\0" * 64)
    return path


@pytest.mark.parametrize("deflate", [False, True])
def test_an_npz_member_claiming_gigabytes_is_refused_from_its_header(
    deflate: bool, model_zoo, tiny_artifacts, tmp_path: Path, cli
):
    feeds = _npz_claiming(tmp_path / "big.npz", "x", (1 << 29, 4), deflate=deflate)
    assert feeds.stat().st_size < 1000
    line = one_error_line(cli(*tiny_args(model_zoo, tiny_artifacts), "--inputs", str(feeds)))
    assert "needs 8.0 GiB" in line and str(feeds) in line


def test_a_reference_file_claiming_gigabytes_is_refused_from_its_header(
    tiny_artifacts, tmp_path: Path, cli
):
    import numpy as np

    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.ones((2, 4), np.float32))
    ref = _npz_claiming(tmp_path / "ref.npz", "y", (1 << 29, 4), deflate=True)
    result = cli(
        "validate", "--onnx", str(tiny_artifacts.onnx), "--reference", str(ref),
        "--inputs", str(feeds),
    )  # fmt: skip
    line = one_error_line(result)
    assert "reference file" in line and "needs 8.0 GiB" in line


def test_input_sets_are_generated_one_at_a_time(tiny_artifacts):
    """Set k+1 is not made before set k is consumed: a run holds what it has run, not more."""
    from parity.limits.budget import MemoryBudget
    from parity.load.onnx_model import load_onnx
    from parity.run.inputs import iter_input_sets, make_input_sets

    signature = load_onnx(str(tiny_artifacts.onnx)).signature
    lazy = iter_input_sets(signature, n_sets=100_000, budget=MemoryBudget(1 << 40))
    first, second = next(lazy), next(lazy)  # 100000 sets made eagerly would take minutes
    assert (first.feeds["x"].shape, second.feeds["x"].shape) == ((2, 4), (4, 4))
    eager = make_input_sets(signature, n_sets=2)
    assert (eager[1].feeds["x"] == second.feeds["x"]).all()  # same sets, same values


# --- time limit -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def endless_loop(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(ONNX file, feeds, reference) of a model whose Loop has trip count 1e15."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    folder = tmp_path_factory.mktemp("loop")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "one"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body)],
        "endless",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [
            helper.make_tensor("trip", TensorProto.INT64, [], [10**15]),
            helper.make_tensor("cond", TensorProto.BOOL, [], [True]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx_path = folder / "endless.onnx"
    onnx.save(model, onnx_path)
    feeds, ref = folder / "feeds.npz", folder / "ref.npz"
    np.savez(feeds, x=np.zeros(1, np.float32))
    np.savez(ref, y=np.zeros(1, np.float32))
    return onnx_path, feeds, ref


def test_ort_is_terminated_inside_a_loop_at_the_deadline(endless_loop):
    """In process, no watchdog: ORT's terminate flag stops the Loop and the run says why."""
    from parity.errors import RunTimeout
    from parity.limits.deadline import Deadline
    from parity.load.onnx_model import load_onnx, make_session
    from parity.run.inputs import load_input_files
    from parity.run.runner import run_onnx

    onnx_path, feeds, _ = endless_loop
    model = load_onnx(str(onnx_path))
    session = make_session(model, provider="CPUExecutionProvider", opt_level="all")
    (input_set,) = load_input_files([feeds], model.signature)
    with pytest.raises(RunTimeout, match=r"^timed out after 0\.5 s$"):
        run_onnx(session, input_set, signature=model.signature, deadline=Deadline(0.5))


def test_timeout_ends_an_endless_onnx_loop_with_exit_2(endless_loop, tmp_path: Path):
    onnx_path, feeds, ref = endless_loop
    report = tmp_path / "r.json"
    result = run_cli(
        "validate", "--onnx", str(onnx_path), "--reference", str(ref), "--inputs", str(feeds),
        "--timeout", "5", "--json", str(report),
    )  # fmt: skip
    # one line, whichever step the 5 s ran out in: the loop, or on a loaded machine ONNX
    # Runtime's session setup (tried in a child first), which then says so
    line = one_error_line(result)
    assert line in (
        "parity: error: timed out after 5 s",
        "parity: error: timed out after 5 s: ONNX Runtime's session setup was abandoned "
        "(it was being tried in a child process, which was stopped)",
    ), line
    data = json.loads(report.read_text())
    assert data["verdict"] == "error" and data["errors"][0]["kind"] == "timeout"


def test_timeout_ends_a_torch_model_that_never_returns(tmp_path: Path, tiny_artifacts):
    """Torch cannot be interrupted: the watchdog ends the process; the old report stays whole."""
    factory = tmp_path / "endless_model.py"
    factory.write_text(
        "import torch\n\n"
        "class Endless(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        while True:\n"
        "            pass\n\n"
        "def make():\n"
        "    return Endless()\n"
    )
    html = tmp_path / "r.html"
    html.write_text("<html>the previous good report</html>")
    result = run_cli(
        "validate", "--model", f"{factory}:make", "--onnx", str(tiny_artifacts.onnx),
        "--timeout", "3", "--html", str(html),
    )  # fmt: skip
    # one line, whichever step the 3 s ran out in (on a loaded machine: ONNX Runtime's
    # session setup, tried in a child first, can take them all)
    assert one_error_line(result).startswith("parity: error: timed out after 3 s")
    assert html.read_text() == "<html>the previous good report</html>"
    assert temps_of(html) == []


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "soon"])
def test_a_bad_timeout_is_a_usage_error(value: str, cli):
    result = cli("validate", "--model", "demo:cnn", "--timeout", value)
    assert result.returncode == 2 and "--timeout" in result.stderr


def test_dashboard_time_limit_stops_an_endless_onnx_loop(endless_loop, tmp_path: Path):
    """The Run page's time limit: ORT is stopped, one line says so, the last run stays."""
    import torch
    from streamlit.testing.v1 import AppTest

    class Same(torch.nn.Module):
        def forward(self, x):
            return x * 1.0

    pt2 = tmp_path / "same.pt2"
    torch.export.save(torch.export.export(Same(), (torch.zeros(1),)), str(pt2))
    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=300)
    at.run()
    at.button(key="demo_cnn").click().run()
    good = at.session_state["parity_run"]
    at.radio(key="model_source").set_value("Path on this machine").run()
    at.text_input(key="model_path").set_value(str(pt2)).run()
    at.radio(key="onnx_source_False").set_value("Path on this machine").run()
    at.text_input(key="onnx_path").set_value(str(endless_loop[0])).run()
    at.number_input(key="timeout").set_value(2).run()
    at.button(key="run_custom").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("(timeout)" in e and "timed out after 2 s" in e for e in errors), errors
    assert at.session_state["parity_run"] is good


@pytest.mark.parametrize("name", ["report.json", "run [1].json", "a*b?.json"])
def test_the_next_write_removes_a_stale_temp_whatever_the_name(name: str, tmp_path: Path):
    from parity.files.atomic import write_output

    target = tmp_path / name
    stale = tmp_path / f".{name}.0123456789ab.parity-tmp"  # what a killed writer leaves
    stale.write_text('{"half": ')
    other = tmp_path / ".other.json.0123456789ab.parity-tmp"  # another file's: kept
    other.write_text("{}")
    write_output(target, '{"whole": true}', what="JSON report")
    assert json.loads(target.read_text()) == {"whole": True}
    assert not stale.exists() and other.exists()
