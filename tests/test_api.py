"""The public Python API (parity.validate, parity.assert_export_close, parity.ValidationRun) on real
dynamo exports held in memory: ONNXProgram, ModelProto, bytes, nn.Module, ExportedProgram."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import parity
from parity import (
    InputError,
    Tolerances,
    UsageError,
    ValidationRun,
    assert_export_close,
    validate,
)

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"  # screenshots kept for a person to look at


class Head(torch.nn.Module):
    """x [batch, 4] -> {"hidden": [batch, 6], "logits": [batch, 3]}"""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(4, 6)
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        hidden = self.body(x)
        return {"hidden": hidden, "logits": self.head(torch.tanh(hidden))}


@pytest.fixture(scope="module")
def exported():
    model = Head().eval()
    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model,
            (x,),
            dynamo=True,
            input_names=["x"],
            output_names=["hidden", "logits"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
            verbose=False,
        )
    return model, x, program


def nudged(program, name_part: str, delta: float) -> onnx.ModelProto:
    """A copy of the export with one initializer nudged: a real, small export bug."""
    proto = onnx.ModelProto()
    proto.CopyFrom(program.model_proto)
    hits = [i for i in proto.graph.initializer if name_part in i.name]
    assert hits, [i.name for i in proto.graph.initializer]
    array = numpy_helper.to_array(hits[0]).copy() + delta
    hits[0].CopyFrom(numpy_helper.from_array(array, hits[0].name))
    return proto


def test_module_and_onnx_program_pass_and_leave_no_temp_files(
    exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, x, program = exported
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    run = validate(model, program, inputs={"x": x})
    assert isinstance(run, ValidationRun)
    assert run.passed and run.failing == ()
    assert [c.name for c in run.outputs] == ["hidden", "logits"]
    assert run.onnx == "<ONNXProgram in memory>"
    assert list(temp.iterdir()) == []  # the ONNXProgram was saved there, then removed


def test_nudged_model_proto_fails_and_names_the_output(exported) -> None:
    model, x, program = exported
    run = validate(model, nudged(program, "head.bias", 1e-2), inputs={"x": x})
    assert not run.passed
    assert run.failing == ("logits",)
    logits = run.comparison(0, "logits")
    assert logits.stats.max_abs == pytest.approx(1e-2, rel=1e-3)
    # the torch side is the same model: the bias is only wrong in the export
    assert run.comparison(0, "hidden").status.passed


def test_bytes_several_input_sets_and_generated_inputs(exported) -> None:
    model, x, program = exported
    data = nudged(program, "body.bias", 1e-3).SerializeToString()
    sets = [{"x": x}, {"x": np.ones((5, 4), np.float32)}]
    run = validate(model, data, inputs=sets)
    assert [s.index for s in run.input_sets] == [0, 1]
    assert run.input_sets[1].feeds["x"].shape == (5, 4)
    assert set(run.failing) == {"hidden", "logits"}
    generated = validate(model, program, input_sets=3, dims={"batch": 3}, seed=1)
    assert generated.passed
    assert [s.feeds["x"].shape[0] for s in generated.input_sets] == [3, 4, 5]


def test_exported_program_as_the_model(exported) -> None:
    model, x, program = exported
    ep = torch.export.export(model, (x,))
    assert validate(ep, program, inputs={"x": x}).passed
    assert validate(ep, nudged(program, "head.weight", 0.05), inputs={"x": x}).failing == (
        "logits",
    )


def test_layers_name_the_module_where_the_nudge_was_planted() -> None:
    model, x = Head().eval(), torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    clean = validate(model, program, inputs={"x": x}, layers=True)
    assert clean.layers is not None and clean.layers.matched > 0
    assert clean.layers.first_divergence is None
    broken = nudged(program, "body.bias", 1e-2)
    run = validate(model, broken, inputs={"x": x}, layers=True)
    assert run.layers is not None and run.layers.first_divergence is not None
    assert run.layers.first_divergence.torch_module == "body"
    assert not run.passed  # localising never changes the verdict
    assert run.failing == validate(model, broken, inputs={"x": x}).failing


def test_assert_export_close_speaks_numpy_testing(exported) -> None:
    model, x, program = exported
    assert assert_export_close(model, program, inputs={"x": x}).passed
    with pytest.raises(AssertionError) as info:
        assert_export_close(model, nudged(program, "head.bias", 1e-2), inputs={"x": x})
    text = str(info.value)
    assert "logits" in text and "hidden" not in text.splitlines()[0].split("(")[-1]
    assert re.search(r"Mismatched elements: \d+ / 6 \(\d+(\.\d+)?%\)", text)
    assert "Max absolute difference: 0.01" in text
    assert "Worst element at index" in text
    assert re.search(r"\n\s+Where: \S", text), text  # issue 22: the CLI's line, here too


def test_rejudge_and_tolerances(exported) -> None:
    model, x, program = exported
    run = validate(model, nudged(program, "head.bias", 1e-2), inputs={"x": x})
    assert run.rejudge(atol=0.02).passed
    assert not run.rejudge(atol=1e-3).passed
    assert run.rejudge({"logits": 0.02}).passed
    assert isinstance(run.rejudge(atol=0.02), ValidationRun)
    per_output = validate(
        model, nudged(program, "head.bias", 1e-2), inputs={"x": x}, tolerances={"logits": 0.02}
    )
    assert per_output.passed
    assert per_output.tolerances.for_output("logits").atol == 0.02
    with pytest.raises(UsageError):
        validate(model, program, inputs={"x": x}, atol=1e-3, tolerances=Tolerances())


def test_one_run_class_for_the_api_the_cli_and_saved_runs(exported, tmp_path: Path) -> None:
    """`parity.ValidationRun` is `parity.results.ValidationRun`: the CLI's run (and a reopened
    saved run) is an instance, with the API's questions and the same `rejudge`."""
    import parity.results
    from parity.cli import build_parser
    from parity.cli.run import _validate
    from parity.reports.saved_run import load_run

    model, x, program = exported
    assert ValidationRun is parity.results.ValidationRun
    pt2, onnx_path = tmp_path / "head.pt2", tmp_path / "head.onnx"
    torch.export.save(torch.export.export(model, (x,)), str(pt2))
    onnx.save(nudged(program, "head.bias", 1e-2), str(onnx_path))
    args = build_parser().parse_args(
        ["validate", "--model", str(pt2), "--onnx", str(onnx_path), "--dim", "batch=2"]
    )
    cli_run = _validate(args)
    api_run = validate(model, nudged(program, "head.bias", 1e-2), inputs={"x": x})
    assert type(cli_run) is type(api_run) and isinstance(cli_run, ValidationRun)
    assert cli_run.failing == api_run.failing == ("logits",) and not cli_run.passed
    for run in (cli_run, api_run):  # one rejudge: keyword atol, a mapping, a Tolerances
        assert run.rejudge(atol=0.02).passed and not run.rejudge(atol=1e-3).passed
        assert run.rejudge({"logits": 0.02}).passed
        assert run.rejudge(Tolerances(default=run.tolerances.default)).failing == ("logits",)
        assert isinstance(run.rejudge(atol=0.02), ValidationRun)
    assert cli_run.to_json()["verdict"] == "fail"
    reopened = load_run(cli_run.save(tmp_path / "cli.parity.npz"))
    assert isinstance(reopened, ValidationRun) and reopened.rejudge(atol=0.02).passed


