"""Refused files say what they are and what they need, in one line (issue 23, defects).

Each case is a real file: a raw pickle (``pickle.dumps``, not ``torch.save``) where a
tensor payload belongs, a malicious ``pytorch_model.bin`` in an ``hf:`` directory.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from parity.errors import ModelLoadError
from parity.load.torch_model import load_torch_model


class _Payload:
    """Unpickling this opens `path` for writing: the marker of code that ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


def _with_member(src: Path, dst: Path, suffix: str, data: bytes) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            body = data if info.filename.endswith(suffix) else zin.read(info.filename)
            zout.writestr(info.filename, body)
    return dst


def test_a_raw_pickle_in_a_pt2_says_it_is_one_and_what_it_imports(tiny_artifacts, tmp_path):
    marker = tmp_path / "ran"
    path = _with_member(
        tiny_artifacts.pt2, tmp_path / "raw.pt2", "sample_inputs/model.pt",
        pickle.dumps(_Payload(marker)),
    )  # fmt: skip
    with pytest.raises(ModelLoadError) as caught:
        load_torch_model(str(path))
    message = str(caught.value)
    assert "\n" not in message and "()" not in message
    assert "a raw pickle, not a torch.save file" in message
    assert "it imports io.open" in message
    assert not marker.exists()


def test_a_torch_save_payload_names_the_global_it_needs(tiny_artifacts, tmp_path):
    buffer = io.BytesIO()
    torch.save(_Payload(tmp_path / "ran"), buffer)
    path = _with_member(
        tiny_artifacts.pt2, tmp_path / "saved.pt2", "sample_inputs/model.pt", buffer.getvalue()
    )
    with pytest.raises(ModelLoadError, match=r"pickle beyond tensors \(it imports io\.open\)"):
        load_torch_model(str(path))


def test_raw_pickle_weights_say_what_they_need(model_zoo, tmp_path):
    weights = tmp_path / "w.pt"
    weights.write_bytes(pickle.dumps(_Payload(tmp_path / "ran"), protocol=0))
    with pytest.raises(ModelLoadError) as caught:
        load_torch_model(model_zoo.spec("make_tiny"), weights=weights)
    message = str(caught.value)
    assert "refused as unsafe" in message and "a raw pickle" in message
    assert "it imports io.open" in message and "\n" not in message
    assert not (tmp_path / "ran").exists()


def test_a_raw_pickle_as_model_is_not_called_a_torch_save_file(tmp_path):
    path = tmp_path / "raw.pt"
    path.write_bytes(pickle.dumps({"w": 1}))
    with pytest.raises(ModelLoadError, match="a raw pickle"):
        load_torch_model(str(path))


def test_malicious_pytorch_model_bin_is_refused_as_pickle_not_tf(tmp_path):
    pytest.importorskip("transformers")
    from parity.hf.loading import load_hf_model
    from tests.helpers.hf_models import make_llama_dir

    directory = Path(make_llama_dir(tmp_path / "evil"))
    (directory / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"model.embed_tokens.weight": _Payload(marker)}, directory / "pytorch_model.bin")
    with pytest.raises(ModelLoadError) as caught:
        load_hf_model(str(directory))
    message = str(caught.value)
    assert "TF 2.0" not in message and "\n" not in message
    assert "refused pytorch_model.bin: it needs pickle beyond tensors" in message
    assert "io.open" in message
    assert not marker.exists()


def _external_data_onnx(folder: Path) -> tuple[Path, str]:
    """A real export of Linear(4, 3) saved with its weights in one external-data file."""
    import onnx

    folder.mkdir()
    torch.manual_seed(0)
    path = folder / "ext.onnx"
    torch.onnx.export(
        torch.nn.Linear(4, 3), (torch.randn(2, 4),), str(path), dynamo=False,
        input_names=["x"], output_names=["y"],
    )  # fmt: skip
    model = onnx.load(str(path))
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    return path, "w.bin"


@pytest.mark.parametrize(
    "kind",
    ["dev_zero", "folder", "dangling"],
)
def test_external_data_that_is_not_a_regular_file_says_what_it_is(kind, tmp_path):
    from parity.errors import OnnxLoadError
    from parity.load.onnx_model import load_onnx

    path, location = _external_data_onnx(tmp_path / kind)
    data = path.parent / location
    data.unlink()
    if kind == "dev_zero":
        data.symlink_to("/dev/zero")
        expected = "is a symlink to /dev/zero (a character device), not a regular file"
    elif kind == "folder":
        data.mkdir()
        expected = "is a folder, not a regular file"
    else:
        data.symlink_to(path.parent / "gone.bin")
        expected = "gone.bin, which does not exist"
    with pytest.raises(OnnxLoadError) as caught:
        load_onnx(path)
    message = str(caught.value)
    assert expected in message and "missing" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("big.onnx/r.json", "big.onnx is a file, not a folder"),
        ("big.onnx/sub/r.json", "big.onnx is a file, not a folder"),
        ("nope/r.json", "folder nope does not exist"),
        ("a\0b.json", "the name holds a NUL byte"),
    ],
)
def test_an_output_whose_folder_is_a_file_says_so(target, expected, tmp_path, monkeypatch, capsys):
    from parity.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.onnx").write_bytes(b"not a folder")
    assert main(["validate", "--model", "demo:cnn", "--json", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
