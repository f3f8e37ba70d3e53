"""Parity: see, exactly, where an ONNX export stops agreeing with its PyTorch model.

The public Python API is what this package exports; everything else is internal:

    from parity import validate, assert_export_close
    run = validate(model, onnx_program, inputs={"x": x})
    run.passed, run.failing, run.to_json(), run.write_html("report.html")

Nothing in this package imports Streamlit; the dashboard and the CLI stand on the same core
(`parity.pipeline.run_validation`), and importing it imports neither torch nor onnxruntime.
"""

from parity.api import ValidationRun, assert_export_close, validate
from parity.errors import (
    BudgetError,
    ExportError,
    ExpressionError,
    FieldError,
    InputError,
    Interrupted,
    ModelLoadError,
    ModelRunError,
    OnnxLoadError,
    OnnxRunError,
    OutputsUnwritten,
    ParityError,
    RunTimeout,
    SavedRunError,
    SignatureMismatch,
    StorageError,
    UsageError,
    WriteError,
)
from parity.tolerances import Tolerance, Tolerances
from parity.version import __version__

__all__ = [
    "BudgetError",
    "ExportError",
    "ExpressionError",
    "FieldError",
    "InputError",
    "Interrupted",
    "ModelLoadError",
    "ModelRunError",
    "SignatureMismatch",
    "OnnxLoadError",
    "OnnxRunError",
    "OutputsUnwritten",
    "ParityError",
    "RunTimeout",
    "SavedRunError",
    "Tolerance",
    "Tolerances",
    "StorageError",
    "UsageError",
    "ValidationRun",
    "WriteError",
    "__version__",
    "assert_export_close",
    "validate",
]
