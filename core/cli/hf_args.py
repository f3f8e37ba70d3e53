"""The `hf:DIR` flags of `parity validate` read into HfOptions (the flags themselves are
parity.cli.definition.HF; the per-step table a run prints: parity.hf.steps_text).

Importing this module never imports transformers, so `parity --help` works without the extra.
"""

from __future__ import annotations

import argparse

from parity.cli.definition import HF
from parity.run.hf_options import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_PROMPT,
    HfOptions,
    parse_config_overrides,
)


def hf_flags_given(args: argparse.Namespace) -> bool:
    """Whether any flag that only an hf: model uses was given (so another model refuses it)."""
    for item in HF.flags:
        value = getattr(args, item.dest, None)
        if value is not None and value is not False and value != [] and value != "":
            return True
    return False


def hf_options_from_args(args: argparse.Namespace) -> HfOptions:
    """HfOptions from parsed flags; UsageError for a malformed override or count."""
    prompts = tuple(getattr(args, "prompt", None) or ()) or (DEFAULT_PROMPT,)
    max_new_tokens = getattr(args, "max_new_tokens", None)
    return HfOptions(
        prompts=prompts,
        max_new_tokens=DEFAULT_MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens,
        random_weights=bool(getattr(args, "random_weights", False)),
        config_overrides=parse_config_overrides(getattr(args, "config_override", None) or ()),
        export_path=getattr(args, "export_path", None),
        task=getattr(args, "task", None),
        generation=not getattr(args, "no_generation", False),
    )
