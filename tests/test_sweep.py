"""`parity sweep` end to end: real pairs in real processes, locally and on a real Ray cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from parity.cli import build_parser, main
from parity.path_flags import PathFlags
from parity.sweep.index import render_index
from parity.sweep.manifest import load_manifest
from parity.sweep.plan import plan_jobs
from tests.helpers.sweep_zoo import (
    GOOD,
    copy_tiny,
    processes_mentioning,
    summary_without_times,
    tiny_zoo,
    validating_in,
    write_manifest,
)


def test_resume_skips_pairs_done_with_the_same_arguments_and_reruns_changed_ones(
    tmp_path, model_zoo, tiny_artifacts, capsys
):
    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    pair = ["--model", "models.py:make_tiny", "--onnx", "tiny.onnx"]
    with_html = [*pair, "--html", "report.html"]
    manifest = write_manifest(zoo, [{"name": "a", "args": with_html}, {"name": "b", "args": pair}])
    out = tmp_path / "out"
    argv = ["sweep", str(manifest), "--out", str(out), "--workers", "2"]
    assert main(argv) == 0
    first = {n: (out / n / "report.json").stat().st_mtime_ns for n in "ab"}

    assert main([*argv, "--resume"]) == 0
    assert "(2 resumed)" in capsys.readouterr().out
    assert {n: (out / n / "report.json").stat().st_mtime_ns for n in "ab"} == first
    assert summary_without_times(out)["counts"] == {"pass": 2, "fail": 0, "error": 0}

    changed = [*pair, "--seed", "3"]
    write_manifest(zoo, [{"name": "a", "args": with_html}, {"name": "b", "args": changed}])
    assert main([*argv, "--resume"]) == 0
    assert "(1 resumed)" in capsys.readouterr().out
    assert (out / "a" / "report.json").stat().st_mtime_ns == first["a"]
    assert (out / "b" / "report.json").stat().st_mtime_ns != first["b"]

    (out / "a" / "report.html").unlink()  # a file the pair wrote is gone: it runs again
    assert main([*argv, "--resume"]) == 0
    assert "(1 resumed)" in capsys.readouterr().out
    assert (out / "a" / "report.html").is_file()
    first["a"] = (out / "a" / "report.json").stat().st_mtime_ns

    (zoo / "tiny.onnx").write_bytes((zoo / "tiny.onnx").read_bytes())  # new mtime, same bytes
    assert main([*argv, "--resume"]) == 0
    assert "(2 resumed)" in capsys.readouterr().out

    (zoo / "models.py").write_text((zoo / "models.py").read_text() + "\n# edited\n")
    assert main([*argv, "--resume"]) == 0  # the model file changed: both pairs run again
    assert "resumed" not in capsys.readouterr().out
    assert (out / "a" / "report.json").stat().st_mtime_ns != first["a"]


FLAGS = PathFlags.of(build_parser())


def _m(*pairs: dict, **top) -> dict:
    return {"schema": "parity.sweep/1", "pairs": list(pairs), **top}


def _p(name: str = "a", args: list[str] = GOOD, **more) -> dict:
    return {"name": name, "args": args, **more}


def test_the_resume_key_changes_with_args_defaults_timeout_and_versions(tmp_path):
    from parity.sweep.plan import installed_versions, pair_key

    def keys(pairs: list[dict], defaults: list[str] | None = None, timeout: float = 60.0):
        manifest = load_manifest(write_manifest(tmp_path, pairs, defaults=defaults), flags=FLAGS)
        return [job.key for job in plan_jobs(manifest, tmp_path / "out", timeout=timeout)]

    demo = ["--model", "demo:cnn"]
    a, b = {"name": "a", "args": demo}, {"name": "b", "args": [*demo, "--atol", "1e-4"]}
    key_a, key_b = keys([a, b])
    assert keys([a, b]) == [key_a, key_b] and key_a != key_b  # same arguments, same key
    changed = keys([a, {"name": "b", "args": [*demo, "--atol", "1e-3"]}])
    assert changed[0] == key_a and changed[1] != key_b  # only the changed pair's key moves
    assert set(keys([a, b], defaults=["--input-sets", "2"])).isdisjoint({key_a, key_b})
    assert set(keys([a, b], timeout=61.0)).isdisjoint({key_a, key_b})
    spec = load_manifest(tmp_path / "manifest.json", flags=FLAGS).pairs[0]
    versions = installed_versions()
    assert "parity" in versions and "torch" in versions and "onnxruntime" in versions
    other = {**versions, "onnxruntime": "0.0.1"}
    assert pair_key(spec, tmp_path, 60.0, versions) != pair_key(spec, tmp_path, 60.0, other)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_m(_p(), extra=1), "the manifest: unknown key 'extra'"),
        (_m(_p(timeout=3)), "pairs[0]: unknown key 'timeout'"),
        (_m(_p(), defaults={"argv": []}), "defaults: unknown key 'argv'"),
        (_m(_p(), schema="parity.sweep/2"), "schema must be 'parity.sweep/1'"),
        (_m(), "'pairs' must be a non-empty list"),
        (_m(_p(), _p("A")), "pairs[1]: duplicate name 'A' (as 'a')"),
        (_m(_p("../up")), "name '../up' is not safe as a folder name"),
        (_m(_p("a/b")), "name 'a/b' is not safe"),
        (_m(_p(".hidden")), "name '.hidden' is not safe"),
        (_m(_p("summary.json")), "name 'summary.json' is reserved"),
        (_m(_p(args="--model x")), "pairs[0].args must be a list of strings"),
        (_m(_p(args=[*GOOD[:3], "gone.onnx"])), "pair 'a': --onnx gone.onnx: no such file"),
        (_m(_p(args=["--model", "gone.py:make"])), "pair 'a': --model gone.py:make: no such file"),
        (_m(_p(args=[*GOOD, "--json", "r.json"])), "pair 'a': remove --json"),
        (_m(_p(args=[*GOOD, "--html", "../r.html"])), "--html ../r.html: give a plain name"),
        (_m(_p(args=[*GOOD, "--repro", "/tmp/r"])), "--repro /tmp/r: give a plain name"),
        (_m(_p(args=[*GOOD, "--repro=../../r"])), "--repro ../../r: give a plain name"),
        (_m(_p(args=[*GOOD, "--html", "log.txt"])), "the sweep writes that file itself"),
        (
            _m(_p(args=[*GOOD, "--html", "r", "--save-run", "r"])),
            "--save-run r: --html writes the same file",
        ),
        (_m(_p(), sha256={"tiny.onnx": "ab"}), "sha256['tiny.onnx'] must be 64 lowercase"),
        (_m(_p(), sha256={"tiny.onnx": "0" * 64}), "pair 'a': --onnx tiny.onnx: its SHA-256 is "),
        (
            _m(_p(args=[*GOOD, "--data", "s3://zoo/d/"]), sha256={"s3://zoo/d/": "0" * 64}),
            "pair 'a': --data s3://zoo/d/: the pair reads it where it lies",
        ),
        (_m(_p(args=[*GOOD, "--htm", "r.html"])), "pair 'a': write --html in full, not --htm"),
        (_m(_p(args=["validate", *GOOD])), "pair 'a': unrecognized arguments: validate"),
        (_m(_p(args=[*GOOD, "--input-sets", "two"])), "--input-sets: invalid int value: 'two'"),
        (_m(_p(args=[*GOOD, "--help"])), "pair 'a': remove --help"),
    ],
)
def test_a_bad_manifest_is_one_line_and_exit_2_before_any_pair_runs(
    tmp_path, model_zoo, tiny_artifacts, capsys, data, expected
):
    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    manifest = zoo / "manifest.json"
    manifest.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("parity: error: "), err
    assert expected in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"schema": "parity.sweep/1", "schema": "parity.sweep/1", "pairs": []}',
         "not valid JSON: duplicate key 'schema'"),
        ("{not json", "not valid JSON"),
        ("[]", "the manifest must be a JSON object"),
    ],
)  # fmt: skip
def test_a_manifest_that_is_not_the_expected_json_is_one_line(tmp_path, capsys, text, expected):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(text)
    assert main(["sweep", str(manifest), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_missing_manifest_and_bad_flags_are_one_line(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.json"), "--out", str(tmp_path)]) == 2
    assert "cannot read manifest" in capsys.readouterr().err
    manifest = write_manifest(tmp_path, [{"name": "a", "args": ["--model", "demo:cnn"]}])
    assert main(["sweep", str(manifest), "--out", str(tmp_path / "o"), "--workers", "0"]) == 2
    assert "--workers 0: must be at least 1" in capsys.readouterr().err
    assert main(["sweep", str(manifest), "--out", "o", "--ray-address", "auto"]) == 2
    assert "--ray-address needs --engine ray" in capsys.readouterr().err


def test_paths_resolve_in_the_manifest_folder_and_outputs_land_in_the_pair_folder(
    tmp_path, model_zoo, tiny_artifacts
):
    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    manifest = write_manifest(
        zoo,
        [{"name": "a", "args": ["--onnx=tiny.onnx", "--save-run", "run.parity.npz"]}],
        defaults=["--model", "models.py:make_tiny", "--provider", "CUDAExecutionProvider"],
    )
    (job,) = plan_jobs(load_manifest(manifest, flags=FLAGS), tmp_path / "out", timeout=5)
    assert job.cwd == str(zoo.resolve())
    assert job.out_dir == str((tmp_path / "out" / "a").resolve())
    args = job.command_args(tmp_path / "work")  # outputs go to the pair's private folder
    assert args[-2:] == ["--json", str(tmp_path / "work" / "report.json")]
    assert str(tmp_path / "work" / "run.parity.npz") in args
    assert "--onnx=tiny.onnx" in args
    moved = {i: "/w/in/tiny.onnx" for i, a in enumerate(job.args) if a == "--onnx=tiny.onnx"}
    assert "--onnx=/w/in/tiny.onnx" in job.command_args(tmp_path / "work", moved)
    assert job.num_gpus == 1  # Ray reserves a GPU for a CUDA pair


def test_a_data_uri_stays_in_the_pairs_args_for_validate_to_read_where_the_pair_runs(tmp_path):
    """--data's URI (a prefix of many objects here) is validate's to open, as `parity validate
    --data` does; an --onnx URI is fetched into the pair's folder."""
    data, onnx = "s3://zoo/images/", "s3://zoo/m.onnx"
    args = ["--model", "demo:cnn", "--data", data, "--onnx", onnx]
    manifest = write_manifest(tmp_path, [{"name": "a", "args": args}])
    (job,) = plan_jobs(load_manifest(manifest, flags=FLAGS), tmp_path / "out", timeout=None)
    assert [(s.flag, s.kind, s.path) for s in job.inputs] == [("--onnx", "uri", onnx)]
    moved = {s.index: "/w/uri/m.onnx" for s in job.inputs}
    assert job.command_args(tmp_path / "work", moved)[:6] == [*args[:5], "/w/uri/m.onnx"]


