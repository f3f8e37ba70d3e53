"""Every source hands --layers its torch side through the Source protocol (`torch_side()`),
or says in words why it has none; the loop never reaches into a source for its model."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.hf.seq2seq_source import Seq2SeqSource
from parity.hf.source import HfSource
from parity.sources import NO_TORCH_MODEL, Source, TorchSide
from parity.sources.onnx_reference import OnnxReferenceSource
from parity.sources.stored import StoredSource
from parity.sources.torch_inputs import TorchSource

CORE = Path(__file__).resolve().parents[1] / "core"


@pytest.mark.parametrize(
    "source", [TorchSource, StoredSource, OnnxReferenceSource, HfSource, Seq2SeqSource]
)
def test_every_source_declares_its_torch_side(source) -> None:
    assert callable(getattr(source, "torch_side", None))
    assert "torch_side" in Source.__dict__


def test_the_loop_asks_the_protocol_not_the_source_s_attributes() -> None:
    text = (CORE / "pipeline.py").read_text() + (CORE / "analyses" / "layers.py").read_text()
    assert "source.torch_side()" in text
    assert "torch_model" not in text


def test_a_source_without_a_model_says_why() -> None:
    from parity.layers.localise import localise_run

    result = localise_run(TorchSide(None, missing=NO_TORCH_MODEL), "unused.onnx", (), None)
    assert result.matched == 0 and result.notes == (NO_TORCH_MODEL,)
