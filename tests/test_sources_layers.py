"""Every source hands --layers its torch side through the Source protocol (`torch_side()`),
or says in words why it has none; the loop never reaches into a source for its model."""

from __future__ import annotations

import pytest

from parity.hf.seq2seq_source import Seq2SeqSource
from parity.hf.source import HfSource
from parity.sources import NO_TORCH_MODEL, Source, TorchSide
from parity.sources.onnx_reference import OnnxReferenceSource
from parity.sources.stored import StoredSource
from parity.sources.torch_inputs import TorchSource


@pytest.mark.parametrize(
    "source", [TorchSource, StoredSource, OnnxReferenceSource, HfSource, Seq2SeqSource]
)
def test_every_source_answers_torch_side_itself(source) -> None:
    """The protocol's own `torch_side` is a stub that returns None: a source that left it
    unanswered would hand --layers nothing, and no words for why."""
    assert source.torch_side is not Source.torch_side


@pytest.mark.parametrize("source", [StoredSource, OnnxReferenceSource])
def test_a_source_with_no_torch_model_says_so_in_words(source) -> None:
    side = source.torch_side(object.__new__(source))  # neither reads the source's state
    assert side.model is None and "torch model" in side.missing


def test_the_loop_asks_the_source_for_its_torch_side(tmp_path, model_zoo, tiny_artifacts) -> None:
    """--layers through the pipeline: a torch run compares the model's values; the same cases
    from a stored reference (no model) compare none and say why, in the source's words."""
    from parity.pipeline import run_validation
    from parity.run.config import RunConfig
    from parity.run.reference import save_input_feeds, save_reference_outputs

    live = run_validation(
        RunConfig(model=model_zoo.spec("make_tiny"), onnx=str(tiny_artifacts.onnx), layers=True)
    )
    assert live.layers is not None and live.layers.matched > 0
    offline = run_validation(
        RunConfig(
            model=None,
            onnx=str(tiny_artifacts.onnx),
            input_files=tuple(str(p) for p in save_input_feeds(tmp_path, live)),
            reference_file=str(save_reference_outputs(tmp_path / "ref.npz", live)),
            layers=True,
        )
    )
    assert offline.layers is not None and offline.layers.matched == 0
    assert NO_TORCH_MODEL in offline.layers.notes


def test_a_source_without_a_model_says_why() -> None:
    from parity.layers.localise import localise_run

    result = localise_run(TorchSide(None, missing=NO_TORCH_MODEL), "unused.onnx", (), None)
    assert result.matched == 0 and result.notes == (NO_TORCH_MODEL,)
