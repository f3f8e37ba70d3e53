"""Model files never run code Parity did not choose to run (issue 9), from real attack files.

Each attack starts from a real ``torch.export.save`` archive with one member rewritten. Its
payload opens a marker file for writing; a control test shows that ``torch.export.load``
really runs it, so the tests that assert the marker never appears can fail.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from parity.errors import ModelLoadError
from parity.load.torch_model import is_code_spec, load_torch_model
from tests.helpers.archive_edits import first_expr, json_edit, rewrite_zip


class _Payload:
    """Unpickling this opens `path` for writing: the marker of code that ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


def _saved(obj: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _use_pickle_weight(marker: Path) -> dict[str, Callable[[bytes], bytes]]:
    def mark(document: dict) -> None:
        entry = document["config"]["fc.weight"]
        assert entry["path_name"] == "weight_0"  # the member replaced below
        entry["use_pickle"] = True

    return {
        "model_weights_config.json": json_edit(mark),
        "data/weights/weight_0": lambda _: _saved(_Payload(marker)),
    }


def _attacks(marker: Path) -> dict[str, dict[str, Callable[[bytes], bytes]]]:
    def guards(document: dict) -> None:
        document["guards_code"] = [f"open({str(marker)!r}, 'w') is not None"]

    def expr(document: dict) -> None:
        first_expr(document)["expr_str"] = f"open({str(marker)!r}, 'w')"

    return {
        # FX writes value names into the code it exec()s: every "x" (keys too) renamed.
        "value_name": {
            "models/model.json": lambda data: data.replace(
                b'"x"', json.dumps(f"x=open({str(marker)!r}, 'w')").encode()
            )
        },
        "sample_inputs": {"sample_inputs/model.pt": lambda _: _saved(_Payload(marker))},
        "use_pickle_weight": _use_pickle_weight(marker),
        "guards_code": {"models/model.json": json_edit(guards)},
        "sympy_expression": {"models/model.json": json_edit(expr)},
    }


ATTACKS = ["sample_inputs", "use_pickle_weight", "guards_code", "sympy_expression", "value_name"]


def _attack_file(kind: str, pt2: Path, tmp_path: Path, suffix: str = ".pt2") -> tuple[Path, Path]:
    marker = tmp_path / f"ran-{kind}"
    return rewrite_zip(pt2, tmp_path / f"attack{suffix}", _attacks(marker)[kind]), marker


@pytest.mark.parametrize("kind", ATTACKS)
def test_control_torch_export_load_runs_the_payload(kind, tiny_artifacts, tmp_path) -> None:
    path, marker = _attack_file(kind, tiny_artifacts.pt2, tmp_path)
    with contextlib.suppress(Exception):  # some payloads break the load after they ran
        torch.export.load(str(path)).module()(torch.randn(2, 4))
    assert marker.exists(), f"the {kind} attack file does not attack torch.export.load"


@pytest.mark.parametrize("kind", ATTACKS)
def test_attack_archives_are_refused_and_run_nothing(kind, tiny_artifacts, tmp_path) -> None:
    path, marker = _attack_file(kind, tiny_artifacts.pt2, tmp_path)
    try:
        model = load_torch_model(str(path))
    except ModelLoadError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:  # guard code is dropped, not refused: the model loads and runs without it
        assert kind == "guards_code"
        model.module(torch.randn(3, 4))
    assert not marker.exists()


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".ts", ".jit", ""])
def test_the_format_is_read_from_content_whatever_the_suffix(
    suffix, tiny_artifacts, tmp_path
) -> None:
    path, marker = _attack_file("sample_inputs", tiny_artifacts.pt2, tmp_path, suffix)
    refused = "refused member data/sample_inputs/model.pt: it needs pickle"
    with pytest.raises(ModelLoadError, match=refused):
        load_torch_model(str(path))
    assert not marker.exists()
    clean = tmp_path / f"clean{suffix}"
    clean.write_bytes(tiny_artifacts.pt2.read_bytes())
    model = load_torch_model(str(clean))
    assert model.kind == "exported_program" and not is_code_spec(str(clean))
    assert model.module(torch.randn(5, 4)).shape == (5, 3)


def test_a_graph_calling_a_python_function_is_refused(tiny_artifacts, tmp_path) -> None:
    def target(document: dict) -> None:
        node = document["graph_module"]["graph"]["nodes"][0]
        node["target"] = "torch.os.system"

    path = rewrite_zip(
        tiny_artifacts.pt2, tmp_path / "m.pt2", {"models/model.json": json_edit(target)}
    )
    with pytest.raises(ModelLoadError) as info:
        load_torch_model(str(path))
    assert "\n" not in str(info.value)


