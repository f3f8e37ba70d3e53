"""Export a causal LM for one decode step with torch.onnx.export(dynamo=True).

Passing a `DynamicCache` as an export input fails in current versions (unsupported pytree
type; transformers' own registration fails later with a lifted-constant error). So the
model is wrapped: the wrapper takes the past keys/values as a flat list of tensors, builds
the cache inside `forward`, and returns the logits and the present keys/values flat. The
ONNX names are Optimum's, so Optimum exports and Parity's own go through one mapping.

Dynamic dimensions follow the captured calls, as onnx-diagnostic's input observer does: a
dimension that varies across calls (sequence length, past length) is dynamic, one that
does not (batch, within one generate()) stays fixed. torch.export specialises example sizes
0 and 1, so the example inputs are synthetic, with a distinct size >= 2 per dynamic role.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity.errors import ExportError
from parity.hf.capture import CACHE_KEYWORDS, CapturedCall
from parity.hf.feeds import LOGITS, past_name, present_name
from parity.load.export_lock import export_lock

EXAMPLE_SEQ = 3  # example sizes of dynamic roles: distinct, >= 2 (no 0/1 specialisation)
EXAMPLE_PAST = 5


@dataclass(frozen=True)
class DynamicRoles:
    """Which roles vary across the captured calls."""

    batch: bool
    sequence: bool
    past: bool

    @property
    def total(self) -> bool:
        return self.sequence or self.past


@dataclass(frozen=True)
class ExportResult:
    path: Path
    seconds: float
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dynamic: DynamicRoles


def infer_dynamic_roles(calls: Sequence[CapturedCall]) -> DynamicRoles:
    """A role is dynamic when its size differs between two captured calls."""
    batches = {c.batch for c in calls}
    seqs = {c.sequence_length for c in calls}
    pasts = {c.past_length for c in calls}
    return DynamicRoles(batch=len(batches) > 1, sequence=len(seqs) > 1, past=len(pasts) > 1)


def export_decoder(
    model: Any,
    calls: Sequence[CapturedCall],
    path: str | Path,
    *,
    opset: int | None = None,
    optimize: bool = False,
) -> ExportResult:
    """Export `model` (a transformers causal LM) to `path`; ExportError with the cause.

    `optimize` runs onnxscript's graph optimizer: off by default because it roughly doubles
    the export time of small models, and ONNX Runtime optimises the graph itself at load.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_layers = len(calls[0].present)
    wrapper = DecoderStep(model, n_layers=n_layers).eval()
    roles = infer_dynamic_roles(calls)
    args, dynamic_shapes = _example_inputs(calls, roles, with_positions=wrapper.takes_positions)
    input_names = ["input_ids", "attention_mask"]
    if wrapper.takes_positions:
        input_names.append("position_ids")
    for layer in range(n_layers):
        input_names += [past_name(layer, "key"), past_name(layer, "value")]
    output_names = [LOGITS]
    for layer in range(n_layers):
        output_names += [present_name(layer, "key"), present_name(layer, "value")]

    seconds = _export(
        wrapper,
        args,
        path,
        dynamic_shapes=dynamic_shapes,
        input_names=input_names,
        output_names=output_names,
        n_layers=n_layers,
        opset=opset,
        optimize=optimize,
    )
    return ExportResult(
        path=path,
        seconds=seconds,
        input_names=tuple(input_names),
        output_names=tuple(output_names),
        dynamic=roles,
    )


def export_encoder(
    model: Any,
    calls: Sequence[CapturedCall],
    path: str | Path,
    *,
    opset: int | None = None,
    optimize: bool = False,
) -> ExportResult:
    """Export an encoder (feature extraction) for its captured call's inputs and outputs.

    One call means no dimension varies, so by the observer's rule the export is static.
    """
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    call = calls[0]
    input_names = list(call.inputs)  # what forward() was given: ids and masks, or pixels
    output_names = list(call.outputs)

    class _Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> tuple[Any, ...]:
            out = self.model(**dict(zip(input_names, args, strict=True)))
            return tuple(getattr(out, name) for name in output_names)

    args = tuple(torch.from_numpy(call.inputs[name]) for name in input_names)
    seconds = _export(
        _Encoder().eval(),
        args,
        path,
        dynamic_shapes=None,
        input_names=input_names,
        output_names=output_names,
        n_layers=0,
        opset=opset,
        optimize=optimize,
    )
    return ExportResult(
        path=path,
        seconds=seconds,
        input_names=tuple(input_names),
        output_names=tuple(output_names),
        dynamic=infer_dynamic_roles(calls),
    )


