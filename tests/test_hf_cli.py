"""The hf: flags, and the one-line cause when the `hf` extra (transformers) is missing."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from parity.cli.definition import HF
from parity.cli.hf_args import hf_options_from_args
from parity.errors import ModelLoadError, UsageError
from parity.run.hf_options import DEFAULT_PROMPT, INSTALL_HINT


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    HF.add_to(parser)
    return parser.parse_args(argv)


def test_defaults_give_the_seed_prompt_and_three_new_tokens():
    options = hf_options_from_args(_parse([]))
    assert options.prompts == (DEFAULT_PROMPT,)
    assert options.max_new_tokens == 3
    assert options.random_weights is False and options.config_overrides == {}


def test_repeated_prompts_form_a_batch_and_overrides_are_typed():
    args = _parse(
        [
            "--prompt",
            "a b",
            "--prompt",
            "c",
            "--max-new-tokens",
            "5",
            "--random-weights",
            "--config-override",
            "num_hidden_layers=1",
            "--config-override",
            "hidden_act=gelu",
        ]
    )
    options = hf_options_from_args(args)
    assert options.prompts == ("a b", "c")
    assert options.max_new_tokens == 5 and options.random_weights
    assert options.config_overrides == {"num_hidden_layers": 1, "hidden_act": "gelu"}


def test_malformed_override_is_a_usage_error():
    with pytest.raises(UsageError, match="KEY=VALUE"):
        hf_options_from_args(_parse(["--config-override", "=1"]))


def test_without_transformers_hf_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now raises ImportError
    from parity.pipeline import RunConfig, run_validation

    with pytest.raises(ModelLoadError) as info:
        run_validation(RunConfig(model=f"hf:{tmp_path}", onnx=None))
    message = str(info.value)
    assert INSTALL_HINT in message and "\n" not in message


def test_cli_without_transformers_exits_2_with_one_line(tmp_path):
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from parity.cli import main\n"
        f"sys.exit(main(['validate', '--model', 'hf:{tmp_path}']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "onnx-parity[hf]" in lines[0]


def test_cli_help_works_without_transformers():
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from parity.cli import main\n"
        "main(['validate', '--help'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "--max-new-tokens" in proc.stdout and "--config-override" in proc.stdout
