"""The demos' exports ship in the package (parity.load.demos.SHIPPED_DIR), so a fresh
install's first `parity dashboard --model demo:broken` copies one instead of exporting: each
shipped file is named for this torch and onnx (a stale one is never used), a cold cache is
filled with its bytes, and it computes what this code's own export computes (ONNX Runtime
on the demo's example inputs; real torch exports)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from parity.load import demos

REGENERATE = "regenerate them: python -m parity.load.demos"


def test_every_demo_ships_an_export_named_for_this_torch_and_onnx():
    shipped = {p.name for p in demos.SHIPPED_DIR.glob("*.onnx")}
    wanted = {f"{name}-{demos.demo_cache_key(name)}.onnx" for name in demos.DEMOS}
    assert shipped == wanted, REGENERATE


def test_a_cold_cache_gets_the_shipped_file_without_exporting(tmp_path, monkeypatch):
    monkeypatch.setenv(demos.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(demos, "export_demo", lambda demo: pytest.fail("exported"))
    path = demos.demo_onnx_path("broken")
    assert path.parent == tmp_path
    assert path.read_bytes() == (demos.SHIPPED_DIR / path.name).read_bytes()


def test_a_stale_shipped_file_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setenv(demos.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(demos, "DEMO_VERSION", demos.DEMO_VERSION + "-next")
    path = demos.demo_onnx_path("cnn")  # exported afresh: no shipped file has this key
    assert not (demos.SHIPPED_DIR / path.name).exists() and path.is_file()


@pytest.mark.parametrize("name", list(demos.DEMOS))
def test_the_shipped_export_computes_what_this_codes_export_computes(name, tmp_path):
    fresh = tmp_path / f"{name}.onnx"
    fresh.write_bytes(demos.export_demo(demos.get_demo(name)).SerializeToString())
    shipped = demos.SHIPPED_DIR / f"{name}-{demos.demo_cache_key(name)}.onnx"
    inputs = demos.get_demo(name).example_inputs()
    results = []
    for path in (shipped, fresh):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs, strict=True)}
        results.append(session.run(None, feeds))
    for got, want in zip(*results, strict=True):
        np.testing.assert_array_equal(got, want, err_msg=REGENERATE)
