"""Answers on the user's data (--data): a small CNN trained on scikit-learn's digits, its
float32 export, ORT's int8 QDQ file and a planted bias bug, judged on the held-out digits as
an .npz, an ImageFolder of PNGs through a --preprocess file, and parquet / jsonl tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import parity
from parity.cli import main
from parity.data.answers import OutputAnswers
from parity.data.batches import Batch
from parity.data.options import DataOptions
from parity.data.stats import mcnemar_exact, paired_accuracy
from tests.helpers.digits import Digits, build
from tests.helpers.plant_bug import plant


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Digits:
    return build(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="module")
def torch_logits(digits: Digits) -> np.ndarray:
    """The trained model's logits on the held-out digits, computed here, apart from Parity."""
    scope: dict = {}
    exec(compile((digits.folder / "digits_model.py").read_text(), "m", "exec"), scope)
    net = scope["make"]()
    net.load_state_dict(torch.load(digits.weights))
    net.eval()
    with torch.no_grad():
        return net(torch.from_numpy(digits.x_test)).numpy()


@pytest.fixture(scope="module")
def clean_atol(torch_logits: np.ndarray) -> str:
    """The float32 file's tolerance, from its logits' scale. A trained classifier's logits
    reach ~17, where one float32 ulp is 1.9e-6: torch and ONNX Runtime each round a few ulps
    from float64, and between them 0 (AVX-512 kernels) to 9.5e-6 (SSE4.1's) was measured, at
    the default atol 1e-5's edge. 64 ulps of the largest logit (~1.2e-4) holds on any CPU and
    stays far under int8's cost (> 0.05) and the planted bugs'."""
    return f"{64 * float(np.spacing(np.abs(torch_logits).max())):.3g}"


