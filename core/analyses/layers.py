"""--layers as an analysis: the same source's torch side and input sets with intermediate values
compared (parity.layers), or, ONNX against ONNX, every candidate's values against the
reference file's; never changes the outputs' verdict. One candidate against torch
(check_config). A dynamic int8 file's torch side computes what the file means (its weights,
its activations rounded: parity.analyses.quantization.dynamic_reference), so the layers and
the quantization findings tell one story."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from parity.analyses.interface import Analysis, AnalysisContext, noted
from parity.results import Status, ValidationRun
from parity.run.config import RunConfig


class Layers(Analysis):
    name = "layers"

    def wanted(self, config: RunConfig) -> bool:
        return config.layers or config.repro is not None

    def apply(self, run: ValidationRun, context: AnalysisContext) -> ValidationRun:
        if context.reference is not None:
            from parity.layers.onnx_reference_run import with_onnx_layers

            run = with_onnx_layers(
                run, context.config, context.reference, list(context.candidates), context.report
            )
        else:
            run = _against_torch(run, context)
        return _said_if_empty(run, self.name)


@contextlib.contextmanager
def _intended(config: RunConfig, side: Any, path: str) -> Iterator[str]:
    """A dynamic int8 file's layers are compared with torch computing what the file means
    (parity.analyses.quantization.dynamic_reference), where the quantization-aware
    reference is on; else torch as it is ("")."""
    module = getattr(getattr(side, "model", None), "module", None)
    if not config.quantized_reference or module is None:
        yield ""
        return
    from parity.analyses.quantization import dynamic_reference

    with dynamic_reference(path, module, side.scope_prefix) as said:
        yield said


def _said_if_empty(run: ValidationRun, name: str) -> ValidationRun:
    """No intermediate value compared on any candidate: the layers' own reason becomes the
    run's note (said among the findings), never a silent absence."""
    results = [c.layers for c in run.candidates if c.layers is not None]
    if any(r.matched or r.values for r in results):
        return run
    reasons = [n for r in results for n in r.notes]
    why = reasons[0] if reasons else "no intermediate value could be compared"
    return noted(run, name, why, done=False)


def _against_torch(run: ValidationRun, context: AnalysisContext) -> ValidationRun:
    from parity.analyses.approximation import intended
    from parity.layers.localise import localise_run

    candidate = context.lead_without_sessions()
    assert candidate is not None
    config = context.config
    side = context.source.torch_side()
    raised = {c.input_set for c in run.outputs if c.status is Status.ERROR}
    sets = tuple(s for s in run.input_sets if s.index not in raised)  # where ORT ran
    if not sets:
        from parity.layers.localise import not_compared

        why = "ONNX Runtime raised on every input set: no intermediate value to compare"
        works = next((f.dims for f in run.frozen if f.confirmed and f.dims), None)
        if works:  # the frozen search ran the file where it works: say where to compare
            sizes = ", ".join(f"{d}={v}" for d, v in works.items())
            why += f"; the file runs at {sizes}, the size it was frozen at: compare there"
        return run.with_layers({run.candidates[0].index: not_compared(why)})
    module = getattr(side.model, "module", None) if side is not None else None
    # torch as the file means it: its approximations, a dynamic int8 file's weights and rounding
    with (
        intended(run.candidates[0].approximation, module),
        _intended(config, side, candidate.path) as said,
    ):
        layers = localise_run(
            side,
            candidate.path,
            sets,
            candidate.signature,
            provider=candidate.provider,
            opt_level=candidate.opt_level,
            memory_mb=config.layers_memory_mb,
            confirm=config.layers_confirm,
            progress=lambda message: context.report("layers", message, None),
        )
    if said:
        layers = replace(layers, notes=(*layers.notes, said))
    model = side.model if side is not None else None
    if model is not None and run.ref_outputs:  # a quantized file: what to keep in float
        from parity.layers.qdq import torch_exclusions

        context.report("layers", "simulating exclusions from quantization", None)
        layers = torch_exclusions(layers, candidate, run, model)
    if raised:
        left = sorted(raised)
        note = (
            f"input set{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} left out: "
            "ONNX Runtime raised there (compared on the sets where the file runs)"
        )
        layers = replace(layers, notes=(note, *layers.notes))
    return replace(run.with_layers({run.candidates[0].index: layers}))
