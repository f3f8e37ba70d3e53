"""--noise-floor (issue 20): the torch model once more in float64; each float32 output says
whether ONNX's error is float32 rounding. Real exports: a clean one gives a ratio near 1, one
nudged bias thousands; a model that cannot run in float64 gets noise null and a note."""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from parity.api import validate
from parity.cli import main
from parity.judge.noise_floor import noise_sentence
from parity.pipeline import RunConfig, run_validation
from parity.reports.html_report import render_html_report
from parity.reports.saved_run import load_run
from parity.results import Noise
from tests.helpers.planted_blocks import PlantedExport, planted_export


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> PlantedExport:
    return planted_export(tmp_path_factory.mktemp("noise"))


def _run(files: PlantedExport, onnx: Path):
    return run_validation(
        RunConfig(model=str(files.pt2), onnx=str(onnx), n_input_sets=2, noise_floor=True)
    )


def test_clean_export_is_rounding_and_a_planted_bug_is_not(blocks) -> None:
    clean = _run(blocks, blocks.clean_onnx)
    for c in clean.comparisons:
        assert c.noise is not None and c.noise.torch_error > 0
        assert 0.1 < c.noise.ratio < 5, c.noise
        assert noise_sentence(c.noise).startswith("within float32 rounding: ONNX's error")
    planted = _run(blocks, blocks.onnx)
    for c in planted.comparisons:
        assert c.noise.ratio > 1000, c.noise
        assert noise_sentence(c.noise).startswith("not rounding: ")
        assert "torch's own float32 error" in noise_sentence(c.noise)
    assert planted.verdict == "fail"  # the tolerance's verdict, unchanged


def test_sentences_read_as_the_issue_words_them() -> None:
    assert noise_sentence(Noise(1e-5, 9e-6, 0.9)) == (
        "within float32 rounding: ONNX's error against float64 is 0.9× torch's own"
    )
    assert noise_sentence(Noise(1e-6, 3.6e-3, 3600.0)) == (
        "not rounding: 3,600× torch's own float32 error"
    )


def test_json_terminal_html_and_saved_run(blocks, tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.json"
    saved = tmp_path / "s.parity"
    code = main(["validate", "--model", str(blocks.pt2), "--onnx", str(blocks.onnx),
                 "--noise-floor", "--json", str(out), "--save-run", str(saved)])  # fmt: skip
    assert code == 1
    text = capsys.readouterr().out
    assert "Rounding noise (against torch in float64):" in text
    assert "y: not rounding: " in text
    noise = json.loads(out.read_text())["outputs"][0]["noise"]
    assert set(noise) == {
        "torch_error", "onnx_error", "ratio", "precision", "quantization", "emulated",
        "export_error",
    }  # fmt: skip
    assert noise["ratio"] > 1000 and noise["precision"] == "float32"
    assert noise["quantization"] is None and noise["emulated"] is None
    assert noise["export_error"] is None  # a float32 file has no 16-bit twin
    back = load_run(saved)
    assert back.comparisons[0].noise.ratio == pytest.approx(noise["ratio"])
    assert back.comparisons[0].noise.precision == "float32"
    assert "Rounding noise" in render_html_report(back)
    plain = tmp_path / "plain.json"
    main(["validate", "--model", str(blocks.pt2), "--onnx", str(blocks.onnx), "--json", str(plain),
          "--no-noise-floor"])  # fmt: skip
    assert json.loads(plain.read_text())["outputs"][0]["noise"] is None


FIXED = textwrap.dedent(
    """
    import torch


    class Fixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 3))

        def forward(self, x):
            return (x @ self.w).to(torch.float32)  # float32 whatever it is cast to


    def make():
        torch.manual_seed(0)
        return Fixed().eval()
    """
)


def test_a_model_that_casts_to_float32_gets_its_floor_by_promotion(tmp_path: Path) -> None:
    src = tmp_path / "fixed.py"
    src.write_text(FIXED)
    import importlib.util

    spec = importlib.util.spec_from_file_location("fixed_model", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.make()
    onnx_path = tmp_path / "fixed.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 4),), str(onnx_path), dynamo=False,
                          input_names=["x"], output_names=["y"])  # fmt: skip
    run = validate(model, onnx_path, noise_floor=True)
    assert run.passed
    (c,) = run.outputs
    # issue 53: `.double()` alone still computes in float32; every op promoted to float64
    # measures the floor, and says so (a model that refuses float64: tests/test_analyses.py)
    assert c.noise is not None and "promoted to float64" in c.noise.emulated, c.notes
    assert "still computes in float32" in c.noise.emulated
    assert json.loads(json.dumps(run.to_json()))["outputs"][0]["noise"] is not None


def test_api_noise_on_an_nn_module(blocks) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    model.eval()
    x = torch.randn(3, 8)
    import io

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buffer, dynamo=False, input_names=["x"])
    run = validate(model, buffer.getvalue(), inputs={"x": x}, noise_floor=True)
    (c,) = run.outputs
    assert c.noise is not None and c.noise.ratio is not None and c.noise.ratio < 10