def _onnx_logits(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _validate(digits: Digits, onnx: Path, tmp_path: Path, *extra: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    args = ["validate", "--model", digits.model, "--weights", str(digits.weights)]
    code = main([*args, "--onnx", str(onnx), *extra, "--json", str(report)])
    return code, json.loads(report.read_text())


def test_int8_file_fails_atol_yet_changes_almost_no_answer(digits, torch_logits, tmp_path):
    code, report = _validate(
        digits, digits.int8, tmp_path, "--data", str(digits.test_npz), "--labels",
        str(digits.labels),
    )  # fmt: skip
    assert code == 1  # the element-wise verdict: int8 logits are far beyond atol 1e-5
    assert max(o["max_abs"] for o in report["outputs"]) > 0.05
    data = report["data"]
    assert data["samples"] == 597 and data["skipped"] == []
    (out,) = data["outputs"]
    assert (out["name"], out["task"]) == ("logits", "classification")
    int8 = _onnx_logits(digits.int8, digits.x_test)
    changed = np.flatnonzero(torch_logits.argmax(1) != int8.argmax(1))
    assert out["agree"] == 597 - len(changed) and len(changed) <= 3
    assert [f["sample"] for f in out["flips"]] == changed.tolist()
    accuracy = out["accuracy"]
    assert accuracy["torch"] == pytest.approx((torch_logits.argmax(1) == digits.y_test).mean())
    assert accuracy["onnx"] == pytest.approx((int8.argmax(1) == digits.y_test).mean())
    assert accuracy["within_noise"] is True
    assert report["findings"][0]["kind"] == "answers"
    assert report["findings"][0]["text"].startswith("On 597 of your samples")
    assert "--min-agreement logits=0.995" in report["findings"][0]["text"]  # proposed


def test_min_agreement_passes_the_int8_file_on_its_answers(digits, tmp_path):
    code, report = _validate(
        digits, digits.int8, tmp_path, "--data", str(digits.test_npz),
        "--min-agreement", "logits=0.99",
    )  # fmt: skip
    assert code == 0 and report["verdict"] == "pass"
    (out,) = report["data"]["outputs"]
    assert out["min_agreement"] == 0.99 and out["passed"] is True
    assert any(o["status"] == "fail" for o in report["outputs"])  # still said, row by row
    assert "to judge it on them" not in report["findings"][0]["text"]  # given: not proposed


def test_planted_bias_changes_many_answers_all_to_one_class(
    digits, torch_logits, clean_atol, tmp_path, capsys
):
    bug = tmp_path / "bug.onnx"
    plant(digits.onnx, bug, "/fc/Gemm", "bias", 6.0)  # class 0's bias, +6
    code, report = _validate(
        digits, bug, tmp_path, "--data", str(digits.test_npz), "--labels", str(digits.labels),
        "--min-agreement", "logits=0.99", "--save-run", str(tmp_path / "run.parity.npz"),
    )  # fmt: skip
    assert code == 1
    (out,) = report["data"]["outputs"]
    onnx = _onnx_logits(bug, digits.x_test)
    changed = np.flatnonzero(torch_logits.argmax(1) != onnx.argmax(1))
    assert len(changed) >= 10 and out["n_flips"] == len(changed)
    assert {f["onnx"] for f in out["flips"]} == {0}
    assert [f["torch"] for f in out["flips"]] == torch_logits.argmax(1)[changed].tolist()
    top2 = np.sort(torch_logits[changed], axis=1)[:, -2:]
    margins = [f["torch_margin"] for f in out["flips"]]
    # Parity's torch ran in batches of 64, torch_logits in one of 597: with AVX2 kernels the
    # two differ by 2.7e-6 (bit-equal with AVX-512's), so a margin is equal to the logits' noise
    expected = (top2[:, 1] - top2[:, 0]).tolist()
    assert margins == pytest.approx(expected, rel=0, abs=2 * float(clean_atol))
    assert out["passed"] is False
    assert "all to class 0" in report["findings"][0]["text"]
    # a shift toward one class: the typical error is the bug's, so no change is a near tie
    assert not any(f["near_tie"] for f in out["flips"])
    said = capsys.readouterr().out  # the terminal: each output's worst batch, the changes by id
    assert "10 batches of your samples (samples 0-63 ... samples 576-596)" in said
    assert f"Changed samples of logits ({len(changed)} of 597):" in said
    assert f"  sample {changed[0]}: class " in said
    verdict = "FAIL: below its --min-agreement on the samples' answers: logits"
    assert said.strip().splitlines()[-1] == verdict
    html = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "run.parity.npz"), "--html", str(html)]) == 1
    page = html.read_text()
    assert "Answers on your data" in page and "all to class 0" in page
    assert f"<tr><td>{changed[0]}</td>" in page  # the changed samples listed by number
    assert "near tie</td>" not in page  # one story: "likely a bug", never a tie


def test_suggest_proposes_a_min_agreement_checked_on_samples_it_was_not_fitted_to(
    digits, torch_logits, tmp_path, capsys
):
    from parity.data.suggest import wilson_low

    data = ("--data", str(digits.test_npz))
    code, report = _validate(digits, digits.int8, tmp_path, *data, "--labels",
                             str(digits.labels), "--suggest")  # fmt: skip
    assert code == 1  # --suggest proposes; it does not judge
    (out,) = report["data"]["outputs"]
    g = out["suggestion"]
    # the rule, computed here apart from Parity: even positions fit, odd ones check
    same = torch_logits.argmax(1) == _onnx_logits(digits.int8, digits.x_test).argmax(1)
    assert (g["fitted_on"], g["checked_on"]) == (299, 298)
    assert g["min_agreement"] == math.floor(1000 * wilson_low(int(same[0::2].sum()), 299)) / 1000
    assert g["checked_agreement"] == pytest.approx(float(same[1::2].mean()))
    assert 0.95 < g["min_agreement"] < 1.0
    assert f"--min-agreement logits={g['min_agreement']:g} (fitted on" in capsys.readouterr().out
    assert "--min-agreement logits=0.995" not in report["findings"][0]["text"]  # unchecked
    criterion = ("--min-agreement", f"logits={g['min_agreement']}")
    assert _validate(digits, digits.int8, tmp_path, *data, *criterion)[0] == 0
    # the criterion fails a bug whose changed answers go many ways (not one class)
    bug = tmp_path / "bug.onnx"
    plant(digits.onnx, bug, "/conv/Conv", "bias", 1.0)
    bug_classes = _onnx_logits(bug, digits.x_test).argmax(1)
    changed = bug_classes != torch_logits.argmax(1)
    assert len(set(bug_classes[changed])) > 1 and 1 - changed.mean() < g["min_agreement"]
    assert _validate(digits, bug, tmp_path, *data, *criterion)[0] == 1
    # a bug whose changes all go to one class gets none, said why
    shift = tmp_path / "shift.onnx"
    plant(digits.onnx, shift, "/fc/Gemm", "bias", 6.0)
    _, report = _validate(digits, shift, tmp_path, *data, "--suggest")
    g = report["data"]["outputs"][0]["suggestion"]
    assert g["min_agreement"] is None and "all go to one class" in g["reason"]


