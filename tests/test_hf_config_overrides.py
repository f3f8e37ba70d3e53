"""`--config-override KEY=VALUE` takes config fields only, typed as the field is (issue 23).

Values that do not fit the field (text for an integer, NaN, a list) used to reach torch as
strings and fail deep inside it; `__class__=1` was set on the config object.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from parity.cli import main  # noqa: E402
from parity.hf.loading import load_hf_model  # noqa: E402
from tests.helpers.hf_models import make_llama_dir  # noqa: E402


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> str:
    return make_llama_dir(tmp_path_factory.mktemp("llama_overrides"))


BAD = {
    "hidden_size=abc": "takes an integer",
    "hidden_size=nan": "takes an integer",
    "hidden_size=1.5": "takes an integer",
    "hidden_size=[1,2]": "takes an integer",
    "hidden_size=": "needs a value",
    "hidden_size=true": "takes an integer",
    "rms_norm_eps=NaN": "takes a finite number",
    "tie_word_embeddings=1": "takes true or false",
    "hidden_act=3": "takes a text",
    "__class__=1": "not a config field",
    "_name_or_path=x": "not a config field",
    "to_dict=1": "has no field 'to_dict'",
    "num_layerz=1": "has no field 'num_layerz'",
}


@pytest.mark.parametrize("override", list(BAD))
def test_a_value_that_does_not_fit_the_field_is_one_line_exit_2(override, llama_dir, capsys):
    argv = ["validate", "--model", f"hf:{llama_dir}", "--random-weights"]
    assert main([*argv, "--config-override", override]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("parity: error: --config-override"), err
    assert BAD[override] in err, err


def test_values_are_typed_as_the_field_is(llama_dir):
    overrides = {"num_hidden_layers": 1, "rms_norm_eps": 1, "tie_word_embeddings": False}
    loaded = load_hf_model(llama_dir, random_weights=True, config_overrides=overrides)
    config = loaded.config
    assert config.num_hidden_layers == 1 and len(loaded.model.model.layers) == 1
    assert type(config.rms_norm_eps) is float and config.rms_norm_eps == 1.0
    assert config.tie_word_embeddings is False