def test_a_gpu_pairs_ray_task_asks_for_a_gpu_and_a_cluster_without_one_refuses_it(tmp_path):
    from parity.sweep.on_ray import task_options, unplaceable

    manifest = write_manifest(
        tmp_path,
        [
            {"name": "cpu", "args": ["--model", "demo:cnn"]},
            {"name": "cuda", "args": ["--model", "demo:cnn", "--provider=CUDAExecutionProvider"]},
            {
                "name": "rocm",
                "args": ["--model", "demo:cnn", "--provider", "ROCMExecutionProvider"],
            },
        ],
    )
    cpu, cuda, rocm = plan_jobs(
        load_manifest(manifest, flags=FLAGS), tmp_path / "out", timeout=None
    )
    assert task_options(cpu) == {
        "num_cpus": 1, "num_gpus": 0, "name": "parity-sweep:cpu", "max_retries": 0
    }  # fmt: skip
    assert task_options(cuda) == {
        "num_cpus": 1, "num_gpus": 1, "name": "parity-sweep:cuda", "max_retries": 0
    }  # fmt: skip
    assert task_options(rocm)["num_gpus"] == 1  # Ray's GPU resource is AMD's too
    no_gpu, one_gpu = {"CPU": 2.0, "memory": 1e9}, {"CPU": 2.0, "GPU": 1.0}
    assert unplaceable(cpu, no_gpu) is None and unplaceable(cuda, one_gpu) is None
    assert unplaceable(cuda, no_gpu) == (
        "asks for CUDAExecutionProvider, which needs a GPU, and the Ray cluster has none "
        "(2 CPU, 0 GPU): run it on a cluster with a GPU node, or with "
        "--provider CPUExecutionProvider"
    )