def test_errors_are_parity_errors_with_one_line(exported) -> None:
    model, x, program = exported
    with pytest.raises(InputError, match=r"inputs\[0\]: unknown input 'y'"):
        validate(model, program, inputs={"y": x})
    with pytest.raises(UsageError, match="onnx must be a path"):
        validate(model, 42)
    with pytest.raises(UsageError, match="model must be an nn.Module"):
        validate(object(), program)
    with pytest.raises(parity.ParityError):
        validate(model, b"not an onnx file", inputs={"x": x})


def test_json_saved_run_and_html(exported, tmp_path: Path) -> None:
    from parity.reports.saved_run import load_run

    model, x, program = exported
    run = validate(model, nudged(program, "head.bias", 1e-2), inputs={"x": x})
    data = run.to_json()
    assert data["schema"] == "parity.report/1" and data["verdict"] == "fail"
    saved = run.save(tmp_path / "run.parity.npz")
    reopened = load_run(saved)
    assert isinstance(reopened, ValidationRun) and reopened.failing == ("logits",)
    html_path = run.write_html(tmp_path / "report.html")
    assert "logits" in html_path.read_text(encoding="utf-8")


def test_notebook_view_renders_offline_in_chromium(chromium, exported, tmp_path: Path) -> None:
    """The notebook repr, opened in a real browser with the network cut: verdict and a plotly
    figure render inside the frame."""
    model, x, program = exported
    run = validate(model, nudged(program, "head.bias", 1e-2), inputs={"x": x})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page_html = "<html><body>" + run._repr_html_() + "</body></html>"
    requests: list[str] = []
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.set_content(page_html)
        frame = page.frames[1]
        frame.wait_for_selector(".js-plotly-plot", timeout=60_000)
        text = frame.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "notebook_repr.png"), full_page=True)
    finally:
        context.close()
    assert "logits" in text and "fail" in text.lower()
    assert [u for u in requests if u.startswith("http")] == []


