"""`--data PATH --engine ray`: the same `data` block as the local engine, on a real Ray
cluster whose worker node cannot see the model's folder.

The cluster is the sweep tests' (tests/helpers/isolated_ray.py): a head with no CPUs and one
worker node in a private mount namespace with a tmpfs over the folder holding the model
factory, its weights, the ONNX files, the labels and the --preprocess file, so they reach the
worker through Ray's object store only. The samples are read by the worker at their path, or
from moto's S3 server (which the worker node's environment names, as the sweep tests' does)
where they are put only there. Skipped, with the reason, only where `unshare --mount` is
refused (not root); the S3 ones without s3fs and moto's server.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from parity.cli import main
from tests.helpers import isolated_ray
from tests.helpers.data_files import PREPROCESS, image_folder, table_files
from tests.helpers.digits import Digits, build
from tests.helpers.moto_s3 import BUCKET
from tests.helpers.plant_bug import plant
from tests.helpers.sweep_zoo import write_manifest


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Digits:
    """The trained digits CNN, its int8 file and a planted bias (24 answers changed) in a
    folder the worker node sees empty; the held-out digits beside it, visible to both."""
    digits = build(tmp_path_factory.mktemp("digits_ray") / "model")
    plant(digits.onnx, digits.folder / "bias.onnx", "/fc/Gemm", "bias", 6.0)
    return digits


@pytest.fixture(scope="module")
def cluster(digits: Digits, s3_server):
    with isolated_ray.for_module([digits.folder], s3_server) as made:
        yield made


PROBE = """
import json, os, sys, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")

@ray.remote(num_cpus=1)
def probe(paths):
    return [os.path.exists(p) for p in paths]