def test_a_pairs_ray_task_asks_for_its_max_memory_and_a_cluster_too_small_refuses_it(tmp_path):
    from parity.sweep.on_ray import task_options, unplaceable

    heavy = ["--model", "demo:cnn", "--max-memory", "6G"]
    manifest = write_manifest(tmp_path, [{"name": "heavy", "args": heavy}])
    (job,) = plan_jobs(load_manifest(manifest, flags=FLAGS), tmp_path / "out", timeout=None)
    assert task_options(job)["memory"] == 6 << 30 and task_options(job)["max_retries"] == 0
    assert unplaceable(job, {"CPU": 4.0, "memory": 8e9}) is None
    assert unplaceable(job, {"CPU": 4.0, "memory": 4 << 30}) == (
        "asks for 6.0 GiB (its --max-memory), and the Ray cluster has 4.0 GiB for tasks"
    )
    assert unplaceable(job, {"CPU": 0.0, "memory": 8e9}) == (
        "the Ray cluster has 0 CPU, and the pair needs 1"
    )


def test_engine_ray_without_ray_installed_is_one_line_naming_the_extra(tmp_path):
    hide = tmp_path / "no_ray"
    hide.mkdir()
    (hide / "ray.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    manifest = write_manifest(tmp_path, [{"name": "a", "args": ["--model", "demo:cnn"]}])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), os.getcwd()])}
    result = subprocess.run(
        [sys.executable, "-m", "parity", "sweep", str(manifest), "--out", str(tmp_path / "o")]
        + ["--engine", "ray"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "--engine ray needs Ray" in result.stderr and "[ray]" in result.stderr


def test_index_shows_names_and_messages_as_text_and_loads_nothing():
    summary = {
        "schema": "parity.sweep/1",
        "manifest": "m.json",
        "total": 2,
        "complete": False,
        "counts": {"pass": 0, "fail": 0, "error": 1},
        "pairs": [
            {
                "name": "x",
                "verdict": "error",
                "exit_code": 2,
                "seconds": 1.0,
                "error": "<script>alert(1)</script> & <img src=http://evil/>",
                "failing": [],
                "worst": None,
                "html": None,
                "saved_run": None,
            }
        ],
    }
    page = render_index(summary)
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;img" in page
    assert "default-src 'none'" in page
    assert "running: 1 of 2" in page
    assert "href='x/report.json'" in page


def test_progress_line_text_counts_verdicts_and_estimates_from_the_pairs_that_ran():
    from parity.sweep.execute import PairResult
    from parity.sweep.progress import clock, progress_line

    done = [
        PairResult("a", "pass", 0, 1.0, None, (), None, ""),
        PairResult("b", "fail", 1, 1.0, None, ("y",), None, ""),
    ]
    assert progress_line(4, done, 0, 65.0) == (
        "sweep 2/4 done: 1 pass, 1 fail, 0 error; 1:05 elapsed, ETA 1:05"
    )
    assert progress_line(4, done, 1, 65.0).endswith("ETA 2:10")  # one was resumed, not run
    assert progress_line(2, done, 0, 65.0).endswith("1:05 elapsed")  # finished: no ETA
    assert progress_line(4, [], 0, 3.0) == "sweep 0/4 done: 0 pass, 0 fail, 0 error; 0:03 elapsed"
    assert clock(3725.9) == "1:02:05"


def _sweep_on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`parity sweep` with its stderr on a pseudo-terminal: (exit code, what the terminal got)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # rows, columns
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env={**os.environ, **env},
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode()


def test_progress_line_is_live_on_a_terminal_and_absent_from_logs_and_ci(
    tmp_path, model_zoo, tiny_artifacts
):
    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    failing = [*GOOD, "--weights", "other_weights.pt"]
    manifest = write_manifest(zoo, [{"name": "a", "args": GOOD}, {"name": "b", "args": failing}])
    out = tmp_path / "out"
    argv = ["sweep", str(manifest), "--out", str(out), "--workers", "1"]
    terminal = {"TERM": "xterm", "CI": ""}

    code, shown = _sweep_on_a_terminal(argv, terminal)
    assert code == 1
    lines = shown.split("\r\x1b[K")
    assert lines[1].startswith("sweep 0/2 done: 0 pass, 0 fail, 0 error; 0:00 elapsed")
    # redrawn while the first pair runs (a process that imports torch: over a second)
    assert any(line.startswith("sweep 0/2 done") and "0:00" not in line for line in lines)
    after_one = [line for line in lines if line.startswith("sweep 1/2 done: 1 pass, 0 fail")]
    assert after_one and all(", ETA " in line for line in after_one)
    assert any(line.startswith("sweep 2/2 done: 1 pass, 1 fail, 0 error; ") for line in lines)
    assert lines[-1] == ""  # cleared at the end, for the summary lines that follow

    for env in ({"TERM": "xterm", "CI": "true"}, {"TERM": "dumb", "CI": ""}):
        code, shown = _sweep_on_a_terminal([*argv, "--resume"], env)
        assert code == 1 and "done:" not in shown, env
    logged = subprocess.run(  # a log file or a CI log: stderr is not a terminal
        [sys.executable, "-m", "parity", *argv, "--resume"],
        capture_output=True,
        text=True,
        env={**os.environ, **terminal},
        timeout=300,
    )
    assert logged.returncode == 1 and "done:" not in logged.stderr + logged.stdout


def test_interrupting_a_sweep_kills_its_running_pairs_and_keeps_thesummary_without_times(
    tmp_path, model_zoo, tiny_artifacts
):
    import time

    from tests.helpers.sweep_zoo import write_loop_onnx

    zoo = tiny_zoo(tmp_path, model_zoo, tiny_artifacts)
    write_loop_onnx(zoo / "loop.onnx")
    hang = ["--model", "models.py:make_tiny", "--onnx", "loop.onnx"]
    manifest = write_manifest(zoo, [{"name": "h1", "args": hang}, {"name": "h2", "args": hang}])
    out = tmp_path / "out"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "parity", "sweep", str(manifest), "--out", str(out)]
        + ["--workers", "2", "--timeout", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (out / "summary.json").is_file() or not processes_mentioning("loop.onnx"):
        assert time.monotonic() < deadline and sweep.poll() is None
        time.sleep(0.2)
    # both pairs' validate processes running (loop.onnx in their folder is unique to this test)
    while len(validating_in(zoo)) < 2:
        assert time.monotonic() < deadline and sweep.poll() is None
        time.sleep(0.2)
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 2
    assert "interrupted" in err
    assert not validating_in(zoo)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["pairs"] == []
