"""Issue 61 (safe by construction, round 6): the console's supervised child (a stop said as a
stop, the step's text escaped, a child that exits without a result is exit 2 with one line,
the child dies with its parent), credentials in URIs, external data hashed by what the tensors
use, the HTML's bidi controls. Real processes, real signals, real torch and ONNX Runtime;
every bound proven at a size that would not finish (or would show) without it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.test_security_terminal import RAW

FAKE_PASS = "PASS: every output passes"
DIM = f"b\x1b[2J\x1b[H\x1b[32m{FAKE_PASS}\x1b[0m"  # clears the screen, leaves a green PASS

MODELS = textwrap.dedent(
    """
    import os
    import signal
    import time

    import torch


    class Net(torch.nn.Module):
        def __init__(self, how):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)
            self.how = how

        def forward(self, x):
            if self.how == "term":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)
            if self.how == "exit0":
                os._exit(0)
            if self.how == "sleep":
                time.sleep(60)
            return self.fc(x)


    def make(how):
        torch.manual_seed(0)
        return Net(how).eval()


    def term():
        return make("term")


    def exit0():
        return make("exit0")


    def exit3():
        os._exit(3)


    def sleep():
        return make("sleep")
    """
)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models.py and m.onnx, whose batch dim is named to clear the screen and print PASS."""
    folder = tmp_path_factory.mktemp("supervised")
    (folder / "models.py").write_text(MODELS)
    scope: dict = {}
    exec(compile(MODELS, "models.py", "exec"), scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(scope["make"]("ok"), (torch.randn(2, 4),), str(folder / "m.onnx"),
                          dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})  # fmt: skip
    model = onnx.load(str(folder / "m.onnx"))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = DIM
    onnx.save(model, str(folder / "m.onnx"))
    return folder


