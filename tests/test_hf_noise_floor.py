"""--noise-floor on hf: models (issue 20): every captured call made again by a float64 copy of
the transformers model (random weights, from a small config), on the inputs and KV cache it
was captured with. Real exports: a ViT classifier (one forward, float pixels) clean and with
one initializer nudged, and a Llama's generate() steps (left-padded batch: the padding that
is never attended stays out of the noise as it stays out of the verdict)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from parity.cli import main
from parity.judge.suggest import suggest_noise_tolerances
from parity.pipeline import RunConfig, run_validation
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS
from tests.helpers.hf_tasks import make_vit_dir

pytestmark = pytest.mark.slow  # exports transformers models


@pytest.fixture(scope="module")
def vit(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    """The ViT directory, Parity's own export of it, and that export with one bias nudged."""
    root = tmp_path_factory.mktemp("vit_noise")
    directory = make_vit_dir(root / "model")
    export = root / "model.onnx"
    run = run_validation(
        RunConfig(model=f"hf:{directory}", onnx=None, hf=HfOptions(export_path=str(export)))
    )
    assert run.passed
    proto = onnx.load(str(export))
    bias = next(i for i in proto.graph.initializer if i.name.endswith("dense.bias"))
    nudged = numpy_helper.to_array(bias).copy()
    nudged[0] += 0.05
    bias.CopyFrom(numpy_helper.from_array(nudged, bias.name))
    planted = root / "planted.onnx"
    onnx.save(proto, str(planted))
    return directory, export, planted


def test_an_hf_one_forward_model_gets_its_noise_floor_and_a_bug_does_not_hide(vit) -> None:
    directory, export, planted = vit
    clean = run_validation(RunConfig(model=f"hf:{directory}", onnx=str(export), noise_floor=True))
    (c,) = clean.comparisons
    assert c.noise is not None and c.noise.torch_error > 0, c.notes
    assert 0.05 < c.noise.ratio < 10, c.noise
    assert suggest_noise_tolerances(clean).passed

    buggy = run_validation(RunConfig(model=f"hf:{directory}", onnx=str(planted), noise_floor=True))
    (c,) = buggy.comparisons
    assert c.noise.ratio > 1000, c.noise
    s = suggest_noise_tolerances(buggy)
    assert not s.passed and s.still_failing == ("logits",)


def test_the_cli_prints_an_hf_runs_noise_and_suggestion(vit, capsys) -> None:
    directory, export, _ = vit
    args = ["validate", "--model", f"hf:{directory}", "--onnx", str(export), "--noise-floor"]
    code = main([*args, "--suggest"])
    assert code == 0
    text = capsys.readouterr().out
    assert "logits: within float32 rounding: ONNX's error against float64 is" in text
    # a suggestion is shown only once checked on fresh inputs, which an hf: run cannot draw
    assert "logits: none suggested: not checked on fresh inputs: an hf: run's inputs" in text
    assert "As flags" not in text


def test_a_half_precision_model_gets_a_note_not_a_failed_run(vit) -> None:
    import transformers

    from parity.hf.noise_floor_calls import float64_calls

    model = transformers.ViTForImageClassification.from_pretrained(vit[0]).half()
    calls, note = float64_calls(model, ())
    assert calls is None and note == "noise floor not measured: the model is not float32"


def test_generate_steps_get_noise_with_the_padding_left_out(llama_dir: str, tmp_path) -> None:
    options = HfOptions(prompts=PROMPTS, max_new_tokens=2, export_path=str(tmp_path / "m.onnx"))
    run = run_validation(
        RunConfig(model=f"hf:{llama_dir}", onnx=None, hf=options, noise_floor=True)
    )
    assert run.passed and len(run.input_sets) == 2  # prefill and one decode step
    assert {c.name for c in run.comparisons} >= {"logits", "present.1.key"}
    padded = [c for c in run.comparisons if c.n_excluded]
    assert padded and any(c.excluded_max_abs > 1e-3 for c in padded)  # padding differs ...
    for c in run.comparisons:
        assert c.noise is not None, (c.name, c.notes)
        assert c.noise.ratio is not None and c.noise.ratio < 10, (c.input_set, c.name, c.noise)
    # ... and is never attended: the noise, like the verdict, leaves it out
    assert suggest_noise_tolerances(run).passed
    assert dataclasses.asdict(run.comparisons[0].noise).keys() >= {
        "torch_error",
        "onnx_error",
        "ratio",
        "precision",
    }
    assert run.comparisons[0].noise.precision == "float32"
    assert np.isfinite(run.comparisons[0].noise.onnx_error)
