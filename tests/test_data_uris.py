"""`--data URI`: a data set in object storage (moto's S3 server on 127.0.0.1, read by s3fs
through fsspec) gives the `data` block a copy on disk gives, field for field but where it
came from, on the local engine; what cannot be read is one line, exit 2. The same data on a
Ray cluster: tests/test_data_ray.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from parity.cli import main
from parity.data.options import DataOptions
from parity.data.read import open_data
from tests.helpers.data_files import PREPROCESS, image_folder, table_files
from tests.helpers.digits import Digits, build
from tests.helpers.moto_s3 import BUCKET

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Digits:
    return build(tmp_path_factory.mktemp("digits_uris"))


def _block(digits: Digits, onnx: Path, out: Path, *extra: str) -> tuple[int, dict]:
    args = ["validate", "--model", digits.model, "--weights", str(digits.weights)]
    code = main([*args, "--onnx", str(onnx), *extra, "--json", str(out)])
    return code, json.loads(out.read_text())["data"]


def _same_but_where(on_disk: dict, in_s3: dict, uri: str, root: Path | None = None) -> None:
    """Equal blocks but the data's name (and a folder's files named by their URIs)."""
    assert in_s3["source"] == uri
    if root is not None:
        on_disk = json.loads(json.dumps(on_disk).replace(str(root), uri.rstrip("/")))
    assert {**in_s3, "source": on_disk["source"], "labels": on_disk["labels"]} == on_disk


@pytest.mark.parametrize("kind", ["npz", "npy", "parquet", "jsonl", "arrow"])
def test_a_file_in_s3_gives_the_block_its_copy_on_disk_gives(digits, s3, tmp_path, kind):
    if kind in ("npz", "npy"):
        path = digits.test_npz if kind == "npz" else tmp_path / "x.npy"
        if kind == "npy":
            np.save(path, digits.x_test)
        labels = ("--labels", str(digits.labels))
        s3.put("uris/labels.npy", digits.labels.read_bytes())
        s3_labels = ("--labels", f"s3://{BUCKET}/uris/labels.npy")
    else:
        path = table_files(digits, 150, tmp_path)[kind]
        labels = s3_labels = ("--labels", "label")
    uri = f"s3://{BUCKET}/uris/{path.name}"
    s3.put(f"uris/{path.name}", path.read_bytes())
    extra = ("--batch-size", "32", "--max-bad", "5%")
    code, on_disk = _block(digits, digits.int8, tmp_path / "a.json", "--data", str(path), *labels,
                           *extra)  # fmt: skip
    s3_code, in_s3 = _block(digits, digits.int8, tmp_path / "b.json", "--data", uri, *s3_labels,
                            *extra)  # fmt: skip
    assert s3_code == code != 2  # the int8 file fails atol: exit 1 on both
    _same_but_where(on_disk, in_s3, uri)
    assert in_s3["outputs"][0]["accuracy"]["n"] == in_s3["samples"]
    skipped = [s["id"] for s in in_s3["skipped"]]
    assert skipped == (["row 3"] if kind == "jsonl" else [])  # the blank line is no row


def test_an_imagefolder_prefix_in_s3_through_a_preprocess_file(digits, s3, tmp_path):
    files = image_folder(digits, 40)
    root = tmp_path / "images"
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        s3.put(f"images/{rel}", data)
    pre = tmp_path / "prep.py"
    pre.write_text(PREPROCESS)
    extra = ("--preprocess", f"{pre}:load", "--batch-size", "8", "--max-bad", "5%")
    code, on_disk = _block(digits, digits.int8, tmp_path / "a.json", "--data", str(root), *extra)
    uri = f"s3://{BUCKET}/images/"
    s3_code, in_s3 = _block(digits, digits.int8, tmp_path / "b.json", "--data", uri, *extra)
    assert s3_code == code != 2  # the int8 file fails atol: exit 1 on both
    _same_but_where(on_disk, in_s3, uri, root)
    assert (in_s3["format"], in_s3["samples"]) == ("imagefolder", 40)
    (skipped,) = in_s3["skipped"]  # named by its object, never by the copy that was read
    assert skipped["id"] == "digit9/zz_broken.png" and "parity-data-" not in skipped["reason"]
    assert f"{uri}digit9/zz_broken.png" in skipped["reason"]


def test_a_jsonl_and_an_arrow_stream_are_counted_by_a_first_pass_and_read_from_any_row(
    digits, s3, tmp_path
):
    for kind, path in table_files(digits, 90, tmp_path).items():
        s3.put(f"count/{path.name}", path.read_bytes())
        for where in (str(path), f"s3://{BUCKET}/count/{path.name}"):
            data = open_data(DataOptions(where, labels="label"), ["x"])
            rows = list(data.samples())
            assert data.size() == len(rows) == (89 if kind == "jsonl" else 90), where
            for start in (0, 16, 41, 89):  # inside a row group, an Arrow batch; the last row
                tail = [(s.id, s.label, s.reason) for s in data.samples_from(start)]
                assert tail == [(s.id, s.label, s.reason) for s in rows[start:]], (where, start)


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        (f"s3://{BUCKET}/nothing/here.npz", f"--data s3://{BUCKET}/nothing/here.npz: no such file"),
        ("s3://no-such-bucket-here/x.npz", "no such file or folder"),
        ("nope://bucket/x.npz", "--data nope://bucket/x.npz: cannot be read: ValueError: Proto"),
        (f"s3://{BUCKET}/bad/garbage.npz", "not a readable .npz"),
        (f"s3://{BUCKET}/bad/garbage.parquet", "not a parquet file"),
        (f"s3://{BUCKET}/bad/x.csv", "give a .npy or .npz of arrays"),
    ],
)  # fmt: skip
def test_a_bad_uri_or_an_unreadable_object_is_one_line_exit_2(
    digits, s3, uri, words, capsys, tmp_path
):
    for name in ("garbage.npz", "garbage.parquet", "x.csv"):
        s3.put(f"bad/{name}", b"this is not what its name says")
    code = main(["validate", "--model", digits.model, "--weights", str(digits.weights),
                 "--onnx", str(digits.onnx), "--data", uri])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_a_signed_uri_is_shown_and_stored_redacted(digits, s3, tmp_path, capsys):
    secret = "c2VjcmV0LXNpZ25hdHVyZQ"
    uri = f"https://127.0.0.1:9/x.npz?X-Amz-Expires=60&X-Amz-Signature={secret}"
    code = main(["validate", "--model", digits.model, "--weights", str(digits.weights),
                 "--onnx", str(digits.onnx), "--data", uri])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "X-Amz-Signature=***" in err and secret not in err


def test_an_npz_whose_arrays_are_past_the_budget_is_refused_before_it_is_inflated(s3, tmp_path):
    from parity.errors import BudgetError
    from parity.limits.budget import MemoryBudget

    out = io.BytesIO()  # 64 MB of zeros, compressed to a few KB
    np.savez_compressed(out, x=np.zeros((4096, 4096), np.float32))
    s3.put("bomb/x.npz", out.getvalue())
    with pytest.raises(BudgetError, match=r"an \.npz is read whole"):
        open_data(DataOptions(f"s3://{BUCKET}/bomb/x.npz"), ["x"], budget=MemoryBudget(16 << 20))
