"""Every read through the one safe reader (issue 49): a file swapped for a FIFO while a run
uses it is refused in one line or never read again; it never hangs the run. Real runs of a
tiny exported model with layers compared, a real FIFO, a real saved run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from parity.errors import OnnxLoadError
from parity.load.onnx_read import read_onnx

SWAP_DURING_LAYERS = textwrap.dedent(
    """
    import os, sys
    from parity.errors import ParityError
    from parity.pipeline import RunConfig, run_validation

    pt2, onnx = sys.argv[1], sys.argv[2]
    swapped = []

    def progress(event):
        if event.step == "layers" and not swapped:  # the ONNX file is loaded: swap it
            os.unlink(onnx)
            os.mkfifo(onnx)
            swapped.append(event.message)

    try:
        run = run_validation(RunConfig(model=pt2, onnx=onnx, layers=True), progress=progress)
        print("finished", run.verdict, bool(swapped))
    except ParityError as exc:
        print("refused", bool(swapped), exc.message)
    """
)


def test_an_onnx_file_swapped_for_a_fifo_during_layers_does_not_hang(tmp_path, tiny_artifacts):
    pt2, onnx = tmp_path / "m.pt2", tmp_path / "m.onnx"
    shutil.copy(tiny_artifacts.pt2, pt2)
    shutil.copy(tiny_artifacts.onnx, onnx)
    done = subprocess.run(
        [sys.executable, "-c", SWAP_DURING_LAYERS, str(pt2), str(onnx)],
        capture_output=True,
        text=True,
        timeout=300,  # the unsafe reader waited for a writer forever
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip().splitlines()[-1]
    assert Path(onnx).is_fifo()
    assert said.startswith(("finished", "refused True")), said
    if said.startswith("refused"):
        assert "named pipe" in said, said


def test_read_onnx_refuses_a_fifo_at_once(tmp_path):
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    result: list[str] = []

    def read() -> None:
        try:
            read_onnx(fifo)
        except OnnxLoadError as exc:
            result.append(exc.message)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "read_onnx blocked on a FIFO"
    assert result and "named pipe" in result[0], result


def test_a_saved_runs_big_arrays_are_mapped_from_the_descriptor_opened_once(tmp_path):
    """The mapped (big) member is read through the descriptor the hash was checked on: the
    path swapped for a FIFO after the open is never opened again."""
    import torch

    from parity.api import validate
    from parity.reports import saved_run as sr

    model = torch.nn.Identity()
    x = np.linspace(-1, 1, 400_000, dtype=np.float32).reshape(1, -1)  # 1.6 MB: mapped
    onnx_path = tmp_path / "id.onnx"
    torch.onnx.export(
        model, (torch.from_numpy(x),), str(onnx_path), dynamo=False,
        input_names=["x"], output_names=["y"],
    )  # fmt: skip
    run = validate(model, str(onnx_path), inputs={"x": x})
    path = sr.save_run(run, tmp_path / "big.parity.npz")
    with sr._open_file(path) as fh, sr._open_zip(fh, path) as zf:
        manifest = sr._read_manifest(zf, path)
        members = sr._locate_members(zf, fh, manifest, path)
        big = [m for m in members.values() if m.size >= sr._SMALL_MEMBER]
        assert big, "no member big enough to be mapped"
        os.unlink(path)
        os.mkfifo(path)  # the path is now a FIFO; the open descriptor still the file
        result: list[np.ndarray] = []
        reader = threading.Thread(
            target=lambda: result.append(
                sr._read_array(fh, big[0], path, manifest["members"][big[0].name])
            ),
            daemon=True,
        )
        reader.start()
        reader.join(timeout=30)
        assert not reader.is_alive(), "the mapped member re-opened the path (a FIFO)"
    assert np.array_equal(result[0].reshape(-1), x.reshape(-1))


@pytest.mark.parametrize("external", [False, True])
def test_read_onnx_reads_what_onnx_load_reads(tiny_artifacts, external):
    import onnx

    assert read_onnx(tiny_artifacts.onnx, external_data=external) == onnx.load(
        str(tiny_artifacts.onnx), load_external_data=external
    )