def _console(zoo: Path, factory: str, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PARITY_NO_SUPERVISE"}
    return subprocess.Popen(
        [sys.executable, "-m", "parity", "validate", "--model", f"{zoo / 'models.py'}:{factory}",
         "--onnx", str(zoo / "m.onnx"), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_a_sigterm_is_a_stop_and_the_step_text_is_escaped(zoo: Path) -> None:
    """The child dies of SIGTERM in torch's forward (a CI timeout): `parity: stopped`, exit 2,
    the step's text (the input set's label holds the file's dim name) escaped."""
    proc = _console(zoo, "term")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert not RAW.search(out + err), err
    (line,) = [x for x in err.splitlines() if x.startswith("parity:")]
    assert line.startswith("parity: stopped (SIGTERM) while "), line
    assert "\\x1b[2J" in line and "crash" not in line and "native code" not in line, line


@pytest.mark.parametrize("factory", ["exit0", "exit3"])
def test_a_child_that_exits_without_a_result_is_exit_2_with_one_line(
    zoo: Path, factory: str
) -> None:
    """`os._exit(0)` in forward() (or `os._exit(3)` in the factory) used to end the console
    with that status, nothing printed: CI read a pass."""
    json_path = zoo / f"{factory}.json"
    proc = _console(zoo, factory, "--json", str(json_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    (line,) = [x for x in err.splitlines() if x.startswith("parity:")]
    status = factory[-1]
    assert f"ended without a result: its process exited with status {status}" in line, line
    assert not RAW.search(line), line


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP])
def test_the_child_dies_with_its_parent(zoo: Path, how: signal.Signals) -> None:
    proc = _console(zoo, "sleep")
    child = None
    deadline = time.monotonic() + 120
    while child is None and time.monotonic() < deadline:
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        child = int(kids[0]) if kids else None
        time.sleep(0.05)
    assert child is not None
    os.kill(proc.pid, how)
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        if state == "Z":  # dead, waiting for init to reap it
            break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{child}").exists(), f"child {child} outlived its parent"


# --- URIs: credentials redacted, streamed to disk, bounded by size and by the pair's time ---

SECRETS = (b"hunter2secret", b"AKIAEXAMPLEKEY", b"SIGSECRET0123", b"TOKSECRET9876")


class Served:
    """A local HTTP server in a thread: /tiny.onnx (the bytes given), /big (states a huge
    Content-Length, sends zeros on), /stream?n=N (N bytes, no stated length), /trickle (one
    byte every 0.2 s). `sent` counts the body bytes written."""

    def __init__(self, onnx_bytes: bytes = b"") -> None:
        import http.server
        import threading

        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: object) -> None:
                pass

            def _head(self, length: int | None) -> None:
                self.send_response(200)
                if length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()

            def do_HEAD(self) -> None:
                path = self.path.split("?")[0]
                sizes = {"/tiny.onnx": len(onnx_bytes), "/big": 5 << 30, "/trickle": 100}
                if path in sizes or path == "/stream":
                    self._head(sizes.get(path))
                else:
                    self.send_error(404)

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                try:
                    if path == "/tiny.onnx":
                        self._head(len(onnx_bytes))
                        self._send(onnx_bytes)
                    elif path == "/big":
                        self._head(5 << 30)
                        for _ in range(5 << 10):
                            self._send(bytes(1 << 20))
                    elif path == "/stream":
                        self._head(None)
                        n = int(query.split("=")[1])
                        for k in range(0, n, 1 << 20):
                            self._send(bytes(min(1 << 20, n - k)))
                    elif path == "/trickle":
                        self._head(100)
                        for _ in range(100):
                            self._send(b"x")
                            time.sleep(0.2)
                    else:
                        self.send_error(404)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                served.sent += len(data)

        self.sent = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(tiny_artifacts):
    server = Served(Path(tiny_artifacts.onnx).read_bytes())
    yield server
    server.stop()


def test_redacted_uri_hides_user_info_and_signing_parameters() -> None:
    from parity.sweep.names import redacted_text, redacted_uri

    assert redacted_uri("http://u:hunter2secret@h:8/m.onnx") == "http://***@h:8/m.onnx"
    presigned = redacted_uri(
        "https://b.s3.amazonaws.com/m.onnx?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAEXAMPLEKEY%2F20240101&X-Amz-Expires=60"
        "&X-Amz-Signature=SIGSECRET0123&X-Amz-Security-Token=TOKSECRET9876"
    )
    assert presigned.startswith("https://b.s3.amazonaws.com/m.onnx?X-Amz-Algorithm=AWS4")
    assert "X-Amz-Expires=60" in presigned and presigned.count("=***") == 3
    azure = redacted_uri("https://a.blob.core.windows.net/c/m.onnx?sv=2022&sp=r&sig=SIGSECRET0123")
    gcs = redacted_uri("https://storage.googleapis.com/b/m?X-Goog-Signature=SIGSECRET0123")
    assert azure.endswith("sv=2022&sp=r&sig=***") and gcs.endswith("X-Goog-Signature=***")
    said = redacted_text("cannot read x: 403, url='https://h/m?Signature=SIGSECRET0123'")
    assert "SIGSECRET0123" not in said and "Signature=***" in said
    assert redacted_uri("s3://bucket/models/m.onnx") == "s3://bucket/models/m.onnx"


def test_a_uris_credentials_never_reach_the_sweeps_files(
    tmp_path, model_zoo, tiny_artifacts, served
) -> None:
    """report.json, log.txt, the HTML, the saved run, summary.json and index.html of a pair
    read from `http://user:PASS@host/...?X-Amz-Signature=...` hold the URI redacted."""
    from parity.cli import main
    from tests.helpers.moto_s3 import tree_bytes
    from tests.helpers.sweep_zoo import tiny_zoo, write_manifest

    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    host = served.url.split("//")[1]
    uri = (
        f"http://reader:hunter2secret@{host}/tiny.onnx?X-Amz-Credential=AKIAEXAMPLEKEY"
        "&X-Amz-Signature=SIGSECRET0123&X-Amz-Security-Token=TOKSECRET9876"
    )
    gone = f"http://reader:hunter2secret@{host}/absent.onnx?X-Amz-Signature=SIGSECRET0123"
    args = ["--model", "models.py:make_tiny", "--html", "r.html", "--save-run", "run.parity.npz"]
    manifest = write_manifest(
        zoo, [{"name": "http", "args": [*args, "--onnx", uri]},
              {"name": "gone", "args": ["--model", "models.py:make_tiny", "--onnx", gone]}],
    )  # fmt: skip
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "1"]) == 2
    report = (out / "http" / "report.json").read_text()
    assert '"verdict": "pass"' in report and f"http://***@{host}/tiny.onnx?" in report
    files = tree_bytes(out)
    assert {"http/log.txt", "http/r.html", "summary.json", "index.html"} <= set(files)
    for name, data in files.items():
        assert not any(secret in data for secret in SECRETS), (name, data[:400])
    summary = (out / "summary.json").read_text()
    assert f"http://***@{host}/absent.onnx?X-Amz-Signature=***" in summary