def test_noise_floor_needs_a_torch_model(blocks, tmp_path: Path, capsys) -> None:
    code = main(["validate", "--onnx", str(blocks.clean_onnx), "--onnx", str(blocks.onnx),
                 "--noise-floor"])  # fmt: skip
    assert code == 2
    assert "--noise-floor needs a torch model" in capsys.readouterr().err


def test_overview_inspect_and_run_pages(blocks) -> None:
    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).resolve().parents[1] / "app.py")
    run = _run(blocks, blocks.onnx)
    texts = {}
    for page in ("pages/overview.py", "pages/inspect_page.py"):
        at = AppTest.from_file(app, default_timeout=180)
        at.session_state["parity_run"] = run
        at.session_state["parity_tolerances"] = run.tolerances
        at.switch_page(page).run()
        assert not at.exception, at.exception
        texts[page] = "\n".join(t.value for t in at.text)
    assert "y: not rounding: " in texts["pages/overview.py"]
    inspect = texts["pages/inspect_page.py"]  # said as the shown set's (issue 53)
    assert "Rounding noise on set 0" in inspect and ": not rounding: " in inspect
    at = AppTest.from_file(app, default_timeout=180)
    at.switch_page("pages/run.py").run()
    (box,) = [c for c in at.checkbox if c.key == "run_noise_floor"]
    assert box.label.startswith("Measure rounding noise")


class TinyBert(torch.nn.Module):
    """transformers' BERT (random weights): it builds its attention mask in its dtype, and
    its trace fixes that to float32 (a cast, a lifted constant, masked_fill's fill value)."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=128)  # fmt: skip
        self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def test_a_pt2_runs_in_float64_where_its_trace_fixed_float32(tmp_path: Path) -> None:
    from parity.load.torch_model import load_torch_model
    from parity.results import InputSet
    from parity.run.noise_floor_runs import float64_model, run_float64
    from parity.signature import OnnxSignature, TensorSpec

    torch.manual_seed(0)
    model = TinyBert().eval()
    ids, mask = torch.randint(0, 1000, (2, 16)), torch.ones(2, 16, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(model, (), {"input_ids": ids, "attention_mask": mask})
        torch.export.save(program, tmp_path / "bert.pt2")
    with torch.no_grad():
        exact = model.double()(ids, mask).numpy()
    loaded = float64_model(load_torch_model(str(tmp_path / "bert.pt2")))
    assert loaded.model is not None, loaded.note
    signature = OnnxSignature(
        inputs=(TensorSpec("input_ids", "int64", (2, 16)),
                TensorSpec("attention_mask", "int64", (2, 16))),
        outputs=(TensorSpec("last_hidden_state", "float32", (2, 16, 64)),),
        opset=18, producer="test", ir_version=8,
    )  # fmt: skip
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    arrays, note = run_float64(loaded.model, InputSet(0, feeds), signature)
    assert arrays is not None, note
    (y,) = arrays.values()
    assert y.dtype == "float64"
    assert abs(y - exact).max() < 1e-10  # float64 all the way, the mask included
