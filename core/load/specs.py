"""The model text of a run, by kind: ``demo:NAME``, ``hf:DIR``, ``reference:FILE`` (stored
reference outputs, no model), ``onnx:FILE`` (a reference ONNX file) or a path /
``FILE.py:CALLABLE``. Built and read only here."""

from __future__ import annotations

import re
from pathlib import Path

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


TRUST_COMMANDS = ("parity dashboard --trust-code", "streamlit run app.py -- --trust-code")
"""How a dashboard is started so that it runs code-bearing models."""

CALLABLE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def code_words(spec: str) -> str | None:
    """What makes `spec` code that runs when loaded, in words ("a Python factory",
    "TorchScript" by its suffix), or None: a form can say it before anything loads."""
    spec = spec.strip()
    if demo_name(spec) is not None:
        return None
    if split_factory(spec) is not None:
        return "a Python factory"
    if Path(spec).suffix.lower() in (".pt", ".pth", ".ts", ".jit"):
        return "TorchScript"
    return None


def split_factory(spec: str) -> tuple[str, str] | None:
    """("FILE.py" or "package.module", "CALLABLE") when the spec names a factory."""
    if ":" not in spec:
        return None
    target, _, attr = spec.rpartition(":")
    if not target or not CALLABLE_RE.match(attr):
        return None
    if target.endswith(".py") or CALLABLE_RE.match(target):
        return target, attr
    return None