def test_a_suggested_criterion_that_does_not_hold_out_of_sample_is_withheld():
    from parity.data.result import DataOutput
    from parity.data.suggest import suggest_agreement

    agrees = np.ones(60, dtype=bool)
    agrees[1::6] = False  # every changed answer on a checked (odd) position
    out = DataOutput("y", "classification", True, 60, 50, 50 / 60, (), 10)
    g = suggest_agreement(out, agrees)
    assert g.value is None and g.reason.startswith("not held out of sample")
    assert g.checked_agreement == pytest.approx(20 / 30)
    assert suggest_agreement(out, agrees[:30]).reason.startswith("too few samples")
    assert suggest_agreement(out, ~(agrees & False)).value == pytest.approx(0.886)


def test_imagefolder_of_pngs_through_a_preprocess_file_with_a_bad_sample(
    digits, clean_atol, tmp_path
):
    from PIL import Image

    root = tmp_path / "images"
    x, y = digits.x_test[:60], digits.y_test[:60]
    for k, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = root / f"digit{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.round(image[0] * 240).astype(np.uint8)).save(folder / f"{k:03d}.png")
    (root / "digit3" / "broken.png").write_bytes(b"not a png")
    pre = tmp_path / "prep.py"
    pre.write_text(
        "import numpy as np\nfrom PIL import Image\n\n"
        "def load(path):\n"
        "    image = np.asarray(Image.open(path), dtype=np.float32) / 240\n"
        "    return {'x': image[None]}\n"
    )
    args = ("--data", str(root), "--preprocess", f"{pre}:load", "--batch-size", "16")
    code, report = _validate(
        digits, digits.onnx, tmp_path, *args, "--max-bad", "5%", "--atol", clean_atol
    )
    assert code == 0
    data = report["data"]
    assert (data["format"], data["samples"], data["labels"]) == (
        "imagefolder", 60, "the class folders",
    )  # fmt: skip
    assert [s["id"] for s in data["skipped"]] == ["digit3/broken.png"]
    assert "UnidentifiedImageError" in data["skipped"][0]["reason"]
    (out,) = data["outputs"]
    assert out["agree"] == 60 and out["flips"] == []
    classes = sorted({f"digit{v}" for v in y})  # folders sorted give the labels
    labels = np.array([classes.index(f"digit{v}") for v in y])
    onnx = _onnx_logits(digits.onnx, (np.round(x * 240) / 240).astype(np.float32))
    assert out["accuracy"]["onnx"] == pytest.approx((onnx.argmax(1) == labels).mean())
    # 1 of 61 unreadable is more than the default 1%: the run cannot be made, one line
    assert main(["validate", "--model", digits.model, "--weights", str(digits.weights),
                 "--onnx", str(digits.onnx), *args]) == 2  # fmt: skip


