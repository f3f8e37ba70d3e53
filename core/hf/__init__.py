"""Hugging Face models (`--model hf:DIR`): validate an export on every generate() step.

Importing this package imports neither torch nor transformers (they load when a run
starts), so the rest of Parity works without the `hf` extra.
Entry point: `run_hf_validation("hf:DIR", options=HfOptions(...), onnx=None | "FILE")`.
"""

from core.hf.options import HF_PREFIX, INSTALL_HINT, HfOptions, is_hf_spec, options_from_text
from core.hf.validate import run_hf_validation

__all__ = [
    "HF_PREFIX",
    "INSTALL_HINT",
    "HfOptions",
    "is_hf_spec",
    "options_from_text",
    "run_hf_validation",
]
