"""The built-in demos export, load in onnxruntime, and disagree (or not) the way they say.

Only torch, onnxruntime and numpy judge here, so these tests stand apart from the rest of
the core. Every demo is exported once per session into a temporary cache, so the tests
check this code's exports, never a stale cache from an earlier version.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from parity.errors import UsageError
from parity.load import demos
from parity.load.export_lock import LOCK_NAME
from parity.tolerances import Tolerance, Tolerances

Arrays = dict[str, np.ndarray]


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("parity-demos")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(demos.CACHE_ENV, str(cache))
        patch.setenv(demos.SHIPPED_ENV, "0")  # this code's exports, not the shipped files
        yield cache


@pytest.fixture(scope="session")
def sessions(demo_cache: Path) -> dict[str, ort.InferenceSession]:
    return {
        name: ort.InferenceSession(
            str(demos.demo_onnx_path(name)), providers=["CPUExecutionProvider"]
        )
        for name in demos.DEMOS
    }


@pytest.fixture(scope="session")
def models() -> dict[str, torch.nn.Module]:
    return {name: demo.build() for name, demo in demos.DEMOS.items()}


def _run_both(
    name: str,
    feeds: dict[str, torch.Tensor],
    sessions: dict[str, ort.InferenceSession],
    models: dict[str, torch.nn.Module],
) -> tuple[Arrays, Arrays]:
    """(torch reference, onnxruntime) outputs by name, both as float64 numpy."""
    with torch.inference_mode():
        ref = {k: v.double().numpy() for k, v in models[name](**feeds).items()}
    session = sessions[name]
    values = session.run(None, {k: v.numpy() for k, v in feeds.items()})
    got = {o.name: v.astype(np.float64) for o, v in zip(session.get_outputs(), values, strict=True)}
    assert set(got) == set(ref), f"{name}: onnx outputs {sorted(got)} vs torch {sorted(ref)}"
    for key in ref:
        assert got[key].shape == ref[key].shape, f"{name}.{key}: shape"
    return ref, got


def _passes(ref: np.ndarray, got: np.ndarray, tol: Tolerance) -> bool:
    return bool(np.all(np.abs(got - ref) <= tol.atol + tol.rtol * np.abs(ref)))


def _image(batch: int, height: int, width: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"image": torch.randn(batch, 3, height, width, generator=generator)}


def _text(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, seq // 2 :] = 0  # one padded row, so the mask path is exercised
    return {
        "input_ids": torch.randint(0, 100, (batch, seq), generator=generator),
        "attention_mask": mask,
    }


IMAGE_SIZES = [(2, 32, 32), (3, 24, 40)]  # the export's size and another
TEXT_SIZES = [(2, 16), (4, 32), (6, 48)]  # the export's size and the grown ones


def test_every_demo_is_described_and_named_by_its_key() -> None:
    assert set(demos.DEMOS) == {"cnn", "transformer", "fp16", "broken"}
    for name, demo in demos.DEMOS.items():
        assert demo.name == name
        assert demo.title and len(demo.description) > 80


def test_demo_builds_are_deterministic() -> None:
    for name, demo in demos.DEMOS.items():
        first, second = demo.build().state_dict(), demo.build().state_dict()
        assert all(torch.equal(first[k], second[k]) for k in first), name


def test_exports_are_valid_onnx_with_named_dynamic_inputs(sessions) -> None:
    expected = {
        "cnn": (["image"], ["logits", "features"]),
        "transformer": (["input_ids", "attention_mask"], ["last_hidden_state", "pooled"]),
        "fp16": (["input_ids", "attention_mask"], ["last_hidden_state", "pooled"]),
        "broken": (["image"], ["mask", "embedding"]),
    }
    for name, (inputs, outputs) in expected.items():
        path = demos.demo_onnx_path(name)
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        assert path.stat().st_size < 1_000_000
        session = sessions[name]
        assert [i.name for i in session.get_inputs()] == inputs
        assert [o.name for o in session.get_outputs()] == outputs
        batch_dim = session.get_inputs()[0].shape[0]
        assert isinstance(batch_dim, str), f"{name}: batch axis is not dynamic"


@pytest.mark.parametrize("size", IMAGE_SIZES)
def test_cnn_passes_at_default_tolerance(sessions, models, size) -> None:
    ref, got = _run_both("cnn", _image(*size, seed=3), sessions, models)
    for key in ref:
        assert _passes(ref[key], got[key], Tolerance()), key
        assert np.abs(got[key] - ref[key]).max() < 1e-5 / 5, f"{key}: too close to the limit"


@pytest.mark.parametrize("size", TEXT_SIZES[:2])
def test_transformer_passes_at_default_tolerance(sessions, models, size) -> None:
    ref, got = _run_both("transformer", _text(*size, seed=3), sessions, models)
    for key in ref:
        assert _passes(ref[key], got[key], Tolerance()), key


def test_fp16_onnx_computes_in_float16_behind_float32_io(sessions) -> None:
    model = onnx.load(str(demos.demo_onnx_path("fp16")))
    float_types = {i.data_type for i in model.graph.initializer} - {onnx.TensorProto.INT64}
    assert float_types == {onnx.TensorProto.FLOAT16}
    assert {o.type for o in sessions["fp16"].get_outputs()} == {"tensor(float)"}


@pytest.mark.parametrize("size", TEXT_SIZES)
def test_fp16_fails_default_and_passes_its_documented_tolerances(sessions, models, size) -> None:
    tolerances = demos.DEMOS["fp16"].tolerances
    assert isinstance(tolerances, Tolerances)
    ref, got = _run_both("fp16", _text(*size, seed=size[0]), sessions, models)
    for key in ref:
        assert not _passes(ref[key], got[key], Tolerance()), f"{key} passed at the default"
        assert _passes(ref[key], got[key], tolerances.for_output(key)), key


def test_fp16_uses_the_transformer_weights(models) -> None:
    assert demos.DEMOS["fp16"].build is demos.DEMOS["transformer"].build


@pytest.mark.parametrize("size", IMAGE_SIZES)
def test_broken_mask_fails_only_on_its_border_and_embedding_passes(sessions, models, size) -> None:
    ref, got = _run_both("broken", _image(*size, seed=5), sessions, models)
    error = np.abs(got["mask"] - ref["mask"])
    interior = error[..., 1:-1, 1:-1]
    assert interior.max() < 1e-5, "the bug leaked into the interior"
    assert error.max() > 0.1, "the mask's border error is not clear"
    border_rows = error[..., [0, -1], :].max(axis=-1)
    border_cols = error[..., :, [0, -1]].max(axis=-2)
    assert np.all(border_rows > 1e-3) and np.all(border_cols > 1e-3), "a border edge agrees"
    assert _passes(ref["embedding"], got["embedding"], Tolerance())


def test_broken_export_has_exactly_one_edited_pad() -> None:
    model = onnx.load(str(demos.demo_onnx_path("broken")))
    modes = [
        onnx.helper.get_attribute_value(a)
        for node in model.graph.node
        if node.op_type == "Pad"
        for a in node.attribute
        if a.name == "mode"
    ]
    assert modes == [b"edge"]


def test_cache_is_reused_and_keyed_by_version(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(demos.CACHE_ENV, str(tmp_path))
    first = demos.demo_onnx_path("cnn")
    assert first.parent == tmp_path
    stamp = first.stat().st_mtime_ns
    again = demos.demo_onnx_path("cnn")
    assert again == first and again.stat().st_mtime_ns == stamp

    monkeypatch.setattr(demos, "DEMO_VERSION", demos.DEMO_VERSION + "-next")
    bumped = demos.demo_onnx_path("cnn")
    assert bumped != first and bumped.is_file()
    cached = sorted(p.name for p in tmp_path.iterdir() if p.name != LOCK_NAME)
    assert cached == sorted([first.name, bumped.name])


def test_unknown_demo_is_a_usage_error_listing_the_names() -> None:
    with pytest.raises(UsageError) as info:
        demos.demo_onnx_path("resnet")
    message = str(info.value)
    assert "resnet" in message
    assert all(name in message for name in demos.DEMOS)