class ReadsAFile(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_file("/etc/hostname", False, 4, dtype=torch.uint8).float() + x


def test_torchscript_and_factories_are_refused_without_allow_code(model_zoo, tmp_path) -> None:
    scripted = tmp_path / "reads.pt2"  # TorchScript under the .pt2 suffix: content decides
    torch.jit.save(torch.jit.script(ReadsAFile()), str(scripted))
    assert is_code_spec(str(scripted))
    with pytest.raises(ModelLoadError, match="TorchScript is code") as info:
        load_torch_model(str(scripted), allow_code=False)
    assert "--trust-code" in str(info.value)
    assert load_torch_model(str(scripted)).kind == "torchscript"  # the CLI: a typed path

    marker = tmp_path / "imported"
    factory = tmp_path / "factory.py"
    factory.write_text(f"open({str(marker)!r}, 'w')\nimport torch\nmake = torch.nn.Identity\n")
    assert is_code_spec(f"{factory}:make")
    with pytest.raises(ModelLoadError, match="factory is code"):
        load_torch_model(f"{factory}:make", allow_code=False)
    with pytest.raises(ModelLoadError, match="factory is code"):
        load_torch_model(model_zoo.spec("make_tiny"), allow_code=False)
    assert not marker.exists()
    assert not is_code_spec("demo:cnn")


# --- one line on stderr, from the real CLI -------------------------------------------------


def _junk_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("junk/data", b"\x00\x01not a model" * 50)
    return path


def _flipped_torchscript(tiny_artifacts, path: Path) -> Path:
    """One byte of the archive's TorchScript source flipped (the "d" of "def forward")."""
    data = bytearray(tiny_artifacts.torchscript.read_bytes())
    with zipfile.ZipFile(tiny_artifacts.torchscript) as archive:
        info = next(i for i in archive.infolist() if b"def forward" in archive.read(i))
        source = archive.read(info)
    name_len, extra_len = struct.unpack(
        "<HH", data[info.header_offset + 26 : info.header_offset + 30]
    )
    start = info.header_offset + 30 + name_len + extra_len
    data[start + source.index(b"def forward")] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def _failing_reshape(path: Path) -> Path:
    """x [batch, 4] reshaped to [5, 5]: ORT fails at run time (and logs its own error line)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 5])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [5, 5])
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    graph = helper.make_graph([node], "g", [x], [y], [shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


CLI_CASES = {  # (model spec, ONNX file or None for the tiny export)
    "payload_pt2": lambda arts, zoo, tmp: (_attack_file("sample_inputs", arts.pt2, tmp)[0], None),
    "junk_zip": lambda arts, zoo, tmp: (_junk_zip(tmp / "junk.pt2"), None),
    "flipped_torchscript": lambda arts, zoo, tmp: (
        _flipped_torchscript(arts, tmp / "flipped.ts"),
        None,
    ),
    "raw_pickle": lambda arts, zoo, tmp: (_raw_pickle(tmp / "raw.pt"), None),
    "pickled_weights": lambda arts, zoo, tmp: (zoo.spec("make_tiny"), None),
}


def _raw_pickle(path: Path) -> Path:
    path.write_bytes(pickle.dumps({"w": 1}))
    return path


def test_onnx_runtime_raising_is_the_sets_failure_not_a_run_that_could_not_be_made(
    model_zoo, tmp_path
) -> None:
    """The file ran and broke (a Reshape to a size it cannot take): exit 1, each set's row
    with status error and ORT's words in one line, no traceback."""
    onnx_file = _failing_reshape(tmp_path / "reshape.onnx")
    report = tmp_path / "r.json"
    result = subprocess.run(
        [sys.executable, "-m", "parity", "validate", "--model", model_zoo.spec("make_tiny")]
        + ["--onnx", str(onnx_file), "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    rows = json.loads(report.read_text())["outputs"]
    assert rows and {r["status"] for r in rows} == {"error"}
    assert all("Reshape node" in r["message"] for r in rows)


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_bad_model_files_give_exactly_one_line(case, tiny_artifacts, model_zoo, tmp_path) -> None:
    model, onnx_file = CLI_CASES[case](tiny_artifacts, model_zoo, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "parity", "validate", "--model", str(model)]
        + ["--onnx", str(onnx_file or tiny_artifacts.onnx)]
        + (["--weights", str(tiny_artifacts.pickled_module)] if case == "pickled_weights" else []),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("parity: error: "), result.stderr
    expected = {"pickled_weights": "refused as unsafe"}
    assert expected.get(case, str(model)) in lines[0]
    assert not any(p.name.startswith("ran-") for p in tmp_path.iterdir())
