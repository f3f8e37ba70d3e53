"""Model specs: every kind loads a real module in eval mode; every bad spec is one clear line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from parity.errors import ModelLoadError, UsageError
from parity.load.torch_model import load_torch_model

X = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))


def _eager(model_zoo) -> torch.nn.Module:
    return model_zoo.build("make_tiny")


def _same_output(module, eager: torch.nn.Module) -> None:
    with torch.inference_mode():
        torch.testing.assert_close(module(X), eager(X))


def test_pt2_loads_as_exported_program_and_runs_at_another_batch(tiny_artifacts, model_zoo) -> None:
    model = load_torch_model(str(tiny_artifacts.pt2))
    assert model.kind == "exported_program"
    assert model.parameter_names == ()  # exported with positional args: no keywords
    assert model.positional_names == ("x",)  # ... whose names the graph signature keeps
    _same_output(model.module, _eager(model_zoo))
    assert model.sha256 == hashlib.sha256(tiny_artifacts.pt2.read_bytes()).hexdigest()


def test_torchscript_archive_loads_with_its_parameter_names(tiny_artifacts, model_zoo) -> None:
    model = load_torch_model(str(tiny_artifacts.torchscript))
    assert model.kind == "torchscript"
    assert model.parameter_names == ("x",)
    assert not model.module.training
    _same_output(model.module, _eager(model_zoo))


def test_py_file_factory_is_imported_by_path_and_put_in_eval(model_zoo) -> None:
    model = load_torch_model(model_zoo.spec("make_tiny"))
    assert model.kind == "factory"
    assert model.parameter_names == ("x",)
    assert not model.module.training
    _same_output(model.module, _eager(model_zoo))


def test_module_factory_is_imported_by_name(model_zoo, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(model_zoo.dir))
    model = load_torch_model("parity_test_models:make_tokens")
    assert model.kind == "factory"
    assert model.parameter_names == ("input_ids", "attention_mask")


def test_an_nn_module_object_is_used_as_is(model_zoo) -> None:
    model = load_torch_model(model_zoo.spec("tiny_instance"))
    assert isinstance(model.module, torch.nn.Module)
    _same_output(model.module, _eager(model_zoo))


def test_factory_hash_follows_spec_file_and_weights(model_zoo, tiny_artifacts) -> None:
    a = load_torch_model(model_zoo.spec("make_tiny")).sha256
    assert a == load_torch_model(model_zoo.spec("make_tiny")).sha256
    assert a != load_torch_model(model_zoo.spec("tiny_instance")).sha256
    assert (
        a != load_torch_model(model_zoo.spec("make_tiny"), weights=tiny_artifacts.state_pt).sha256
    )


def test_factory_that_raises_is_one_line_naming_spec_and_exception(model_zoo) -> None:
    spec = model_zoo.spec("broken_factory")
    with pytest.raises(ModelLoadError) as exc:
        load_torch_model(spec)
    assert str(exc.value) == f"{spec} raised ValueError: bad config: depth must be > 0"


def test_file_that_raises_on_import_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "boom.py"
    path.write_text("x = 1 / 0\n")
    with pytest.raises(ModelLoadError, match=r"boom\.py:make raised ZeroDivisionError"):
        load_torch_model(f"{path}:make")


def test_factory_returning_a_non_module_is_refused(model_zoo) -> None:
    with pytest.raises(ModelLoadError, match=r"not_a_module\(\) returned int"):
        load_torch_model(model_zoo.spec("not_a_module"))


def test_missing_callable_names_the_attribute(model_zoo) -> None:
    with pytest.raises(ModelLoadError, match="no attribute 'nope'"):
        load_torch_model(model_zoo.spec("nope"))


def test_missing_module_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no module named 'no_such_pkg_parity'"):
        load_torch_model("no_such_pkg_parity.models:make")
    with pytest.raises(ModelLoadError, match="no such file"):
        load_torch_model(f"{tmp_path / 'missing.py'}:make")
    with pytest.raises(ModelLoadError, match="no such file"):
        load_torch_model(str(tmp_path / "missing.pt2"))


def test_a_state_dict_given_as_model_points_to_weights(tiny_artifacts) -> None:
    with pytest.raises(ModelLoadError, match="--weights"):
        load_torch_model(str(tiny_artifacts.state_pt))


def test_an_onnx_file_given_as_model_says_so(tiny_artifacts) -> None:
    with pytest.raises(ModelLoadError, match="ONNX file"):
        load_torch_model(str(tiny_artifacts.onnx))


@pytest.mark.parametrize("kind", ["state_pt", "state_safetensors"])
def test_weights_are_loaded_into_the_model(model_zoo, tiny_artifacts, kind: str) -> None:
    model = load_torch_model(model_zoo.spec("make_tiny"), weights=getattr(tiny_artifacts, kind))
    got = model.module.state_dict()
    for key, value in tiny_artifacts.state.items():
        torch.testing.assert_close(got[key], value)
    assert not torch.equal(got["fc.bias"], _eager(model_zoo).state_dict()["fc.bias"])


def test_weights_apply_to_torchscript_and_exported_programs(tiny_artifacts) -> None:
    for spec in (tiny_artifacts.torchscript, tiny_artifacts.pt2):
        model = load_torch_model(str(spec), weights=tiny_artifacts.state_safetensors)
        torch.testing.assert_close(
            model.module.state_dict()["fc.bias"], tiny_artifacts.state["fc.bias"]
        )


def test_pickled_module_as_weights_is_refused_as_unsafe(model_zoo, tiny_artifacts) -> None:
    with pytest.raises(ModelLoadError, match="refused as unsafe"):
        load_torch_model(model_zoo.spec("make_tiny"), weights=tiny_artifacts.pickled_module)


def test_mismatched_keys_are_listed(model_zoo, tmp_path: Path) -> None:
    path = tmp_path / "renamed.pt"
    torch.save({"head.weight": torch.zeros(3, 4), "head.bias": torch.zeros(3)}, str(path))
    with pytest.raises(ModelLoadError) as exc:
        load_torch_model(model_zoo.spec("make_tiny"), weights=path)
    message = str(exc.value)
    assert "missing keys fc.bias, fc.weight" in message
    assert "unexpected keys head.bias, head.weight" in message


def test_wrong_shaped_weights_name_the_tensor(model_zoo, tmp_path: Path) -> None:
    path = tmp_path / "wrong.pt"
    torch.save({"fc.weight": torch.zeros(5, 4), "fc.bias": torch.zeros(3)}, str(path))
    with pytest.raises(ModelLoadError, match="size mismatch for fc.weight"):
        load_torch_model(model_zoo.spec("make_tiny"), weights=path)


def test_corrupt_safetensors_and_missing_weights(model_zoo, tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_torch_model(model_zoo.spec("make_tiny"), weights=bad)
    with pytest.raises(ModelLoadError, match="no such file"):
        load_torch_model(model_zoo.spec("make_tiny"), weights=tmp_path / "none.pt")


def test_unknown_demo_lists_the_demos() -> None:
    from parity.load.demos import DEMOS

    with pytest.raises(UsageError) as exc:
        load_torch_model("demo:nope")
    for name in DEMOS:
        assert name in str(exc.value)


def test_demo_spec_builds_the_demo_in_eval_mode() -> None:
    from parity.load.demos import DEMOS

    name = "cnn" if "cnn" in DEMOS else next(iter(DEMOS))
    model = load_torch_model(f"demo:{name}")
    assert model.kind == "demo"
    assert not model.module.training
    assert model.parameter_names  # demos are plain nn.Modules with a typed forward()
