"""`--layers` for ONNX against ONNX in a validation run: every candidate against the
reference file (parity.layers.onnx_vs_onnx), and, for a quantized or a float16/bfloat16
candidate, what to keep in higher precision (parity.layers.qdq, parity.layers.fp16).

Never raises and never changes the outputs' verdict: whatever stopped it is said in the
result's notes. Each candidate's result is its `CandidateRun.layers` (what the Layers page's
Candidate selector shows); the first's is the run's `layers`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from parity.layers.localise import not_compared
from parity.layers.result import LayersResult
from parity.results import InputSet, ValidationRun
from parity.run.config import RunConfig
from parity.run.progress import ProgressReporter

if TYPE_CHECKING:
    from parity.run.candidates import Candidate


def layers_for(
    reference: Candidate,
    candidate: Candidate,
    input_sets: Sequence[InputSet],
    config: RunConfig,
    say: Callable[[str], None],
) -> LayersResult:
    """One candidate's layers against the reference (both parity.run.candidates.Candidate)."""
    from parity.errors import describe_error
    from parity.layers.onnx_vs_onnx import localise_onnx
    from parity.layers.precision import precision_findings

    try:
        recorder, on_values = _recorder(reference, candidate)
        result = localise_onnx(
            reference.path,
            candidate.path,
            input_sets,
            reference_provider=reference.provider,
            reference_opt_level=reference.opt_level,
            provider=candidate.provider,
            opt_level=candidate.opt_level,
            memory_mb=config.layers_memory_mb,
            progress=say,
            on_values=on_values,
        )
        return precision_findings(result, reference, candidate, input_sets, recorder, config)
    except Exception as exc:  # the outputs' verdict stands; say why layers could not
        return not_compared(f"localisation stopped: {describe_error(exc)[1]}")


def _recorder(reference: Candidate, candidate: Candidate) -> tuple[Any, Any]:
    from parity.layers.precision import Recorder

    recorder = Recorder()
    return recorder, recorder.on_values


def with_onnx_layers(
    run: ValidationRun,
    config: RunConfig,
    reference: Candidate,
    candidates: Sequence[Candidate | None],
    report: ProgressReporter,
) -> ValidationRun:
    """The run with every loaded candidate's layers against the reference."""
    t0 = time.perf_counter()
    results: dict[int, LayersResult] = {}
    infos = run.infos
    for info, candidate in zip(infos, candidates, strict=False):
        if candidate is None or info.error is not None:
            results[info.index] = not_compared(f"{info.label} could not be run: not compared")
            continue
        where = f" ({info.label})" if len(infos) > 1 else ""

        def say(message: str, where: str = where) -> None:
            report("layers", message + where, None)

        results[info.index] = layers_for(reference, candidate, run.input_sets, config, say)
    timings = {**run.timings, "layers": time.perf_counter() - t0}
    return replace(run.with_layers(results), timings=timings)
