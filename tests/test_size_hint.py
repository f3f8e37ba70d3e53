"""Generated input sets start at the image size the model states (issue 60: a 224 model was
validated at 32 and 64): timm's img_size attribute, a Hugging Face config.image_size; the
user's --dim still wins, and a model that states none keeps the defaults."""

from __future__ import annotations

import warnings

import pytest
import torch

from parity import validate
from parity.run.size_hint import image_size


class Stated(torch.nn.Module):
    """A conv net that says its size, as timm's models do (PatchEmbed.img_size)."""

    def __init__(self, size=None) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        if size is not None:
            self.img_size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    path = tmp_path_factory.mktemp("size_hint") / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Stated().eval(), (torch.randn(1, 3, 48, 40),), str(path), dynamo=False,
            input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        )  # fmt: skip
    return str(path)


def _sizes(run) -> list[tuple[int, int]]:
    return [tuple(s.feeds["x"].shape[2:]) for s in run.input_sets]


def test_sets_start_at_the_size_the_model_states(export) -> None:
    torch.manual_seed(0)
    run = validate(Stated((48, 40)).eval(), export)
    assert _sizes(run) == [(48, 40), (64, 48)]  # grown by 16 and 8, as any set 0 is
    torch.manual_seed(0)
    assert _sizes(validate(Stated().eval(), export)) == [(32, 32), (64, 64)]  # none stated
    torch.manual_seed(0)
    given = validate(Stated((48, 40)).eval(), export, dims={"height": 24})
    assert _sizes(given)[0] == (24, 40)  # the user's dim wins, the other comes from the model


def test_the_size_is_read_from_what_models_carry() -> None:
    class Hf(torch.nn.Module):
        config = type("Config", (), {"image_size": 224})()

    class Timm(torch.nn.Module):
        pretrained_cfg = {"input_size": (3, 256, 192)}

    assert image_size(Hf()) == (224, 224) and image_size(Timm()) == (256, 192)
    assert image_size(torch.nn.Linear(2, 2)) is None


def test_a_model_built_at_another_size_than_its_pretrained_config_says_is_read_as_built() -> None:
    """timm.create_model(..., img_size=32) keeps pretrained_cfg's (3, 224, 224): the patch
    embedding's img_size is the size the model was built (and exported) at."""

    class PatchEmbed(torch.nn.Module):
        img_size = (32, 32)

    class Vit(torch.nn.Module):
        pretrained_cfg = {"input_size": (3, 224, 224)}
        default_cfg = pretrained_cfg

        def __init__(self) -> None:
            super().__init__()
            self.patch_embed = PatchEmbed()

    assert image_size(Vit()) == (32, 32)