@pytest.mark.parametrize("kind", ["parquet", "jsonl", "arrow", "save_to_disk"])
def test_table_columns_named_as_inputs_with_a_label_column(
    digits, torch_logits, clean_atol, tmp_path, kind, capsys
):
    x, y = digits.x_test[:40], digits.y_test[:40]
    rows = [{"x": image.tolist(), "label": int(v)} for image, v in zip(x, y, strict=True)]
    path = tmp_path / f"digits.{kind}"
    if kind == "save_to_disk":  # a folder `datasets` wrote: state.json, dataset_info.json, .arrow
        datasets = pytest.importorskip("datasets")
        splits = datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
        splits.save_to_disk(str(tmp_path / "splits"))
        code = main(["validate", "--model", digits.model, "--weights", str(digits.weights),
                     "--onnx", str(digits.onnx), "--data", str(tmp_path / "splits")])  # fmt: skip
        assert code == 2  # a DatasetDict: one split's folder is named instead
        assert f"give one split's folder, {tmp_path / 'splits' / 'test'}" in capsys.readouterr().err
        path = tmp_path / "splits" / "test"
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    elif kind == "arrow":  # the stream format, as `datasets` writes its files
        import pyarrow as pa

        table = pa.Table.from_pylist(rows)
        with pa.ipc.new_stream(path, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=16):
                writer.write_batch(batch)
    else:
        lines = [json.dumps(r) for r in rows]
        lines[3] = "{not json"
        lines[5] = json.dumps({"x": [[1.0, 2.0]], "label": 1})  # a wrong shape
        path.write_text("\n".join(lines) + "\n")
    code, report = _validate(
        digits, digits.onnx, tmp_path, "--data", str(path), "--labels", "label",
        "--max-bad", "0.1", "--batch-size", "7", "--atol", clean_atol,
    )  # fmt: skip
    assert code == 0
    data = report["data"]
    skipped = [s["id"] for s in data["skipped"]]
    assert skipped == ([] if kind != "jsonl" else ["row 3", "row 5"])
    assert data["samples"] == 40 - len(skipped) and data["labels"] == "column label"
    assert data["format"] == ("dataset" if kind == "save_to_disk" else "table")
    assert data["outputs"][0]["accuracy"]["n"] == data["samples"]
    if not skipped:  # torch's accuracy on the rows, computed here apart from Parity
        right = np.argmax(torch_logits[:40], axis=1) == y
        assert data["outputs"][0]["accuracy"]["torch"] == pytest.approx(float(right.mean()))
    if skipped:
        assert "not JSON" in data["skipped"][0]["reason"]
        assert "where the model takes [1, 8, 8] per sample" in data["skipped"][1]["reason"]


def test_a_file_with_a_fixed_batch_gets_batches_of_that_size_the_last_one_padded(
    digits, clean_atol, tmp_path
):
    fixed = tmp_path / "fixed.onnx"
    scope: dict = {}
    exec(compile((digits.folder / "digits_model.py").read_text(), "m", "exec"), scope)
    net = scope["make"]()
    net.load_state_dict(torch.load(digits.weights))
    net.eval()
    x = torch.from_numpy(digits.x_test[:4])
    torch.onnx.export(net, (x,), str(fixed), input_names=["x"], dynamo=False)  # batch of 4
    data = tmp_path / "eleven.npy"
    np.save(data, digits.x_test[:11])
    code, report = _validate(
        digits, fixed, tmp_path, "--data", str(data), "--batch-size", "64", "--atol", clean_atol
    )
    assert code == 0
    assert [s["label"] for s in report["input_sets"]] == [
        "samples 0-3", "samples 4-7", "samples 8-10",
    ]  # fmt: skip
    (out,) = report["data"]["outputs"]
    assert out["samples"] == 11 and report["data"]["batch_size"] == 4  # the padding not judged


