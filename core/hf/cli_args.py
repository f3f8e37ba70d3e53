"""The `hf:DIR` flags of `parity validate` (the per-step table it prints: parity.hf.steps_text).

Importing this module never imports transformers, so `parity --help` works without the extra.
"""

from __future__ import annotations

import argparse

from parity.hf.options import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_PROMPT,
    HfOptions,
    parse_config_overrides,
)
from parity.path_flags import writes


def add_hf_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags that only `--model hf:DIR` uses."""
    group = parser.add_argument_group(
        "Hugging Face models (--model hf:DIR): an LLM is validated on every generate() "
        "step, an encoder on one forward"
    )
    group.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="TEXT",
        help=f"prompt; repeat for a left-padded batch (default {DEFAULT_PROMPT!r})",
    )
    group.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        metavar="N",
        help="tokens generate() adds greedily: N forward calls, 1 prefill + N-1 decode "
        f"steps (default {DEFAULT_MAX_NEW_TOKENS})",
    )
    group.add_argument(
        "--random-weights",
        action="store_true",
        help="build the model from its config with random weights (weights are not read)",
    )
    group.add_argument(
        "--config-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change the config before building the model, e.g. num_hidden_layers=1",
    )
    group.add_argument(
        "--task",
        default=None,
        metavar="TASK",
        help="the task (Optimum's names: text-classification, token-classification, "
        "question-answering, image-classification, object-detection, feature-extraction, "
        "text-generation, ...) whose class builds the model (default: config.architectures)",
    )
    group.add_argument(
        "--no-generation",
        action="store_true",
        help="causal LMs: skip free-running generation (ONNX Runtime generating greedily on "
        "its own after the steps, compared token by token with torch's generate())",
    )
    writes(
        group.add_argument(
            "--export-path",
            metavar="FILE",
            default=None,
            help="where Parity's own export goes when --onnx is not given (default: a temp dir)",
        )
    )


def hf_flags_given(args: argparse.Namespace) -> bool:
    """Whether any flag that only an hf: model uses was given (so another model refuses it)."""
    return bool(
        getattr(args, "prompt", None)
        or getattr(args, "max_new_tokens", None) is not None
        or getattr(args, "random_weights", False)
        or getattr(args, "config_override", None)
        or getattr(args, "export_path", None)
        or getattr(args, "task", None)
        or getattr(args, "no_generation", False)
    )


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
