"""Hugging Face LLMs (`--model hf:DIR`): validate an export on every generate() step.

transformers is imported only when a run starts, so the rest of Parity works without the
`hf` extra. Entry point: `run_hf_validation(model, *, options=HfOptions(...), onnx=...)`.
"""

from core.hf.options import HF_PREFIX, INSTALL_HINT, HfOptions, is_hf_spec


def run_hf_validation(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - thin lazy re-export
    """See core.hf.validate.run_hf_validation."""
    from core.hf.validate import run_hf_validation as run

    return run(*args, **kwargs)


__all__ = ["HF_PREFIX", "INSTALL_HINT", "HfOptions", "is_hf_spec", "run_hf_validation"]
