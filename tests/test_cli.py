"""The `parity` command end to end: exit codes, the table, the JSON report, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from parity.cli import main
from parity.reports.report import SCHEMA

REPORT_OUTPUT_KEYS = {
    "input_set", "name", "status", "ref_shape", "onnx_shape", "ref_dtype", "onnx_dtype",
    "n_elements", "max_abs", "max_rel", "mean_abs", "rms", "p99_abs", "n_mismatch",
    "mismatch_fraction", "n_nan_mismatch", "n_inf_mismatch", "worst_index", "ref_at_worst",
    "onnx_at_worst", "cosine", "snr_db", "atol", "rtol", "min_atol_to_pass", "message",
    "candidate",
}  # fmt: skip


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parity", *args], capture_output=True, text=True, timeout=600
    )


def test_passing_demo_exits_0_and_prints_verdict():
    result = run_cli("validate", "--model", "demo:cnn", "--input-sets", "2")
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout
    assert "logits" in result.stdout


def test_broken_demo_exits_1_and_names_the_failing_output(tmp_path: Path, capsys):
    report_path = tmp_path / "report.json"
    code = main(["validate", "--model", "demo:broken", "--json", str(report_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in out
    report = json.loads(report_path.read_text())
    failing = {o["name"] for o in report["outputs"] if o["status"] != "pass"}
    assert failing == {"mask"}
    assert "mask" in out.splitlines()[-1]


def test_corrupt_onnx_exits_2_with_one_line_and_no_traceback(tmp_path: Path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf" * 10)
    result = run_cli("validate", "--model", "demo:cnn", "--onnx", str(bad))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "model.onnx" in lines[0]
    assert "Traceback" not in result.stderr


def test_missing_onnx_file_exits_2_and_error_report_is_written(tmp_path: Path, capsys):
    report_path = tmp_path / "r.json"
    code = main(
        ["validate", "--model", "demo:cnn", "--onnx", str(tmp_path / "nope.onnx"),
         "--json", str(report_path)]
    )  # fmt: skip
    assert code == 2
    assert "nope.onnx" in capsys.readouterr().err
    report = json.loads(report_path.read_text())
    assert report["verdict"] == "error"
    assert report["errors"][0]["kind"] == "onnx_load"


def test_json_report_follows_schema_and_is_strict(tmp_path: Path):
    report_path = tmp_path / "report.json"
    code = main(
        ["validate", "--model", "demo:transformer", "--input-sets", "2",
         "--json", str(report_path)]
    )  # fmt: skip
    text = report_path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    report = json.loads(text)
    assert report["schema"] == SCHEMA
    assert report["verdict"] == ("pass" if code == 0 else "fail")
    assert {"torch", "onnx", "onnxruntime", "provider"} <= set(report["environment"])
    assert [s["index"] for s in report["input_sets"]] == [0, 1]
    assert len(report["outputs"]) == 2 * len({o["name"] for o in report["outputs"]})
    for output in report["outputs"]:
        assert REPORT_OUTPUT_KEYS <= set(output)
    shapes = [s["inputs"]["input_ids"]["shape"] for s in report["input_sets"]]
    assert shapes[0] != shapes[1], "the second input set must exercise other sizes"


def test_fp16_demo_fails_by_default_and_passes_at_per_output_tolerances(tmp_path: Path):
    from parity.load.demos import DEMOS

    assert main(["validate", "--model", "demo:fp16"]) == 1
    tol_file = tmp_path / "tol.json"
    tol_file.write_text(DEMOS["fp16"].tolerances.dumps())
    assert main(["validate", "--model", "demo:fp16", "--tolerances", str(tol_file)]) == 0


def test_per_output_tol_flag_overrides_default(tmp_path: Path):
    report_path = tmp_path / "r.json"
    code = main(
        ["validate", "--model", "demo:broken", "--tol", "mask=1e3:0", "--json", str(report_path)]
    )
    report = json.loads(report_path.read_text())
    assert code == 0
    assert report["tolerances"]["outputs"]["mask"] == {"atol": 1000.0, "rtol": 0.0}
    mask = next(o for o in report["outputs"] if o["name"] == "mask")
    assert mask["atol"] == 1000.0 and mask["status"] == "pass"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--dim", "batch"], "--dim"),
        (["--dim", "nosuchdim=3"], "nosuchdim"),
        (["--tol", "mask"], "--tol"),
        (["--int-range", "x=5:1"], "--int-range"),
        (["--atol", "-1"], "atol"),
        (["--model", "demo:nosuchdemo"], "nosuchdemo"),
        (["--provider", "NoSuchExecutionProvider"], "NoSuchExecutionProvider"),
    ],
)
def test_bad_usage_exits_2_naming_the_problem(args, words, capsys):
    base = ["validate", "--model", "demo:cnn"]
    code = main(base + args)
    err = capsys.readouterr().err
    assert code == 2
    assert words in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, words",
    [
        # the example exited 0: hf: silently ignored all three
        (["--model", "hf:/no/such/llm", "--weights", "/nonexistent.safetensors",
          "--input-sets", "5", "--dim", "batch=7"], "--weights, --dim, --input-sets"),
        (["--model", "hf:/no/such/llm", "--int-range", "input_ids=0:5"], "--int-range"),
        (["--model", "demo:cnn", "--task", "text-classification"], "hf:DIR"),
        (["--model", "demo:cnn", "--prompt", "hello"], "hf:DIR"),
        (["--model", "demo:cnn", "--max-new-tokens", "2"], "hf:DIR"),
        (["--model", "demo:cnn", "--inputs", "feeds.npz", "--dim", "batch=3"], "--dim"),
    ],
)  # fmt: skip
def test_flags_that_do_not_apply_to_the_kind_of_run_exit_2(args, words, capsys):
    code = main(["validate", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert words in err and ("not apply" in err or "apply only" in err)
    assert len(err.strip().splitlines()) == 1


def test_tolerance_for_an_unknown_output_exits_2_listing_the_real_names(tmp_path: Path, capsys):
    # a typo used to leave the real output on the default tolerance and exit 0
    assert main(["validate", "--model", "demo:broken", "--tol", "maskk=1e3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'maskk'" in err and "'mask'" in err and len(err.splitlines()) == 1
    tol_file = tmp_path / "tol.json"
    tol_file.write_text('{"outputs": {"logitz": {"atol": 1e-3}}}')
    assert main(["validate", "--model", "demo:cnn", "--tolerances", str(tol_file)]) == 2
    assert "'logitz'" in capsys.readouterr().err


def test_tolerances_file_errors_exit_2(tmp_path: Path, capsys):
    bad = tmp_path / "tol.json"
    bad.write_text('{"default": {"atol": "x"}}')
    assert main(["validate", "--model", "demo:cnn", "--tolerances", str(bad)]) == 2
    assert "tol.json" in capsys.readouterr().err


def test_model_that_raises_exits_2(tmp_path: Path, capsys):
    import torch

    class Doubler(torch.nn.Module):
        def forward(self, x):
            return x * 2

    onnx_path = tmp_path / "m.onnx"
    torch.onnx.export(
        Doubler(), (torch.zeros(2, 3),), str(onnx_path), input_names=["x"],
        output_names=["y"], dynamo=False,
    )  # fmt: skip
    factory = tmp_path / "factory.py"
    factory.write_text(
        "import torch\n"
        "class Bad(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        raise RuntimeError('kaboom in forward')\n"
        "def make():\n"
        "    return Bad()\n"
    )
    code = main(["validate", "--model", f"{factory}:make", "--onnx", str(onnx_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "kaboom in forward" in err


def test_demos_command_lists_every_demo(capsys):
    assert main(["demos"]) == 0
    out = capsys.readouterr().out
    for name in ("cnn", "transformer", "fp16", "broken"):
        assert f"demo:{name}" in out


def test_json_html_and_saved_run_together_cost_one_model_run(tmp_path: Path, capsys):
    import torch

    calls = tmp_path / "calls.txt"
    factory = tmp_path / "counting.py"
    factory.write_text(
        "import torch\n"
        "class Counting(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        f"        open({str(calls)!r}, 'a').write('call\\n')\n"
        "        return x * 3\n"
        "def make():\n"
        "    return Counting()\n"
    )

    class Triple(torch.nn.Module):
        def forward(self, x):
            return x * 3

    onnx_path = tmp_path / "m.onnx"
    torch.onnx.export(
        Triple(), (torch.zeros(2, 3),), str(onnx_path), input_names=["x"],
        output_names=["y"], dynamic_axes={"x": {0: "batch"}}, dynamo=False,
    )  # fmt: skip
    outputs = {"--json": "r.json", "--html": "r.html", "--save-run": "r.parity.npz"}
    flags = [item for flag, name in outputs.items() for item in (flag, str(tmp_path / name))]
    code = main(["validate", "--model", f"{factory}:make", "--onnx", str(onnx_path), *flags])
    assert code == 0, capsys.readouterr().err
    # one torch call per input set (two by default: the file has a dynamic batch)
    assert calls.read_text().splitlines() == ["call", "call"]
    assert all((tmp_path / name).stat().st_size > 0 for name in outputs.values())


def test_an_unknown_flag_of_a_command_is_one_line_of_that_command(capsys):
    """Issue 22: `validate --bogus` is validate's error (its flags), not the top level's;
    issue 37: in one line, not the command's whole usage; no flag is guessed from an
    abbreviation (sweep's neither)."""
    with pytest.raises(SystemExit) as info:
        main(["validate", "--model", "demo:cnn", "--bogus", "1"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err == (
        "parity validate: error: unrecognized arguments: --bogus 1 "
        "(parity validate --help lists the flags)\n"
    )
    with pytest.raises(SystemExit):
        main(["validate", "--model", "demo:cnn", "--at", "1e-4"])
    assert "unrecognized arguments: --at 1e-4" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "m.json", "--out", "x", "--work", "2"])
    err = capsys.readouterr().err
    assert err.startswith("parity sweep: error: unrecognized arguments: --work 2")


def _counting_loaders(calls: list[str]):
    from dataclasses import replace

    from parity.run.config import default_loaders

    base = default_loaders()

    def load_torch_model(spec, *, weights=None):
        calls.append("torch")
        return base.load_torch_model(spec, weights=weights)

    def load_onnx(path):
        calls.append("onnx")
        return base.load_onnx(path)

    return replace(base, load_torch_model=load_torch_model, load_onnx=load_onnx)


def test_typos_are_refused_before_the_torch_model_loads():
    """Issues 22, 47: a --dim name the ONNX inputs lack is refused from the ONNX signature
    alone (its graph read without weights, parity.run.early_check), before the ONNX file is
    loaded and checked and before torch loads the model; an unknown demo: name before
    anything loads."""
    from parity.errors import UsageError
    from parity.load.demos import demo_onnx_path
    from parity.pipeline import RunConfig, run_validation

    calls: list[str] = []
    config = RunConfig(model="demo:cnn", onnx=None, dims={"batchh": 3})
    with pytest.raises(UsageError, match="--dim batchh: the ONNX inputs have no symbolic dim"):
        run_validation(config, loaders=_counting_loaders(calls))
    assert calls == []
    calls.clear()
    config = RunConfig(model="demo:cn", onnx=str(demo_onnx_path("cnn")))
    with pytest.raises(UsageError, match="unknown demo 'cn'; known demos: cnn"):
        run_validation(config, loaders=_counting_loaders(calls))
    assert calls == []


def test_a_python_file_without_its_callable_is_told_the_factory_form(tmp_path: Path, capsys):
    net = tmp_path / "net.py"
    net.write_text("import torch\n\ndef build():\n    return torch.nn.Linear(4, 2)\n")
    from parity.load.demos import demo_onnx_path

    code = main(["validate", "--model", str(net), "--onnx", str(demo_onnx_path("cnn"))])
    assert code == 2
    err = capsys.readouterr().err
    assert f"give it as {net}:CALLABLE" in err and "state dict" not in err
