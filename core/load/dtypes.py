"""Element types by their one name in Parity (numpy's: "float32", "int64", "bool", ...), read
from an ONNX graph's enum or from ONNX Runtime's "tensor(float)" strings."""

from __future__ import annotations

import numpy as np

__all__ = ["FLOAT_NAMES", "INT_NAMES", "from_onnx_elem_type", "from_ort_type", "numpy_dtype"]

# (onnx.TensorProto enum value, ONNX Runtime's name inside "tensor(...)", Parity's name)
_TABLE = (
    (1, "float", "float32"),
    (11, "double", "float64"),
    (10, "float16", "float16"),
    (16, "bfloat16", "bfloat16"),
    (9, "bool", "bool"),
    (3, "int8", "int8"),
    (5, "int16", "int16"),
    (6, "int32", "int32"),
    (7, "int64", "int64"),
    (2, "uint8", "uint8"),
    (4, "uint16", "uint16"),
    (12, "uint32", "uint32"),
    (13, "uint64", "uint64"),
    (14, "complex64", "complex64"),
    (15, "complex128", "complex128"),
    (8, "string", "str"),
)
_BY_ELEM = {elem: name for elem, _, name in _TABLE}
_BY_ORT = {f"tensor({ort})": name for _, ort, name in _TABLE}

FLOAT_NAMES = ("float16", "float32", "float64", "bfloat16")
INT_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def from_onnx_elem_type(elem_type: int) -> str | None:
    """The name of an ONNX ``TensorProto`` element type; None for types outside the table."""
    return _BY_ELEM.get(elem_type)


def from_ort_type(ort_type: str) -> str:
    """The name of an ONNX Runtime type string (``tensor(float)``); unknown ones unchanged."""
    return _BY_ORT.get(ort_type, ort_type)


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a name (bfloat16 from ml_dtypes: numpy has none of its own)."""
    if name == "bfloat16":
        import ml_dtypes  # onnx depends on it

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
