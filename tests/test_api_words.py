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


def test_an_error_names_its_setting_and_each_front_end_words_it():
    """Issue 38: the setting is a field, not a flag in the text; no front end rewords."""
    from parity.settings import Front, Mention, Setting

    error = UsageError("a seed must be an integer >= 0", setting=Setting("seed", "-1"))
    assert error.body == ("a seed must be an integer >= 0",)
    assert error.message == "--seed -1: a seed must be an integer >= 0"  # the CLI's, as before
    assert error.words(Front.API) == "seed=-1: a seed must be an integer >= 0"
    assert error.words(Front.DASHBOARD) == "“Seed” -1: a seed must be an integer >= 0"
    feeds = Mention("input_files", "F.npz", placeholder=True)
    mentioned = UsageError(("needs the feeds (", feeds, ")"), setting=Setting("reference_file"))
    assert mentioned.message == "--reference needs the feeds (--inputs F.npz)"
    assert mentioned.words(Front.API) == "reference needs the feeds (inputs=F.npz)"
    assert mentioned.words(Front.DASHBOARD) == (
        "“Stored reference outputs” needs the feeds (“Your own feeds”)"
    )


def test_every_api_keyword_in_the_settings_table_is_a_keyword_of_validate():
    import inspect

    from parity.settings import SETTINGS

    keywords = inspect.signature(parity.validate).parameters
    named = {w.keyword for w in SETTINGS.values() if w.keyword is not None}
    assert named <= set(keywords), named - set(keywords)
    assert len({w.flag for w in SETTINGS.values()}) == len(SETTINGS)  # one setting per flag


def test_a_setting_error_survives_pickling_in_its_words():
    """A sweep's worker sends its error back pickled: the setting comes with it."""
    import pickle

    from parity.limits.budget import parse_size
    from parity.settings import Front

    with pytest.raises(UsageError) as caught:
        parse_size("1x")
    back = pickle.loads(pickle.dumps(caught.value))
    assert back.message == "--max-memory '1x': expected a size such as 512M, 16G or 1T"
    assert back.words(Front.API) == "max_memory='1x': expected a size such as 512M, 16G or 1T"


def test_a_memory_refusal_in_the_api_names_max_memory_with_a_value(tiny, tiny_artifacts):
    with pytest.raises(parity.BudgetError) as caught:
        parity.validate(tiny, tiny_artifacts.onnx, input_sets=64, dims={"batch": 4096},
                        max_memory="1K")  # fmt: skip
    message = str(caught.value)
    assert "raise the budget with max_memory=" in message and "--" not in message, message


def test_validate_and_assert_export_close_take_the_options_declared_once():
    """Their keywords are ValidateOptions' keys (in order, with DEFAULTS' values), and a
    keyword that is not one is Python's TypeError naming the function called."""
    import inspect

    from parity.api import DEFAULTS, ValidateOptions

    names = list(ValidateOptions.__annotations__)
    assert set(names) == ValidateOptions.__optional_keys__ == set(DEFAULTS)
    for function in (parity.validate, parity.assert_export_close):
        params = list(inspect.signature(function).parameters.values())
        assert [p.name for p in params] == ["model", "onnx", *names]
        assert [p.default for p in params[2:]] == [DEFAULTS[n] for n in names]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:])
    for function in (parity.validate, parity.assert_export_close):
        name = function.__name__
        with pytest.raises(
            TypeError, match=rf"^{name}\(\) got an unexpected keyword .*'input_set'"
        ):
            function(None, input_set=2)