def test_a_stated_size_past_the_limit_is_refused_before_reading(tmp_path, served) -> None:
    from parity.errors import UsageError
    from parity.sweep.delivery import ONNX_LIMIT, fetch_uri

    start = time.monotonic()
    with pytest.raises(UsageError) as refused:
        fetch_uri(f"{served.url}/big", tmp_path / "big", ONNX_LIMIT)
    assert "5.0 GiB, larger than 2.0 GiB, not read" in refused.value.message
    assert served.sent == 0 and not (tmp_path / "big").exists()
    assert time.monotonic() - start < 30


def test_an_unstated_size_is_bounded_while_reading_and_streamed_to_disk(tmp_path, served):
    """No Content-Length: the read stops one chunk past the limit; a file under the limit is
    streamed to disk with at most a few chunks in memory (tracemalloc's peak, 64 MiB read)."""
    import tracemalloc

    from parity.errors import UsageError
    from parity.sweep.delivery import CHUNK, fetch_uri

    with pytest.raises(UsageError) as refused:
        fetch_uri(f"{served.url}/stream?n={64 << 20}", tmp_path / "cut", 4 << 20)
    assert "larger than 4.0 MiB, not read" in refused.value.message
    assert (tmp_path / "cut").stat().st_size <= 4 << 20
    tracemalloc.start()
    try:
        fetch_uri(f"{served.url}/stream?n={64 << 20}", tmp_path / "whole", 1 << 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "whole").stat().st_size == 64 << 20
    assert peak < 8 * CHUNK, peak


def test_a_trickling_server_counts_against_the_pairs_timeout(
    tmp_path, model_zoo, tiny_artifacts, served
) -> None:
    from parity.cli import main
    from tests.helpers.sweep_zoo import tiny_zoo, write_manifest

    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    uri = f"http://u:hunter2secret@{served.url.split('//')[1]}/trickle.onnx"
    uri = uri.replace("/trickle.onnx", "/trickle")
    manifest = write_manifest(
        zoo, [{"name": "slow", "args": ["--model", "models.py:make_tiny", "--onnx", uri]}]
    )
    out = tmp_path / "out"
    start = time.monotonic()
    assert main(["sweep", str(manifest), "--out", str(out), "--workers", "1",
                 "--timeout", "2"]) == 2  # fmt: skip
    assert time.monotonic() - start < 10
    pair = __import__("json").loads((out / "summary.json").read_text())["pairs"][0]
    assert pair["error"].startswith("timed out after 2 s (killed) while reading http://***@")


# --- external data: hashed by what the tensors use ---


def _sparse_external(folder: Path, weight: np.ndarray, offset: int, size: int) -> Path:
    """m.onnx: y = x @ W, W stored at `offset` of w.bin, a sparse file of `size` bytes."""
    from onnx import TensorProto, helper, numpy_helper

    data = folder / "w.bin"
    with open(data, "wb") as fh:
        fh.truncate(size)
        fh.seek(offset)
        fh.write(weight.tobytes())
    tensor = numpy_helper.from_array(weight, "W")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", offset), ("length", weight.nbytes)):
        tensor.external_data.add(key=key, value=str(value))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [tensor],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "m.onnx"))
    return folder / "m.onnx"


