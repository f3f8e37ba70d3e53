"""The Python API's errors (issue 23): ParityErrors, worded in its own keyword arguments.

A meta-device tensor has no data to compare: one line, not torch's bare NotImplementedError.
Core messages name CLI flags (`--dim`, `--seed`); called from `parity.validate`, the same
error names `dims=`, `seed=`, while the CLI keeps its flags.
"""

from __future__ import annotations

import pytest
import torch

import parity
from parity.cli import main
from parity.errors import InputError, ModelLoadError, ParityError, UsageError


@pytest.fixture(scope="module")
def tiny(model_zoo):
    return model_zoo.build("make_tiny")


def test_an_input_on_the_meta_device_is_an_input_error(tiny, tiny_artifacts):
    meta = torch.empty(2, 4, device="meta")
    with pytest.raises(InputError) as caught:
        parity.validate(tiny, tiny_artifacts.onnx, inputs={"x": meta})
    message = str(caught.value)
    assert "meta device" in message and "'x'" in message and "\n" not in message


def test_a_model_on_the_meta_device_is_one_line(tiny_artifacts):
    with pytest.raises(ModelLoadError, match="weight, bias on the meta device"):
        parity.validate(torch.nn.Linear(4, 3, device="meta"), tiny_artifacts.onnx)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"dims": {"zz": 3}}, "dims=zz: the ONNX inputs have no symbolic dim 'zz'"),
        ({"seed": -1}, "seed=-1: a seed must be an integer >= 0"),
    ],
)
def test_api_errors_name_keyword_arguments_not_flags(options, expected, tiny, tiny_artifacts):
    with pytest.raises(UsageError) as caught:
        parity.validate(tiny, tiny_artifacts.onnx, **options)
    message = str(caught.value)
    assert expected in message and "--" not in message, message


def test_the_cli_keeps_its_flags(model_zoo, tiny_artifacts, capsys):
    argv = ["validate", "--model", model_zoo.spec("make_tiny"), "--onnx", str(tiny_artifacts.onnx)]
    assert main([*argv, "--dim", "zz=3"]) == 2
    assert "--dim zz" in capsys.readouterr().err


def test_the_worded_error_is_still_the_same_parity_error_class(tiny, tiny_artifacts):
    with pytest.raises(ParityError) as caught:
        parity.validate(tiny, tiny_artifacts.onnx, dims={"zz": 3})
    assert caught.value.kind == "usage" and caught.value.message == str(caught.value)
