"""--data with an hf: folder (issue 59): texts through its own tokenizer, images through its
own image processor, streamed a batch at a time. A tiny random BERT sentence classifier (3
labels named in id2label) saved with a WordLevel tokenizer, and a tiny ViT image
classifier with its ViTImageProcessor, both exported by Optimum; texts as a .jsonl, a
`datasets.save_to_disk` folder and class folders of .txt files; images as an ImageFolder of
PNG tiles cut from scikit-learn's sample photos."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from parity.cli import main
from tests.helpers.hf_models import WORDS
from tests.helpers.hf_tasks import bert_config, make_vit_dir, optimum_export, save_text_model
from tests.helpers.plant_bug import plant

pytest.importorskip("optimum.exporters.onnx")
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # exports transformers models

LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def _texts(n: int) -> list[str]:
    """n sentences of 2 to 14 words from the tokenizer's vocabulary (seeded)."""
    rng = np.random.default_rng(3)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 15)))) for _ in range(n)]


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("bert")
    torch.manual_seed(5)
    config = bert_config(num_labels=3, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    model = transformers.BertForSequenceClassification(config)
    directory = save_text_model(model, root / "model")
    return directory, optimum_export(directory, root / "onnx", "text-classification")


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("vit")
    directory = make_vit_dir(root / "model")
    return directory, optimum_export(directory, root / "onnx", "image-classification")


def _run(model: str, onnx: Path, tmp_path: Path, *extra: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    code = main(
        ["validate", "--model", f"hf:{model}", "--onnx", str(onnx), *extra, "--json", str(report)]
    )
    return code, json.loads(report.read_text())


def _alone(directory: str, text: str) -> np.ndarray:
    """The classifier's logits on one text alone (no padding), computed apart from Parity."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).logits[0].numpy()


def test_texts_of_a_jsonl_go_through_the_folders_tokenizer_a_batch_at_a_time(bert, tmp_path):
    directory, onnx = bert
    texts = _texts(10)
    rows = [{"text": t, "label": k % 3} for k, t in enumerate(texts)]
    rows[4] = {"text": 7, "label": 1}  # not a text: skipped by its row
    path = tmp_path / "texts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    code, report = _run(
        directory, onnx, tmp_path, "--data", str(path), "--labels", "label",
        "--batch-size", "4", "--max-bad", "0.2", "--save-run", str(tmp_path / "run.parity.npz"),
        "--task", "text-classification", "--task", "logits=classification",  # one flag, both
    )  # fmt: skip
    data = report["data"]
    assert code == 0, data
    assert data["samples"] == 9 and data["skipped"] == [
        {"id": "row 4", "reason": "TypeError: not a text (int)"}
    ]
    assert (
        "PreTrainedTokenizerFast (padded to each batch's longest, truncated at 64)"
        in (data["processor"])
    )
    out = data["outputs"][0]
    assert out["name"] == "logits" and out["task"] == "classification"
    assert out["task_inferred"] is False
    assert out["agree"] == 9 and out["accuracy"]["n"] == 9
    # three batches, each padded to its own longest text, never the data set held
    assert len(report["input_sets"]) == 3
    # each kept sample's torch logits, in its padded batch, are the model's on its text alone
    from parity.reports.saved_run import load_run

    kept = load_run(tmp_path / "run.parity.npz").data.outputs[0].worst
    assert len(kept) == 8
    for w in kept:
        assert w.id == f"row {w.sample}"
        np.testing.assert_allclose(w.torch, _alone(directory, texts[w.sample]), atol=1e-5)
        assert int(w.inputs["attention_mask"].sum()) == len(texts[w.sample].split())
        assert w.text == texts[w.sample]  # what the Samples page shows of it
    assert [w["text"] for w in out["worst"]] == [texts[w["sample"]] for w in out["worst"]]


def test_a_planted_bias_on_one_class_changes_answers_of_a_saved_dataset(bert, tmp_path):
    datasets = pytest.importorskip("datasets")
    directory, onnx = bert
    texts = _texts(24)
    folder = tmp_path / "texts"
    datasets.Dataset.from_dict({"sentence": texts, "y": [k % 3 for k in range(24)]}).save_to_disk(
        str(folder)
    )
    import onnx as onnx_lib

    graph = [n for n in onnx_lib.load(str(onnx)).graph.node if n.op_type == "Gemm"]
    buggy = tmp_path / "buggy.onnx"
    plant(onnx, buggy, graph[-1].name, "bias", 3.0)  # class 0's logit +3
    code, report = _run(directory, buggy, tmp_path, "--data", str(folder), "--labels", "y")
    data = report["data"]
    assert data["format"] == "dataset" and "column sentence through" in data["processor"]
    out = data["outputs"][0]
    # which samples change is computed here apart from Parity: torch on each text alone
    torch_cls = np.array([int(np.argmax(_alone(directory, t))) for t in texts])
    session = ort.InferenceSession(str(buggy), providers=["CPUExecutionProvider"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    names = [i.name for i in session.get_inputs()]

    def onnx_class(text: str) -> int:
        feeds = {n: v for n, v in tokenizer(text, return_tensors="np").items() if n in names}
        return int(np.argmax(session.run(None, feeds)[0]))

    onnx_cls = np.array([onnx_class(t) for t in texts])
    expected = np.flatnonzero(torch_cls != onnx_cls)
    assert expected.size >= 1  # the planted bias does change answers here
    assert [f["sample"] for f in out["flips"]] == expected.tolist()
    assert all(f["onnx"] == 0 for f in out["flips"])
    assert code == 1


def test_an_imagefolder_goes_through_the_folders_image_processor(vit, tmp_path):
    from PIL import Image
    from sklearn.datasets import load_sample_images

    directory, onnx = vit
    photos = load_sample_images().images
    for c, photo in enumerate(photos):  # two classes, 5 tiles of 48x64 each
        (tmp_path / "data" / f"class{c}").mkdir(parents=True)
        for k in range(5):
            tile = photo[48 * k : 48 * (k + 1), 64 * k : 64 * (k + 1)]
            Image.fromarray(tile).save(tmp_path / "data" / f"class{c}" / f"{k}.png")
    (tmp_path / "data" / "class1" / "broken.png").write_bytes(b"not a png")
    code, report = _run(
        directory, onnx, tmp_path, "--data", str(tmp_path / "data"), "--batch-size", "4",
        "--max-bad", "0.1",
    )  # fmt: skip
    data = report["data"]
    assert code == 0, data
    assert data["format"] == "imagefolder" and data["labels"] == "the class folders"
    assert data["processor"] == "ViTImageProcessor"
    assert data["samples"] == 10 and data["skipped"][0]["id"] == "class1/broken.png"
    out = data["outputs"][0]
    assert out["task"] == "classification" and out["accuracy"]["n"] == 10
    assert out["agree"] == 10


def test_a_file_of_fixed_sizes_gets_texts_padded_and_truncated_to_its_length(bert, tmp_path):
    directory, _ = bert
    model = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    names = ("input_ids", "attention_mask", "token_type_ids")

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids, attention_mask, token_type_ids).logits

    fixed = tmp_path / "fixed.onnx"
    example = tuple(torch.ones(4, 16, dtype=torch.int64) for _ in names)
    torch.onnx.export(Logits(), example, str(fixed), input_names=list(names),
                      output_names=["logits"], dynamo=False)  # fmt: skip
    texts = [*_texts(5), " ".join(WORDS[:8] * 3)]  # the last one: 24 words, cut at 16
    path = tmp_path / "texts.jsonl"
    path.write_text("\n".join(json.dumps({"text": t}) for t in texts) + "\n")
    code, report = _run(directory, fixed, tmp_path, "--data", str(path),
                        "--save-run", str(tmp_path / "run.parity.npz"))  # fmt: skip
    data = report["data"]
    assert code == 0, data
    assert data["batch_size"] == 4 and data["samples"] == 6
    assert (
        data["processor"]
        == "column text through PreTrainedTokenizerFast (padded to 16, truncated at 16)"
    )
    from parity.reports.saved_run import load_run

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    fresh = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    for w in load_run(tmp_path / "run.parity.npz").data.outputs[0].worst:
        assert w.inputs["input_ids"].shape == (16,)
        cut = tokenizer(texts[w.sample], truncation=True, max_length=16, return_tensors="pt")
        with torch.no_grad():
            np.testing.assert_allclose(w.torch, fresh(**cut).logits[0].numpy(), atol=1e-5)


@pytest.mark.parametrize("kind", ["save_to_disk", "parquet"])
def test_an_image_column_goes_through_the_image_processor(vit, tmp_path, kind):
    datasets = pytest.importorskip("datasets")
    from sklearn.datasets import load_sample_images

    directory, onnx = vit
    photo = load_sample_images().images[0]
    tiles = [photo[40 * k : 40 * (k + 1), 50 * k : 50 * (k + 1)] for k in range(6)]
    table = datasets.Dataset.from_dict({"img": tiles, "y": [k % 3 for k in range(6)]})
    table = table.cast_column("img", datasets.Image())
    path = tmp_path / f"images.{kind}"
    if kind == "parquet":  # the Image feature stored as {bytes, path}
        table.to_parquet(str(path))
    else:  # datasets decodes it to PIL images
        table.save_to_disk(str(path))
    code, report = _run(directory, onnx, tmp_path, "--data", str(path), "--labels", "y")
    data = report["data"]
    assert code == 0, data
    assert data["samples"] == 6 and data["processor"] == "column img through ViTImageProcessor"
    processor = transformers.AutoImageProcessor.from_pretrained(directory)
    model = transformers.AutoModelForImageClassification.from_pretrained(directory).eval()
    with torch.no_grad():
        pixels = processor(images=tiles, return_tensors="pt")["pixel_values"]
        right = model(pixel_values=pixels).logits.argmax(1).numpy() == np.arange(6) % 3
    assert data["outputs"][0]["accuracy"]["torch"] == pytest.approx(float(right.mean()))


def test_class_folders_of_txt_files_are_texts_with_their_folders_as_labels(bert, tmp_path):
    directory, onnx = bert
    texts = _texts(6)
    for k, text in enumerate(texts):
        folder = tmp_path / "data" / LABELS[k % 3]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{k}.txt").write_text(text + "\n")
    code, report = _run(directory, onnx, tmp_path, "--data", str(tmp_path / "data"))
    data = report["data"]
    assert code == 0, data
    assert data["format"] == "imagefolder" and data["labels"] == "the class folders"
    assert data["processor"].startswith("PreTrainedTokenizerFast")
    out = data["outputs"][0]
    # the folders sorted give the labels: negative 0, neutral 1, positive 2, as id2label has
    expected = np.array(
        [int(np.argmax(_alone(directory, t))) == k % 3 for k, t in enumerate(texts)]
    )
    assert out["accuracy"]["torch"] == pytest.approx(float(expected.mean()))
    assert {w["text"] for w in out["worst"]} <= set(texts)  # read from its .txt file


def test_a_model_that_generates_or_no_onnx_file_is_refused_in_one_line(bert, tmp_path, capsys):
    directory, _ = bert
    path = tmp_path / "texts.jsonl"
    path.write_text(json.dumps({"text": "the sun"}) + "\n")
    assert main(["validate", "--model", f"hf:{directory}", "--data", str(path)]) == 2
    assert "needs its ONNX file (--onnx)" in capsys.readouterr().err
    from tests.helpers.hf_models import make_llama_dir

    llama = make_llama_dir(tmp_path / "llama")  # a causal LM: its inputs are generate()'s steps
    assert main(["validate", "--model", f"hf:{llama}", "--onnx", str(bert[1]), "--data",
                 str(path)]) == 2  # fmt: skip
    assert "--data needs a one-forward hf: model" in capsys.readouterr().err
    args = ["validate", "--model", f"hf:{directory}", "--onnx", "x.onnx", "--data", str(path)]
    assert main([*args, "--prompt", "the sun"]) == 2
    assert "--prompt does not apply with --data: its samples are the inputs" in (
        capsys.readouterr().err
    )
