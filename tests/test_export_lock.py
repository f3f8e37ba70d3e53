"""Exports from many threads (dashboard sessions) or processes sharing a cache, at once.

torch.export is not thread-safe in one process: before the export lock, six sessions
opening demos on a cold cache broke most of their exports.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
import torch

from parity.load import demos
from parity.load.export_lock import LOCK_NAME, export_lock


def test_concurrent_demo_exports_on_a_cold_cache_all_succeed(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(demos.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(demos.SHIPPED_ENV, "0")  # real exports, not the shipped files
    names = ["cnn", "broken", "cnn", "transformer", "broken", "cnn"]
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        paths = list(pool.map(demos.demo_onnx_path, names))
    for name, path in zip(names, paths, strict=True):
        assert path.is_file() and path.name.startswith(f"{name}-")
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    # One file per demo, no temp files left behind; the lock file is the only extra.
    expected = {p.name for p in paths} | {LOCK_NAME}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)


def test_demo_builds_in_threads_get_the_same_weights() -> None:
    """Builders seed the global RNG; interleaved draws would give each thread other weights."""
    with ThreadPoolExecutor(max_workers=8) as pool:  # unlocked, 8 threads differed 4 times in 5
        built = list(pool.map(lambda _: demos.get_demo("transformer").build(), range(16)))
    first = built[0].state_dict()
    for model in built[1:]:
        for key, value in model.state_dict().items():
            assert torch.equal(value, first[key]), key


def test_the_file_lock_keeps_another_process_out(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        f"""
        import fcntl, os, sys
        fd = os.open({str(tmp_path / LOCK_NAME)!r}, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit(3)
        sys.exit(0)
        """
    )
    with export_lock(tmp_path), export_lock(tmp_path):  # reentrant in one thread
        held = subprocess.run([sys.executable, "-c", probe], check=False).returncode
    free = subprocess.run([sys.executable, "-c", probe], check=False).returncode
    assert (held, free) == (3, 0)


def test_pt2_archives_load_in_threads(tiny_artifacts) -> None:
    """torch's deserializer keeps global state; loads run under the export lock."""
    from parity.load.torch_model import load_torch_model

    with ThreadPoolExecutor(max_workers=4) as pool:
        models = list(pool.map(lambda _: load_torch_model(str(tiny_artifacts.pt2)), range(8)))
    x = torch.randn(3, 4)
    first = models[0].module(x)
    for model in models[1:]:
        assert torch.equal(model.module(x), first)