def _export(
    wrapper: Any,
    args: tuple[Any, ...],
    path: Path,
    *,
    dynamic_shapes: Any,
    input_names: list[str],
    output_names: list[str],
    n_layers: int,
    opset: int | None,
    optimize: bool,
) -> float:
    """torch.onnx.export(dynamo=True) and save; seconds taken, or ExportError with the cause."""
    import torch

    t0 = time.perf_counter()
    try:
        kwargs: dict[str, Any] = {}
        if opset is not None:
            kwargs["opset_version"] = opset
        with export_lock(), torch.inference_mode(False), torch.no_grad(), _quiet_exporter():
            program = torch.onnx.export(
                wrapper,
                args,
                dynamo=True,
                dynamic_shapes=dynamic_shapes,
                input_names=input_names,
                output_names=output_names,
                verbose=False,
                optimize=optimize,
                **kwargs,
            )
        if program is None:
            raise RuntimeError("torch.onnx.export returned no program")
        if n_layers:
            _name_dynamic_dims(program, n_layers=n_layers)
        n_bytes = sum(p.numel() * p.element_size() for p in wrapper.parameters())
        _save(program, path, external_data=n_bytes > 1_500_000_000)
    except Exception as exc:  # the exporter raises many types; all mean "export failed"
        seconds = time.perf_counter() - t0
        cause = exporter_cause(exc)
        raise ExportError(
            f"export: FAILED after {seconds:.1f} s: {cause}",
            detail="".join(traceback.format_exception(exc)),
            seconds=seconds,
            cause=cause,
        ) from exc
    return time.perf_counter() - t0


def _save(program: Any, path: Path, *, external_data: bool) -> None:
    """Save whole or not at all (a full disk, a kill: the previous file stays): into a private
    folder beside `path`, then each file renamed into place, the model last. Only a regular
    file (or nothing) is replaced: a FIFO or device at `path` is refused, never opened."""
    import os
    import shutil
    import tempfile

    from parity.files.atomic import refuse_special

    refuse_special(path, "ONNX export")
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".parity-tmp", dir=path.parent))
    try:
        program.save(str(folder / path.name), external_data=external_data)
        for part in sorted(folder.iterdir(), key=lambda p: p.name == path.name):
            refuse_special(path.parent / part.name, "ONNX export")
            os.replace(part, path.parent / part.name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _quiet_exporter:
    """The exporter warns at length (torchvision ops, deprecations); the cause is kept."""

    def __enter__(self) -> None:
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")
        self._logger = logging.getLogger("torch.onnx")
        self._level = self._logger.level
        self._logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: Any) -> None:
        self._logger.setLevel(self._level)
        self._warnings.__exit__(*exc)