print(json.dumps(ray.get(probe.remote(sys.argv[2:]))))
"""


def _seen_by_worker(cluster, paths: list[Path]) -> list[bool]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, cluster.address, *map(str, paths)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **cluster.env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _data_block(digits: Digits, onnx: Path, out: Path, *extra: str) -> tuple[int, dict]:
    args = ["validate", "--model", digits.model, "--weights", str(digits.weights)]
    code = main([*args, "--onnx", str(onnx), *extra, "--json", str(out)])
    return code, json.loads(out.read_text())["data"]


def _both(digits, onnx, tmp_path, cluster, monkeypatch, *extra) -> tuple[dict, dict]:
    """The `data` block of a local run and of the same run on the cluster (their exit codes
    the same)."""
    code, local = _data_block(digits, onnx, tmp_path / "local.json", *extra)
    for name, value in cluster.env.items():
        monkeypatch.setenv(name, value)
    on_ray = ("--engine", "ray", "--ray-address", cluster.address)
    ray_code, ray = _data_block(digits, onnx, tmp_path / "ray.json", *extra, *on_ray)
    assert ray_code == code
    return local, ray


@pytest.mark.slow
def test_a_planted_bias_on_ray_gives_the_local_engines_answers_flips_and_worst_samples(
    digits, cluster, tmp_path, monkeypatch
):
    samples = tmp_path / "test.npz"  # outside the hidden folder: the worker reads it
    shutil.copy(digits.test_npz, samples)
    extra = ("--data", str(samples), "--labels", str(digits.labels), "--batch-size", "32")
    local, ray = _both(digits, digits.folder / "bias.onnx", tmp_path, cluster, monkeypatch, *extra)
    assert ray == local  # every number: agreement, flips and ids, accuracy, worst, histogram
    (out,) = ray["outputs"]
    assert out["n_flips"] >= 10 and {f["onnx"] for f in out["flips"]} == {0}
    assert [f["sample"] for f in out["flips"]] == sorted(f["sample"] for f in out["flips"])
    assert out["accuracy"]["within_noise"] is False and len(out["worst"]) == 8
    # the worker node never saw the model's folder, and it sees the samples
    assert _seen_by_worker(cluster, [digits.weights, samples]) == [False, True]


@pytest.mark.slow
def test_an_imagefolder_through_a_shipped_preprocess_file_skips_the_same_sample(
    digits, cluster, tmp_path, monkeypatch
):
    from PIL import Image

    root = tmp_path / "images"  # outside the hidden folder: the worker reads it
    x, y = digits.x_test[:90], digits.y_test[:90]
    for k, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = root / f"digit{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.round(image[0] * 240).astype(np.uint8)).save(folder / f"{k:03d}.png")
    (root / "digit9" / "zz_broken.png").write_bytes(b"not a png")  # the last sample
    pre = digits.folder / "prep.py"  # hidden from the worker: it travels with the job
    pre.write_text(
        "import numpy as np\nfrom PIL import Image\n\n"
        "def load(path):\n"
        "    image = np.asarray(Image.open(path), dtype=np.float32) / 240\n"
        "    return {'x': image[None]}\n"
    )
    extra = ("--data", str(root), "--preprocess", f"{pre}:load", "--batch-size", "8",
             "--max-bad", "5%")  # fmt: skip
    local, ray = _both(digits, digits.int8, tmp_path, cluster, monkeypatch, *extra)
    assert ray == local
    assert (ray["format"], ray["samples"]) == ("imagefolder", 90)
    assert [s["id"] for s in ray["skipped"]] == ["digit9/zz_broken.png"]
    assert ray["outputs"][0]["worst"][0]["id"].startswith("digit")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("--engine", "ray"), "--engine applies only with --data"),
        (("--data", "x.npz", "--workers", "2"), "--ray-address and --workers apply only"),
        (("--data", "x.npz", "--engine", "ray", "--provider",
          "CPUExecutionProvider,CPUExecutionProvider", "--ort-opt-level", "all,basic"),
         "--engine ray judges one ONNX file"),
    ],
)  # fmt: skip
def test_engine_usage_errors_exit_2_in_one_line(extra, words, capsys, tmp_path):
    model = tmp_path / "m.py"
    model.write_text("import torch\ndef make():\n    return torch.nn.Linear(3, 2)\n")
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"")
    code = main(["validate", "--model", f"{model}:make", "--onnx", str(onnx), *extra])
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_a_batch_kept_for_its_worst_rows_gives_the_same_worst_samples():
    """A batch judged on a worker comes back with the inputs of its worth-keeping rows only:
    the answers read from it equal those read from the whole batch."""
    from parity.data.answers import OutputAnswers, rows_worth_keeping
    from parity.data.batches import Batch

    rng = np.random.default_rng(0)
    answers = {task: [OutputAnswers("y", task, False, None) for _ in range(2)]
               for task in ("classification", "embedding", "regression")}  # fmt: skip
    for index in range(3):
        feeds = {"x": rng.normal(size=(20, 4)).astype(np.float32)}
        samples = np.arange(index * 20, index * 20 + 20)
        batch = Batch(index, feeds, samples, tuple(map(str, samples)), None, 20)
        ref = rng.normal(size=(20, 6)).astype(np.float32)
        onnx = ref + rng.normal(scale=0.3, size=ref.shape).astype(np.float32)
        for task, (whole, kept) in answers.items():
            rows = rows_worth_keeping({"y": task}, {"y": ref}, {"y": onnx}, 20)
            assert len(rows) == 8
            whole.add(batch, ref, onnx)
            kept.add(batch.keeping(rows), ref, onnx)
    for whole, kept in answers.values():
        a, b = whole.result(), kept.result()
        assert [(w.sample, w.error) for w in a.worst] == [(w.sample, w.error) for w in b.worst]
        for wa, wb in zip(a.worst, b.worst, strict=True):
            np.testing.assert_array_equal(wa.inputs["x"], wb.inputs["x"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["parquet", "jsonl", "arrow"])
def test_a_table_only_in_s3_on_ray_gives_the_local_block_without_a_limit(
    digits, cluster, s3, tmp_path, monkeypatch, kind
):
    """Row groups of 40, Arrow batches of 16, a .jsonl with a broken and a blank line: shards
    of 40 rows start inside them; the .jsonl and .arrow are counted by a first pass."""
    path = table_files(digits, 150, digits.folder / "tables")[kind]  # hidden from the worker
    s3.put(f"ray/{path.name}", path.read_bytes())
    uri = f"s3://{BUCKET}/ray/{path.name}"
    extra = ("--data", uri, "--labels", "label", "--batch-size", "10", "--max-bad", "5%")
    local, ray = _both(digits, digits.folder / "bias.onnx", tmp_path, cluster, monkeypatch, *extra)
    assert ray == local
    rows = 149 if kind == "jsonl" else 150  # the blank line is no row
    skipped = ["row 3"] if kind == "jsonl" else []
    assert (ray["source"], ray["samples"], ray["labels"]) == (uri, rows - len(skipped),
                                                              "column label")  # fmt: skip
    assert [s["id"] for s in ray["skipped"]] == skipped
    assert ray["outputs"][0]["n_flips"] > 0 and ray["outputs"][0]["accuracy"]["n"] == rows - len(
        skipped
    )
    assert _seen_by_worker(cluster, [path]) == [False]


@pytest.mark.slow
def test_an_npz_and_its_labels_only_in_s3_on_ray_give_the_local_block(
    digits, cluster, s3, tmp_path, monkeypatch
):
    s3.put("ray/test.npz", digits.test_npz.read_bytes())  # both hidden from the worker
    s3.put("ray/labels.npy", digits.labels.read_bytes())
    extra = ("--data", f"s3://{BUCKET}/ray/test.npz", "--labels",
             f"s3://{BUCKET}/ray/labels.npy", "--batch-size", "32")  # fmt: skip
    local, ray = _both(digits, digits.folder / "bias.onnx", tmp_path, cluster, monkeypatch, *extra)
    assert ray == local
    (out,) = ray["outputs"]
    assert out["n_flips"] >= 10 and {f["onnx"] for f in out["flips"]} == {0}
    assert out["accuracy"]["n"] == 597 and ray["labels"] == f"s3://{BUCKET}/ray/labels.npy"
    assert _seen_by_worker(cluster, [digits.test_npz, digits.labels]) == [False, False]


@pytest.mark.slow
def test_an_imagefolder_prefix_only_in_s3_through_a_shipped_preprocess_file(
    digits, cluster, s3, tmp_path, monkeypatch
):
    for rel, data in image_folder(digits, 60).items():
        s3.put(f"ray/images/{rel}", data)
    pre = digits.folder / "prep_s3.py"  # hidden from the worker: it travels with the job
    pre.write_text(PREPROCESS)
    uri = f"s3://{BUCKET}/ray/images"
    extra = ("--data", uri, "--preprocess", f"{pre}:load", "--batch-size", "8",
             "--max-bad", "5%")  # fmt: skip
    local, ray = _both(digits, digits.int8, tmp_path, cluster, monkeypatch, *extra)
    assert ray == local
    assert (ray["format"], ray["samples"]) == ("imagefolder", 60)
    (skipped,) = ray["skipped"]  # named by its object on both, never by a worker's copy
    assert skipped["id"] == "digit9/zz_broken.png"
    assert f"{uri}/digit9/zz_broken.png" in skipped["reason"]


@pytest.mark.slow
def test_a_sweep_pair_reads_a_data_prefix_in_s3_as_validate_does_on_both_engines(
    digits, cluster, s3, tmp_path, monkeypatch
):
    """`--data s3://bucket/prefix/` in a manifest: the pair opens the prefix where it runs, as
    `parity validate` does (the sweep fetched it as one object, which no reader could open);
    on Ray the worker reads it with its own environment, the model's files shipped to it."""
    for k in range(40):
        buffer = io.BytesIO()
        np.save(buffer, digits.x_test[k])
        s3.put(f"ray/sweep/digit{digits.y_test[k]}/{k:03d}.npy", buffer.getvalue())
    uri = f"s3://{BUCKET}/ray/sweep/"
    args = ["--model", digits.model, "--weights", str(digits.weights), "--onnx",
            str(digits.folder / "bias.onnx"), "--data", uri, "--batch-size", "8"]  # fmt: skip
    code = main(["validate", *args, "--json", str(tmp_path / "alone.json")])
    alone = json.loads((tmp_path / "alone.json").read_text())["data"]
    assert (alone["source"], alone["format"], alone["samples"]) == (uri, "imagefolder", 40)
    manifest = write_manifest(tmp_path, [{"name": "prefix", "args": args}])
    for name, value in cluster.env.items():
        monkeypatch.setenv(name, value)
    for engine in (["--workers", "1"], ["--engine", "ray", "--ray-address", cluster.address]):
        out = tmp_path / engine[0].lstrip("-")
        assert main(["sweep", str(manifest), "--out", str(out), *engine]) == code
        assert json.loads((out / "prefix" / "report.json").read_text())["data"] == alone


def test_a_bad_uri_is_one_line_exit_2_before_any_cluster_starts(digits, s3, capsys):
    import ray

    code = main(["validate", "--model", digits.model, "--weights", str(digits.weights),
                 "--onnx", str(digits.onnx), "--data", f"s3://{BUCKET}/ray/none.parquet",
                 "--engine", "ray"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"--data s3://{BUCKET}/ray/none.parquet: no such file or folder" in err
    assert not ray.is_initialized()


def test_a_model_in_memory_is_refused_before_any_cluster_starts(tmp_path):
    import torch

    import parity
    from parity.data.options import DataOptions
    from parity.errors import UsageError

    net = torch.nn.Linear(3, 2).eval()
    onnx = tmp_path / "lin.onnx"
    torch.onnx.export(net, (torch.zeros(1, 3),), str(onnx), input_names=["x"],
                      dynamic_axes={"x": {0: "b"}}, dynamo=False)  # fmt: skip
    np.save(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    options = DataOptions(str(tmp_path / "x.npy"), engine="ray")
    with pytest.raises(UsageError, match="not a file the workers can load"):
        parity.validate(net, onnx, data=options)
    import ray

    assert not ray.is_initialized()
