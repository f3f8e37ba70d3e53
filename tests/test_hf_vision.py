"""Image and audio models from their directories (issue 11): a ViT classifier, a YOLOS
detector and a Wav2Vec2 audio classifier, tiny and random, exported by Optimum; inputs
generated through the directory's image processor / feature extractor (seeded) or given with
--inputs; one forward, no tokenizer anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from parity.cli import main
from parity.hf.media import generated_inputs
from parity.hf.summary import judged_summary
from parity.pipeline import RunConfig, run_validation
from tests.helpers.hf_tasks import make_vit_dir, make_yolos_dir, optimum_export

pytest.importorskip("optimum.exporters.onnx")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow  # exports transformers models

MODELS = {
    "vit": (make_vit_dir, "image-classification", ["logits"], (2, 3, 32, 32)),
    "yolos": (make_yolos_dir, "object-detection", ["logits", "pred_boxes"], (2, 3, 32, 48)),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[str, Path]]:
    made = {}
    for name, (make, task, _, _) in MODELS.items():
        root = tmp_path_factory.mktemp(name)
        directory = make(root / "model")
        made[name] = (directory, optimum_export(directory, root / "onnx", task))
    return made


@pytest.mark.parametrize("name", list(MODELS))
def test_an_image_directory_validates_on_generated_pixels(exported, name) -> None:
    directory, onnx = exported[name]
    run = run_validation(RunConfig(model=f"hf:{directory}", onnx=str(onnx)))
    assert run.verdict == "pass", [(c.name, c.status, c.message) for c in run.comparisons]
    _, task, outputs, shape = MODELS[name]
    assert list(run.output_names) == outputs
    assert run.input_sets[0].feeds["pixel_values"].shape == shape  # the processor's size
    summary = judged_summary(run)
    assert summary["task"] == task and summary["n_calls"] == 1
    assert "ImageProcessor" in summary["inputs"] and "seeded" in summary["inputs"]
    assert summary["prompts"] == []


@pytest.mark.parametrize("name", list(MODELS))
def test_an_image_directory_validates_on_given_inputs(exported, name, tmp_path, capsys) -> None:
    directory, onnx = exported[name]
    shape = MODELS[name][3]
    rng = np.random.default_rng(7)
    files = []
    for i, batch in enumerate((1, 3)):  # each file one forward, at its own batch
        path = tmp_path / f"pixels{i}.npz"
        np.savez(path, pixel_values=rng.standard_normal((batch, *shape[1:]), dtype=np.float32))
        files += ["--inputs", str(path)]
    report = tmp_path / "r.json"
    args = ["validate", "--model", f"hf:{directory}", "--onnx", str(onnx), "--json", str(report)]
    assert main([*args, *files]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "inputs:    given: pixels0.npz, pixels1.npz" in out
    if name == "yolos":  # the step table's other columns show the worst other output
        assert "worst other" in out and "pred_boxes" in out
    data = json.loads(report.read_text())
    batches = [s["inputs"]["pixel_values"]["shape"][0] for s in data["input_sets"]]
    assert batches == [1, 3]
    assert data["summary"]["n_calls"] == 2


def test_given_inputs_the_model_does_not_take_are_one_line(exported, tmp_path, capsys) -> None:
    directory, onnx = exported["vit"]
    path = tmp_path / "ids.npz"
    np.savez(path, input_ids=np.zeros((1, 4), dtype=np.int64))
    args = ["validate", "--model", f"hf:{directory}", "--onnx", str(onnx), "--inputs", str(path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "not arguments of ViTForImageClassification.forward" in err
    assert len(err.splitlines()) == 1


def test_generated_pixels_are_seeded(exported) -> None:
    directory, _ = exported["vit"]
    model = transformers.AutoModelForImageClassification.from_pretrained(directory)
    processor = transformers.AutoImageProcessor.from_pretrained(directory)
    a, b, c = (generated_inputs(model, processor, seed=s).feeds["pixel_values"] for s in (0, 0, 1))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_own_export_of_an_image_model(exported, tmp_path) -> None:
    """Without --onnx, Parity exports the forward it captured (pixel_values in)."""
    from parity.run.hf_options import HfOptions

    directory, _ = exported["vit"]
    export = tmp_path / "vit.onnx"
    run = run_validation(
        RunConfig(model=f"hf:{directory}", onnx=None, hf=HfOptions(export_path=str(export)))
    )
    assert run.verdict == "pass" and export.is_file()
    assert list(run.input_sets[0].feeds) == ["pixel_values"]


def test_an_audio_classifier_validates_on_generated_waveforms(tmp_path) -> None:
    """Audio: seeded waveforms through the directory's feature extractor (input_values)."""
    from tests.helpers.hf_tasks import make_wav2vec2_dir

    directory = make_wav2vec2_dir(tmp_path / "w2v")
    onnx = optimum_export(directory, tmp_path / "onnx", "audio-classification")
    run = run_validation(RunConfig(model=f"hf:{directory}", onnx=str(onnx)))
    assert run.verdict == "pass", [(c.name, c.status, c.message) for c in run.comparisons]
    assert run.input_sets[0].feeds["input_values"].shape == (2, 16000)
    summary = judged_summary(run)
    assert summary["task"] == "audio-classification"
    assert "Wav2Vec2FeatureExtractor" in summary["inputs"]