def test_external_data_is_hashed_by_what_its_tensors_use(tmp_path: Path) -> None:
    """A `location` into a 1 TiB sparse file (a few KB on disk) of which the tensor uses
    1 KiB: loading hashes that 1 KiB (well under a second; it never ended before); the hash
    follows the used bytes, not the rest of the file."""
    import threading

    from parity.load.onnx_model import load_onnx

    weight = np.arange(256, dtype=np.float32).reshape(16, 16)
    path = _sparse_external(tmp_path, weight, offset=1 << 39, size=1 << 40)
    done: dict = {}
    start = time.monotonic()
    worker = threading.Thread(target=lambda: done.update(m=load_onnx(path)), daemon=True)
    worker.start()
    worker.join(10)
    took = time.monotonic() - start
    assert not worker.is_alive(), "hashing the 1 TiB file"
    assert took < 1.0, took
    first = done["m"].sha256
    with open(tmp_path / "w.bin", "r+b") as fh:  # a byte no tensor uses
        fh.seek(1 << 30)
        fh.write(b"\x01")
    assert load_onnx(path).sha256 == first
    with open(tmp_path / "w.bin", "r+b") as fh:  # a byte the tensor uses
        fh.seek((1 << 39) + 4)
        fh.write(b"\x01")
    assert load_onnx(path).sha256 != first


def test_external_data_past_its_files_end_is_one_line(tmp_path: Path) -> None:
    from parity.errors import OnnxLoadError
    from parity.load.onnx_model import load_onnx

    path = _sparse_external(tmp_path, np.ones((16, 16), np.float32), offset=0, size=4096)
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "offset":
            entry.value = str(1 << 20)
    onnx.save(model, str(path))
    with pytest.raises(OnnxLoadError) as refused:
        load_onnx(path)
    assert "lie past its end" in refused.value.message or "onnx.checker" in refused.value.message


# --- saved runs: what one may hold; the HTML's bidi controls ---


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    from parity.reports.saved_run import save_run
    from tests.test_saved_run import make_run

    run = make_run({"y": np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)}, n_sets=1)
    return save_run(run, tmp_path_factory.mktemp("round6") / "good.parity.npz")