class DecoderStep:
    """Factory for the export wrapper (a torch.nn.Module built lazily: torch imports late)."""

    def __new__(cls, model: Any, *, n_layers: int) -> Any:
        import torch

        forward_params = inspect.signature(model.forward).parameters
        cache_kw = next((k for k in CACHE_KEYWORDS if k in forward_params), None)
        if cache_kw is None:
            raise ExportError(
                f"export: FAILED: {type(model).__name__}.forward takes no KV cache "
                f"(none of {list(CACHE_KEYWORDS)})"
            )
        cache_key: str = cache_kw  # narrowed, for the step below
        takes_positions = "position_ids" in forward_params

        class _DecoderStep(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model
                self.takes_positions = takes_positions

            def step(self, input_ids: Any, attention_mask: Any, past: list[Any], **kw: Any) -> Any:
                kw[cache_key] = make_cache(past, model.config)
                out = self.model(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **kw
                )
                return (out.logits, *cache_tensors(out.past_key_values))

        class _WithPositions(_DecoderStep):
            def forward(
                self, input_ids: Any, attention_mask: Any, position_ids: Any, past: list[Any]
            ) -> tuple[Any, ...]:
                return self.step(input_ids, attention_mask, past, position_ids=position_ids)

        class _WithoutPositions(_DecoderStep):
            def forward(self, input_ids: Any, attention_mask: Any, past: list[Any]) -> Any:
                return self.step(input_ids, attention_mask, past)

        return _WithPositions() if takes_positions else _WithoutPositions()


def make_cache(flat_past: Sequence[Any], config: Any) -> Any:
    """A DynamicCache from [k0, v0, k1, v1, ...] (the constructor differs across versions)."""
    from transformers import DynamicCache

    pairs = [(flat_past[2 * i], flat_past[2 * i + 1]) for i in range(len(flat_past) // 2)]
    try:
        return DynamicCache(ddp_cache_data=pairs, config=config)
    except TypeError:
        cache = DynamicCache()
        for layer, (k, v) in enumerate(pairs):
            cache.update(k, v, layer)
        return cache


def cache_tensors(cache: Any) -> list[Any]:
    if hasattr(cache, "layers"):
        flat = []
        for layer in cache.layers:
            flat += [layer.keys, layer.values]
        return flat
    if hasattr(cache, "key_cache"):
        flat = []
        for k, v in zip(cache.key_cache, cache.value_cache, strict=True):
            flat += [k, v]
        return flat
    return [t for layer in cache for t in layer[:2]]


def _example_inputs(
    calls: Sequence[CapturedCall], roles: DynamicRoles, *, with_positions: bool
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Synthetic example inputs (sizes >= 2 for dynamic roles) and their dynamic shapes."""
    import torch

    first = calls[0]
    batch = first.input_ids.shape[0]
    if roles.batch:
        batch = max(2, batch)
    seq = EXAMPLE_SEQ if roles.sequence else first.input_ids.shape[1]
    past = EXAMPLE_PAST if roles.past else first.past_length
    vocab_high = max(2, int(max(c.input_ids.max() for c in calls)) + 1)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab_high, (batch, seq), generator=gen)
    attention_mask = torch.ones(batch, past + seq, dtype=torch.int64)
    positions = torch.arange(past, past + seq, dtype=torch.int64).expand(batch, seq).contiguous()
    flat_past = []
    for k, v in first.present:
        for array in (k, v):
            shape = (batch, array.shape[1], past, array.shape[3])
            flat_past.append(torch.randn(shape, generator=gen).to(_torch_dtype(array)))

    auto = torch.export.Dim.DYNAMIC

    def dims(**axes: bool) -> dict[int, Any]:
        return {int(k[1:]): auto for k, on in axes.items() if on}

    args: list[Any] = [input_ids, attention_mask]
    shapes: list[Any] = [
        dims(a0=roles.batch, a1=roles.sequence),
        dims(a0=roles.batch, a1=roles.total),
    ]
    if with_positions:
        args.append(positions)
        shapes.append(dims(a0=roles.batch, a1=roles.sequence))
    args.append(flat_past)
    shapes.append([dims(a0=roles.batch, a2=roles.past) for _ in flat_past])
    return tuple(args), tuple(shapes)


def _torch_dtype(array: Any) -> Any:
    import torch

    return {"float16": torch.float16, "float64": torch.float64}.get(str(array.dtype), torch.float32)


_SYMBOL = re.compile(r"\b(s\d+)\b")


def _name_dynamic_dims(program: Any, *, n_layers: int) -> None:
    """Rename the exporter's symbols (s12, s70, ...) to Optimum's dimension names.

    Cosmetic but useful: the signature then reads batch_size / sequence_length /
    past_sequence_length / total_sequence_length. Skipped silently if the IR differs.
    """
    try:
        from onnxscript import ir
    except ImportError:
        return
    try:
        graph = program.model.graph
        inputs = {v.name: v for v in graph.inputs}
        names: dict[str, str] = {}

        def claim(value_name: str, axis: int, dim_name: str) -> None:
            value = inputs.get(value_name)
            if value is None or value.shape is None or axis >= len(value.shape):
                return
            dim = value.shape[axis]
            if isinstance(dim, ir.SymbolicDim) and dim.value:
                names.setdefault(str(dim.value), dim_name)

        for name in ("input_ids", "attention_mask", "position_ids"):
            claim(name, 0, "batch_size")
        claim("input_ids", 1, "sequence_length")
        claim("position_ids", 1, "sequence_length")
        claim("attention_mask", 1, "total_sequence_length")
        for layer in range(n_layers):
            for kind in ("key", "value"):
                claim(past_name(layer, kind), 0, "batch_size")
                claim(past_name(layer, kind), 2, "past_sequence_length")
        if not names:
            return

        def rename(value: Any) -> None:
            if value.shape is None:
                return
            new_dims = []
            changed = False
            for dim in value.shape:
                if isinstance(dim, ir.SymbolicDim) and dim.value:
                    text = _SYMBOL.sub(lambda m: names.get(m.group(1), m.group(1)), dim.value)
                    changed |= text != dim.value
                    new_dims.append(text)
                else:
                    new_dims.append(dim)
            if changed:
                value.shape = ir.Shape(new_dims)

        for value in list(graph.inputs) + list(graph.outputs):
            rename(value)
        for node in ir.traversal.RecursiveGraphIterator(graph):
            for value in node.outputs:
                rename(value)
    except Exception:  # naming is cosmetic: never fail an export over it
        return


def exporter_cause(exc: BaseException) -> str:
    """One line that says why the exporter gave up: the innermost cause, not the banner.

    torch.onnx wraps the real error (e.g. a torch.export failure) in a long message that
    starts with a generic banner; the chain's root usually names the operator or construct.
    """
    root = exc
    seen = {id(root)}
    while root.__cause__ is not None and id(root.__cause__) not in seen:
        root = root.__cause__
        seen.add(id(root))
    lines = [line.strip() for line in str(root).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    return f"{type(root).__name__}: {text}" if text else type(root).__name__
