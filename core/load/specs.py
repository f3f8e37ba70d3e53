"""The model text of a run, by kind: ``demo:NAME``, ``hf:DIR``, ``reference:FILE`` (stored
reference outputs, no model), ``onnx:FILE`` (a reference ONNX file) or a path /
``FILE.py:CALLABLE``. Built and read only here."""

from __future__ import annotations

__all__ = [
    "DEMO_PREFIX",
    "HF_PREFIX",
    "REFERENCE_PREFIX",
    "demo_name",
    "demo_spec",
    "hf_spec",
    "is_hf_spec",
    "onnx_reference_path",
    "onnx_reference_spec",
    "reference_path",
    "reference_spec",
]

DEMO_PREFIX = "demo:"
HF_PREFIX = "hf:"
REFERENCE_PREFIX = "reference:"
ONNX_REFERENCE_PREFIX = "onnx:"  # ONNX against ONNX: the reference file is the "model"


def demo_spec(name: str) -> str:
    return DEMO_PREFIX + name


def demo_name(spec: str | None) -> str | None:
    """NAME of a ``demo:NAME`` spec; None for any other spec."""
    return spec.removeprefix(DEMO_PREFIX) if spec and spec.startswith(DEMO_PREFIX) else None


def hf_spec(directory: str) -> str:
    return HF_PREFIX + directory


def is_hf_spec(spec: str | None) -> bool:
    return spec is not None and spec.startswith(HF_PREFIX)


def reference_spec(path: str) -> str:
    return REFERENCE_PREFIX + path


def reference_path(spec: str | None) -> str | None:
    """FILE of a ``reference:FILE`` model text; None for any other."""
    if spec and spec.startswith(REFERENCE_PREFIX):
        return spec.removeprefix(REFERENCE_PREFIX)
    return None


def onnx_reference_spec(path: str) -> str:
    return ONNX_REFERENCE_PREFIX + path


def onnx_reference_path(spec: str | None) -> str | None:
    """FILE of an ``onnx:FILE`` model text (a reference ONNX file); None for any other."""
    if spec and spec.startswith(ONNX_REFERENCE_PREFIX):
        return spec.removeprefix(ONNX_REFERENCE_PREFIX)
    return None