def test_a_saved_run_with_300000_analyses_is_one_line(saved, tmp_path, capsys) -> None:
    """It froze a browser tab (2.36 GB renderer): refused when opened, in one line."""
    from parity.cli import main
    from parity.errors import SavedRunError
    from parity.reports.saved_run import load_run
    from tests.helpers.forged_runs import rewrite

    def forge(m: dict) -> None:
        m["analyses"] = [{"analysis": "layers", "text": "x", "done": True}] * 300_000

    forged = rewrite(saved, tmp_path / "many.parity.npz", forge)
    with pytest.raises(SavedRunError) as refused:
        load_run(forged)
    assert "analyses: 300,000 entries, more than the 10,000 a run holds" in str(refused.value)
    assert main(["report", str(forged), "--html", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r.html").exists()


def test_the_html_report_neutralises_bidi_controls_like_the_terminal(saved, tmp_path) -> None:
    """A forged label and note with U+202E (and an escape): the HTML holds them escaped as
    the terminal writes them, never the raw character."""
    from parity.cli import main
    from parity.text import terminal_text
    from tests.helpers.forged_runs import rewrite

    forged_text = "evil\u202efdp.exe\u2066\x1b[2J"

    def forge(m: dict) -> None:
        m["input_sets"][0]["label"] = forged_text
        m["model"] = forged_text

    forged = rewrite(saved, tmp_path / "bidi.parity.npz", forge)
    html_path = tmp_path / "r.html"
    assert main(["report", str(forged), "--html", str(html_path)]) in (0, 1)
    page = html_path.read_text(encoding="utf-8")
    assert "\u202e" not in page and "\u2066" not in page and "\x1b" not in page
    assert page.count(terminal_text(forged_text)) >= 2


def test_an_s3_key_ending_in_dot_dot_leaks_no_temporary_path(
    tmp_path, model_zoo, tiny_artifacts, monkeypatch
) -> None:
    """`s3://bucket/models/x/..` is an object like any other: it is read into a file of its
    own (it was written to the pair's folder itself, and the error named that temp path)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from parity.cli import main
    from tests.helpers.moto_s3 import BUCKET, TEMP_MARKS, Moto, tree_bytes
    from tests.helpers.sweep_zoo import tiny_zoo, write_manifest

    server = Moto()
    server.start()
    try:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
        server.put("models/x/..", (zoo / "tiny.onnx").read_bytes())
        uri = f"s3://{BUCKET}/models/x/.."
        manifest = write_manifest(
            zoo, [{"name": "dots", "args": ["--model", "models.py:make_tiny", "--onnx", uri]}]
        )
        out = tmp_path / "out"
        code = main(["sweep", str(manifest), "--out", str(out), "--workers", "1"])
    finally:
        server.stop()
    summary = (out / "summary.json").read_text()
    for name, data in tree_bytes(out).items():
        assert not any(mark in data for mark in TEMP_MARKS), (name, data[:300])
    assert code == 0, summary


def test_an_exception_inside_forward_is_the_models_error_not_the_signatures(tmp_path) -> None:
    """forward(features) against an ONNX input named x, raising inside forward: the error
    names the exception (it blamed the signature and printed a wrapper)."""
    import contextlib
    import io

    from parity.cli import main

    (tmp_path / "m.py").write_text(
        textwrap.dedent(
            """
            import torch

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = torch.nn.Linear(4, 3)

                def forward(self, features):
                    raise RuntimeError("boom: the model's own error")

            def make():
                return Net().eval()
            """
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),), str(tmp_path / "m.onnx"),
                          dynamo=False, input_names=["x"], output_names=["y"])  # fmt: skip
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["validate", "--model", f"{tmp_path / 'm.py'}:make",
                     "--onnx", str(tmp_path / "m.onnx")])  # fmt: skip
    assert code == 2
    (line,) = err.getvalue().strip().splitlines()
    assert "RuntimeError" in line and "boom: the model's own error" in line, line
    assert "does not take the ONNX file's inputs" not in line, line


# --- scales of 3e38: weights of inf are never agreement, never numpy's warnings ---

MLP = textwrap.dedent(
    """
    import torch


    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, 32)
            self.fc2 = torch.nn.Linear(32, 16)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))


    def make():
        torch.manual_seed(0)
        return MLP().eval()
    """
)


@pytest.fixture(scope="module")
def huge_scales(tmp_path_factory) -> tuple[object, Path, Path]:
    """The MLP, its int4 file (ONNX Runtime's MatMulNBitsQuantizer) with every scale set to
    3e38 (its weights dequantize to inf), and a DequantizeLinear file with a 3e38 scale."""
    import logging

    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    root = tmp_path_factory.mktemp("huge_scales")
    scope: dict = {}
    exec(compile(MLP, "mlp.py", "exec"), scope)
    model = scope["make"]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 3, 64),), str(root / "mlp.onnx"),
                          input_names=["x"], output_names=["y"], dynamo=False,
                          dynamic_axes={"x": {0: "b", 1: "t"}})  # fmt: skip
    logging.getLogger().setLevel(logging.ERROR)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(root / "mlp.onnx")), block_size=32,
                                     is_symmetric=True)  # fmt: skip
    quantizer.process()
    int4 = quantizer.model.model
    scaled = 0
    for init in int4.graph.initializer:
        if init.name.endswith("_scales"):
            big = np.full_like(numpy_helper.to_array(init), 3e38)
            init.CopyFrom(numpy_helper.from_array(big, init.name))
            scaled += 1
    assert scaled == 2
    onnx.save(int4, str(root / "int4_inf.onnx"))
    weight = model.fc1.weight.detach().numpy()
    q = np.clip(np.round(weight / (np.abs(weight).max() / 127)), -127, 127).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["qw", "s"], ["w"], axis=0),
         helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 64])],
        [numpy_helper.from_array(q, "qw"),
         numpy_helper.from_array(np.full(32, 3e38, np.float32), "s")],
    )  # fmt: skip
    dq = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    dq.ir_version = 8
    onnx.save(dq, str(root / "dq_inf.onnx"))
    return model, root / "int4_inf.onnx", root / "dq_inf.onnx"


def test_inf_weights_never_read_as_agreement_nor_warn(huge_scales) -> None:
    import parity
    from parity.show.findings import run_findings as findings_of

    model, int4, _ = huge_scales
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = parity.validate(model, str(int4))
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [
        f"{w.filename}:{w.lineno}: {w.message}" for w in caught
    ]
    texts = [f.text for f in findings_of(run)]
    assert not run.passed and any("off by up to inf steps" in t for t in texts), texts
    assert not any("agrees" in t or "max abs 0" in t for t in texts), texts


def test_an_output_of_nan_is_never_float32_rounding(huge_scales) -> None:
    """A 3e38 DequantizeLinear scale: ONNX gives NaN where float64 is finite; its error is
    unbounded, not '0x torch's own' (read as rounding, not a bug)."""
    import parity
    from parity.show.findings import run_findings as findings_of

    class Linear(torch.nn.Module):
        def forward(self, x):
            return x @ torch.ones(32, 64)

    run = parity.validate(Linear(), str(huge_scales[2]))
    texts = [f.text for f in findings_of(run)]
    assert not run.passed
    assert not any("rounding, not a bug" in t for t in texts), texts


@pytest.mark.parametrize("location", ["/etc/hostname", "../m.py", "/proc/self/environ", "link"])
def test_unsafe_external_data_beside_a_set_apart_op_names_the_real_cause(
    tmp_path: Path, location: str
) -> None:
    """SimplifiedLayerNormalization (ONNX Runtime's, set apart from the checker) and a
    Constant whose data lies outside the folder: refused, naming the external data, never
    'No Op registered for SimplifiedLayerNormalization'."""
    from onnx import TensorProto, helper, numpy_helper

    from parity.errors import OnnxLoadError
    from parity.load.onnx_model import load_onnx

    folder = tmp_path / "model"
    folder.mkdir()
    if location == "link":
        (folder / "link.bin").symlink_to("/proc/self/environ")
        location = "link.bin"
    constant = numpy_helper.from_array(np.ones(8, np.float32), "c")
    constant.ClearField("raw_data")
    constant.data_location = TensorProto.EXTERNAL
    constant.external_data.add(key="location", value=location)
    constant.external_data.add(key="length", value="32")
    graph = helper.make_graph(
        [helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["n"], axis=-1),
         helper.make_node("Constant", [], ["c"], value=constant),
         helper.make_node("Add", ["n", "c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(np.ones(8, np.float32), "scale")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "m.onnx"))
    with pytest.raises(OnnxLoadError) as refused:
        load_onnx(folder / "m.onnx")
    said = refused.value.message
    assert "No Op registered" not in said and "tensor name: c" in said, said
    assert location in said, said


def test_a_run_with_thousands_of_notes_renders_a_bounded_list(saved, tmp_path, capsys) -> None:
    """9,000 analyses notes (under the 10,000 a run may hold): every front renders at most
    MAX_FINDINGS findings and says how many more there were."""
    from parity.cli import main
    from parity.reports.saved_run import load_run
    from parity.show.findings import MAX_FINDINGS, run_findings
    from tests.helpers.forged_runs import rewrite

    def forge(m: dict) -> None:
        note = {"analysis": "layers", "done": False}
        m["analyses"] = [{**note, "text": f"n{k}"} for k in range(9000)]

    forged = rewrite(saved, tmp_path / "notes.parity.npz", forge)
    found = run_findings(load_run(forged))
    assert len(found) == MAX_FINDINGS + 1, len(found)
    assert found[-1].text.startswith("… and 8,") and "more findings" in found[-1].text
    main(["report", str(forged)])
    assert len(capsys.readouterr().out.splitlines()) < MAX_FINDINGS + 100
