"""The one place that builds ONNX Runtime sessions and decides their SessionOptions.

Outputs, intermediate values, confirmation cuts, QDQ bypass trials and provider-precision
probes all run through `open_session`, so a choice about sessions (log severity, the memory
arena, where external weights are read from, thread counts) is made once and holds for every
run. Errors are ONNX Runtime's own: each caller turns them into its one line, which names
what it was doing. Inside a run with a time limit (`Deadline.active`, set by
parity.pipeline.run_validation: the CLI's --timeout, the dashboard's time limit, the API's
timeout=) a setup still going at the deadline is abandoned: RunTimeout, while ONNX Runtime
finishes it in a background thread (it cannot be stopped).

Contract:
ORT_OPT_LEVELS = ("disable", "basic", "extended", "all")
open_session(model: path | bytes, *, provider, opt_level="all", cpu_arena=True,
    external_folder=None, optimized_path=None, config=(), intra_op_threads=None)
    -> onnxruntime.InferenceSession
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from parity.limits.deadline import current as current_deadline
from parity.load.quiet import apply_ort_default_severity, ort_severity

if TYPE_CHECKING:
    import onnxruntime

ORT_OPT_LEVELS = ("disable", "basic", "extended", "all")


def open_session(
    model: str | os.PathLike[str] | bytes,
    *,
    provider: str = "CPUExecutionProvider",
    opt_level: str = "all",
    cpu_arena: bool = True,
    external_folder: str | os.PathLike[str] | None = None,
    optimized_path: str | os.PathLike[str] | None = None,
    config: Iterable[tuple[str, str]] = (),
    intra_op_threads: int | None = None,
) -> onnxruntime.InferenceSession:
    """An ONNX Runtime session over a file (or a serialised model) on one provider.

    `external_folder`: where a serialised model's external weights are read from (bytes
    have no folder of their own; the weights stay in their files, mapped, never copied).
    `cpu_arena=False` for sessions whose outputs vary in size from run to run: the arena
    keeps, and grows in powers of two, the most any run needed. `optimized_path`: ONNX
    Runtime writes the graph it ran there. `config`: further session config entries.
    """
    import onnxruntime as ort

    if opt_level not in ORT_OPT_LEVELS:
        raise ValueError(f"unknown ORT optimisation level {opt_level!r}")
    g = ort.GraphOptimizationLevel
    levels = [g.ORT_DISABLE_ALL, g.ORT_ENABLE_BASIC, g.ORT_ENABLE_EXTENDED, g.ORT_ENABLE_ALL]
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[ORT_OPT_LEVELS.index(opt_level)]
    options.log_severity_level = ort_severity()  # ORT's own lines would precede Parity's one
    apply_ort_default_severity()
    if not cpu_arena:
        options.enable_cpu_mem_arena = False
    if intra_op_threads is not None:
        options.intra_op_num_threads = int(intra_op_threads)
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    if external_folder is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(external_folder)
        )
    for key, value in config:
        options.add_session_config_entry(key, value)
    source = model if isinstance(model, bytes) else str(Path(model))

    def make() -> onnxruntime.InferenceSession:
        return ort.InferenceSession(source, sess_options=options, providers=[provider])

    deadline = current_deadline()  # the run's time limit covers the setup (parity.limits.deadline)
    if deadline is None:
        return make()
    return deadline.call(make, "ONNX Runtime's session setup")


_DEFAULT_DOMAIN_OPS: frozenset[str] | None = None


def ort_default_domain_ops() -> frozenset[str]:
    """The op types this ONNX Runtime registers in the default domain (ONNX's and its own,
    such as SimplifiedLayerNormalization), read once from its schema list."""
    global _DEFAULT_DOMAIN_OPS
    if _DEFAULT_DOMAIN_OPS is None:
        try:
            from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

            schemas = ort_c.get_all_operator_schema()
        except Exception:  # a build without its schema list: nothing is taken on trust
            schemas = []
        _DEFAULT_DOMAIN_OPS = frozenset(s.name for s in schemas if s.domain in ("", "ai.onnx"))
    return _DEFAULT_DOMAIN_OPS