def test_json_contract_and_a_run_that_keeps_no_batch(digits, tmp_path):
    events: list = []
    run = parity.validate(
        digits.model,
        str(digits.int8),
        progress=events.append,
        weights=str(digits.weights),
        data=DataOptions(str(digits.test_npz), batch_size=50, limit=120),
        labels=str(digits.labels),
    )
    assert len(run.input_sets) == math.ceil(120 / 50)
    said = [e.message for e in events if e.step == "torch"]  # the progress line's words
    assert said[0] == "torch on samples 0-49 of 120"
    assert "samples/s, ETA 0:" in said[1]
    assert all(not s.feeds for s in run.input_sets)  # memory of a batch, never of the data
    assert all(not o.arrays for o in run.onnx_outputs)
    data = run.to_json()["data"]
    assert {"source", "samples", "skipped", "outputs"} <= set(data)
    assert data["samples"] == 120
    (out,) = data["outputs"]
    assert {"name", "task", "agree", "agreement", "flips", "accuracy"} <= set(out)
    assert {"torch", "onnx", "difference", "interval"} <= set(out["accuracy"])
    assert len(out["accuracy"]["interval"]) == 2
    worst = run.data.outputs[0].worst[0]  # kept with its arrays: a reopened run shows it
    assert worst.inputs["x"].shape == (1, 8, 8) and worst.torch.shape == (10,)
    saved = run.save(tmp_path / "run.parity.npz")
    from parity.reports.saved_run import load_run

    again = load_run(saved).data
    assert again is not None and again.outputs[0].worst[0].id == worst.id
    np.testing.assert_array_equal(again.outputs[0].worst[0].onnx, worst.onnx)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--labels", "y.npy"], "--labels applies only with --data"),
        (["--data", "DATA", "--input-sets", "2"], "--input-sets does not apply with --data"),
        (["--data", "DATA", "--layers"], "--layers does not apply with --data: it needs each"),
        (["--data", "DATA", "--noise-floor"], "run it with --inputs on the samples the data"),
        (["--data", "DATA", "--task", "nope=classification"], "--task nope"),
        (["--data", "DATA", "--data-task", "nope=classification"], "--task nope"),  # its alias
        (["--data", "DATA", "--task", "logits=ranking"], "choose from classification"),
        (["--data", "DATA", "--task", "classification"], "name the output, --task NAME="),
        (["--task", "logits=regression"], "--task NAME=TASK applies only with --data"),
        (["--data", "missing.npz"], "no such file"),
        (["--data", "DATA", "--save-reference", "ref.npz"], "--save-reference does not apply"),
        (["--data", "NPY", "--max-memory", "8K"], "give a smaller --batch-size"),
        (["--data", "DATA", "--max-memory", "64K"], "an .npz is read whole"),  # 152 KB
    ],
)
def test_data_usage_errors_exit_2_in_one_line(digits, args, words, capsys):
    npy = digits.folder / "digits_test.npy"  # read a sample at a time: a batch is what counts
    if "NPY" in args and not npy.exists():
        np.save(npy, digits.x_test)
    named = {"DATA": str(digits.test_npz), "NPY": str(npy)}
    args = [named.get(a, a) for a in args]
    code = main(["validate", "--model", digits.model, "--weights", str(digits.weights),
                 "--onnx", str(digits.onnx), *args])  # fmt: skip
    assert code == 2
    assert words in capsys.readouterr().err


def test_mcnemar_exact_and_the_paired_interval():
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_exact(0, 0) == 1.0
    torch_right = np.array([True] * 90 + [False] * 10)
    onnx_right = torch_right.copy()
    onnx_right[:8] = False  # 8 samples torch got right, the file does not
    a = paired_accuracy(torch_right, onnx_right)
    assert a.difference == pytest.approx(-0.08)
    assert a.interval[0] < -0.08 < a.interval[1] < 0 and not a.within_noise


def _batch(start: int, n: int) -> Batch:
    samples = np.arange(start, start + n)
    return Batch(0, {"x": np.zeros((n, 1))}, samples, tuple(map(str, samples)), None, n)