def test_docstring_examples_run() -> None:
    import doctest

    import parity.api

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation warning
        result = doctest.testmod(parity.api, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 12 and result.failed == 0, result


def test_public_surface_is_exactly_the_api() -> None:
    assert set(parity.__all__) == {
        "validate",
        "assert_export_close",
        "ValidationRun",
        "Tolerance",
        "Tolerances",
        "ParityError",
        "UsageError",
        "ModelLoadError",
        "OnnxLoadError",
        "InputError",
        "ModelRunError",
        "OnnxRunError",
        "ExportError",
        "SavedRunError",
        "SignatureMismatch",
        "WriteError",
        "OutputsUnwritten",
        "BudgetError",
        "RunTimeout",
        "StorageError",
        "FieldError",
        "ExpressionError",
        "Interrupted",
        "__version__",
    }
    # importing the API imports neither torch, onnxruntime nor streamlit
    code = (
        "import sys, parity; "
        "print(sorted(m for m in ('torch', 'onnxruntime', 'streamlit') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr


def python_blocks(page: str, section: str | None = None) -> list[str]:
    """The ```python blocks of a page (README.md, docs/api.md), of one `## section` if given."""
    text = (ROOT / page).read_text()
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_api_page_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = python_blocks("docs/api.md")
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    notebook: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(blocks[0], "docs/api.md:notebook", "exec"), notebook)
        assert notebook["run"].passed
        assert (tmp_path / "parity.html").exists()
        suite: dict = {}
        exec(compile(blocks[1], "docs/api.md:pytest", "exec"), suite)
        suite["test_export_matches"]()
        capsys.readouterr()
        exec(compile(blocks[2], "docs/api.md:candidates", "exec"), notebook)  # the same run
    assert capsys.readouterr().out.strip().endswith("CPU, all) pass ()")


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's five lines of Python run as shown and pass."""
    (block,) = python_blocks("README.md", "From Python")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block, "README:From Python", "exec"), namespace)
    assert namespace["run"].passed
    assert namespace["run"].failing == ()


def test_a_failing_pytest_shows_the_message_not_parity_internals(tmp_path: Path) -> None:
    """In a user's own pytest run, the failure reads like np.testing: their line and our
    message; the API's frame (with its locals: tensors, the whole run) is hidden."""
    (tmp_path / "test_user.py").write_text(
        "import io, torch\n"
        "from parity import assert_export_close\n"
        "def test_export():\n"
        "    model = torch.nn.Linear(4, 2).eval()\n"
        "    x = torch.randn(3, 4)\n"
        "    buffer = io.BytesIO()\n"
        "    torch.onnx.export(model, (x,), buffer, dynamo=False, input_names=['x'])\n"
        "    with torch.no_grad():\n"
        "        model.weight[0, 0] += 1.0\n"
        "    assert_export_close(model, buffer.getvalue(), inputs={'x': x})\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_environment(),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "E       AssertionError: ONNX export does not match the model" in done.stdout
    assert "Mismatched elements: 3 / 6" in done.stdout
    assert "assert_export_close(model, buffer.getvalue()" in done.stdout  # the user's line
    assert "options = {" not in done.stdout and "core/api.py" not in done.stdout


def test_a_runs_methods_are_declared_on_its_class() -> None:
    """to_json, save, write_html and the notebook view are ValidationRun's own methods, typed
    in parity.results.run (what a type checker and help() read), not attached from elsewhere."""
    import typing

    from parity.results import run as results

    for name in ("to_json", "save", "write_html", "_repr_html_"):
        method = ValidationRun.__dict__[name]
        assert method.__module__ == "parity.results.run", name
        assert typing.get_type_hints(method)["return"] in (dict[str, typing.Any], Path, str)
    assert results._RUN_FILES, "parity.api wires parity.reports in when parity is imported"


def _clean_environment() -> dict[str, str]:
    """The nested pytest is a user's own: none of this session's pytest or Python settings
    (a CI's PYTEST_ADDOPTS, xdist's worker variables) leak into it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "PYTHON", "COV_", "XDIST_"))
    }
    env["PYTHONPATH"] = str(ROOT)
    return env
