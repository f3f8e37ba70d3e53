"""Parity's validation core: load a torch model and its ONNX export, run both, compare.

Nothing in this package imports Streamlit; the dashboard and the CLI both stand on it.
"""

__version__ = "0.1.0"