def test_embedding_and_regression_answers_per_sample():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(40, 16))
    moved = ref.copy()
    moved[7] = ref[30]  # sample 7 now looks like sample 30: its neighbour changes
    embed = OutputAnswers("embedding", "embedding", False, None)
    embed.add(_batch(0, 20), ref[:20], moved[:20])
    embed.add(_batch(20, 20), ref[20:], moved[20:])
    out = embed.result()
    assert out.cosine_min is not None and out.cosine_min < 0.5
    assert 7 in {f.sample for f in out.flips} and out.neighbours_on == 40
    regress = OutputAnswers("y", "regression", True, None)
    noisy = ref + 0.001 * np.abs(ref).max()
    regress.add(_batch(0, 40), ref, noisy)
    out = regress.result()
    assert out.relative_error_max == pytest.approx(0.001 * np.abs(ref).max() / ref.std())
    assert out.agree == 40


def test_samples_page_shows_the_changed_samples_and_the_overview_leads_with_the_answer(
    digits, tmp_path
):
    from streamlit.testing.v1 import AppTest

    bug = tmp_path / "bug.onnx"
    plant(digits.onnx, bug, "/fc/Gemm", "bias", 6.0)
    run = parity.validate(
        digits.model, str(bug), weights=str(digits.weights), data=str(digits.test_npz)
    )
    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=180)
    at.session_state["parity_run"] = run
    at.switch_page("pages/samples.py").run()
    assert not at.exception, at.exception
    assert any(t.value.startswith("On 597 of your samples") for t in at.text)
    (table,) = at.dataframe
    assert table.value["sample"].tolist() == [f.sample for f in run.data.outputs[0].flips]
    assert set(table.value["ONNX class"]) == {0}
    assert set(table.value[""]) == {"real change"}  # a shift toward one class: no near tie
    (chart,) = at.get("plotly_chart")
    spec = json.loads(chart.proto.spec)
    assert sum(spec["data"][0]["y"]) == 597
    # every error is about 6 (the bias): the axis still has two labels, inside the bars' range
    edges, _ = run.data.outputs[0].histogram
    lo, hi = float(edges[0]), float(edges[-1])
    ticks = spec["layout"]["xaxis"]["tickvals"]
    labels = spec["layout"]["xaxis"]["ticktext"]
    assert len(ticks) >= 2 and all(lo * 0.999 <= t <= hi * 1.001 for t in ticks), (ticks, lo, hi)
    assert len(set(labels)) == len(labels), labels
    assert len(at.get("image")) == 8  # the worst samples' digits, as thumbnails
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    found = next(m.value for m in at.markdown if "On 597 of your samples" in m.value)
    assert "all to class 0" in found


TWO_OUTPUTS = """
import torch
from torch import nn


class DigitsTwo(nn.Module):  # the trained net's parameters, its features given out too
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        features = nn.functional.max_pool2d(x, 2).flatten(1)
        return self.fc(features), features


def make():
    return DigitsTwo()
"""


def _nearest(v: np.ndarray) -> np.ndarray:
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    similarity = v @ v.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


