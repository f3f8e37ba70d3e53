"""Parity: see, exactly, where an ONNX export stops agreeing with its PyTorch model.

The public Python API is what this package exports; everything else is internal:

    from core import validate, assert_export_close
    run = validate(model, onnx_program, inputs={"x": x})
    run.passed, run.failing, run.to_json(), run.write_html("report.html")

Nothing in this package imports Streamlit; the dashboard and the CLI stand on the same core
(`core.pipeline.run_validation`), and importing it imports neither torch nor onnxruntime.
"""

from core.api import ValidationRun, assert_export_close, validate
from core.errors import (
    ExportError,
    InputError,
    ModelLoadError,
    ModelRunError,
    OnnxLoadError,
    OnnxRunError,
    ParityError,
    SavedRunError,
    UsageError,
    WriteError,
)
from core.tolerances import Tolerance, Tolerances
from core.version import __version__

__all__ = [
    "ExportError",
    "InputError",
    "ModelLoadError",
    "ModelRunError",
    "OnnxLoadError",
    "OnnxRunError",
    "ParityError",
    "SavedRunError",
    "Tolerance",
    "Tolerances",
    "UsageError",
    "ValidationRun",
    "WriteError",
    "__version__",
    "assert_export_close",
    "validate",
]