def test_an_embedding_output_beside_the_logits_keeps_its_nearest_neighbours(digits, tmp_path):
    import onnxruntime.quantization as q

    factory = tmp_path / "two.py"
    factory.write_text(TWO_OUTPUTS)
    scope: dict = {}
    exec(compile(TWO_OUTPUTS, str(factory), "exec"), scope)
    net = scope["make"]()
    net.load_state_dict(torch.load(digits.weights))
    net.eval()
    float_file, int8 = tmp_path / "two.onnx", tmp_path / "two.int8.onnx"
    torch.onnx.export(
        net, (torch.from_numpy(digits.x_test[:2]),), str(float_file), input_names=["x"],
        output_names=["logits", "embedding"], dynamo=False,
        dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}, "embedding": {0: "b"}},
    )  # fmt: skip

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self._left = iter([{"x": digits.x_test[:100]}])

        def get_next(self):  # type: ignore[no-untyped-def]
            return next(self._left, None)

    q.quantize_static(str(float_file), str(int8), Reader(), quant_format=q.QuantFormat.QDQ,
                      per_channel=True)  # fmt: skip
    report = tmp_path / "two.json"
    args = ["--model", f"{factory}:make", "--weights", str(digits.weights), "--onnx", str(int8)]
    code = main(["validate", *args, "--data", str(digits.test_npz), "--json", str(report)])
    assert code == 1
    data = json.loads(report.read_text())["data"]
    logits, embedding = data["outputs"]
    assert (logits["task"], embedding["task"]) == ("classification", "embedding")
    with torch.no_grad():
        ref = net(torch.from_numpy(digits.x_test))[1].numpy()
    onnx = ort.InferenceSession(str(int8)).run(["embedding"], {"x": digits.x_test})[0]
    same = int((_nearest(ref) == _nearest(onnx)).sum())
    # two neighbours at nearly one distance may swap with the summation order: within 2
    assert embedding["neighbours_on"] == 597 and abs(embedding["agree"] - same) <= 2
    cosine = (ref * onnx).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(onnx, axis=1)
    assert embedding["cosine_min"] == pytest.approx(float(cosine.min()), rel=1e-4)
    assert embedding["accuracy"] is None
    texts = [f["text"] for f in json.loads(report.read_text())["findings"][:2]]
    assert "(embedding)" in texts[1]
    assert f"the same for {embedding['agree']} of 597" in texts[1]


def test_a_classification_is_batch_by_classes():
    from parity.data.answers import answers_for
    from parity.errors import UsageError

    shapes = {"tokens": ((4, 7, 10), np.dtype("float32"))}
    with pytest.raises(UsageError, match="a classification is \\(batch, classes\\)"):
        answers_for(shapes, {"tokens": "classification"}, {})
    (found,) = answers_for(shapes, {}, {}).values()  # inferred: not a classification
    assert found.task == "regression" and found.inferred


def test_the_api_takes_a_module_in_memory_and_a_data_path(digits, torch_logits, clean_atol):
    scope: dict = {}
    exec(compile((digits.folder / "digits_model.py").read_text(), "m", "exec"), scope)
    net = scope["make"]()
    net.load_state_dict(torch.load(digits.weights))
    run = parity.validate(
        net, str(digits.onnx), data=digits.test_npz, labels=digits.labels,
        min_agreement={"logits": 1.0}, atol=float(clean_atol),
    )  # fmt: skip
    assert run.passed and run.data is not None
    (out,) = run.data.outputs
    assert out.agree == 597 and out.passed is True
    assert out.accuracy is not None
    assert out.accuracy.torch == pytest.approx((torch_logits.argmax(1) == digits.y_test).mean())
    with pytest.raises(parity.UsageError, match="labels= and min_agreement= apply only with"):
        parity.validate(net, str(digits.onnx), labels=digits.labels)


def test_a_batch_onnx_runtime_raises_on_is_said_and_its_samples_not_judged(
    digits, clean_atol, tmp_path
):
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(digits.onnx))  # Flatten -> Reshape to a batch of 4, frozen
    flatten = next(n for n in model.graph.node if n.op_type == "Flatten")
    model.graph.initializer.append(numpy_helper.from_array(np.array([4, 128]), "four"))
    reshape = helper.make_node("Reshape", [flatten.input[0], "four"], list(flatten.output))
    nodes = [reshape if n is flatten else n for n in model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    frozen = tmp_path / "frozen.onnx"
    onnx.save(model, str(frozen))
    data = tmp_path / "eleven.npy"
    np.save(data, digits.x_test[:11])
    code, report = _validate(
        digits, frozen, tmp_path, "--data", str(data), "--batch-size", "4", "--atol", clean_atol
    )
    assert code == 1
    assert [o["status"] for o in report["outputs"]] == ["pass", "pass", "error"]
    (out,) = report["data"]["outputs"]
    assert out["samples"] == 8 and report["data"]["samples"] == 11
    said = [f["text"] for f in report["findings"] if f["kind"] == "answers"]
    raised = "ONNX Runtime raised on 1 batch(es) (samples 8-10): their samples are not judged."
    assert raised in said
