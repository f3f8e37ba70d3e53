"""The torch side of localisation: produce intermediate values one at a time, never all.

Two ways, chosen by parity.layers.matching:

- `FxCapture`: the exported program the ONNX exporter itself converted (a .pt2's program,
  or ``torch.export`` of the loaded module) after the exporter's own decompositions, run by an
  ``torch.fx.Interpreter``; every call_function node's value goes to a callback as soon as it
  exists (the interpreter frees values after their last use, so memory stays a forward's).
- `HookCapture`: forward hooks on ``named_modules()``; each module's output goes to the
  callback when the module returns.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
import weakref
from collections.abc import Callable, Collection, Iterator
from typing import Any

import numpy as np
import torch

from parity.layers import projections, recurrent
from parity.load.export_lock import export_lock
from parity.load.quiet import quiet_torch
from parity.results import InputSet
from parity.run.input_binding import BY_NAME, bind_inputs
from parity.signature import OnnxSignature

ValueCallback = Callable[[str, Any], None]
INPUT = "#input"  # a module's input (its forward pre-hook): "fc#input"


class FxCapture:
    """Interpret a GraphModule node by node, handing wanted nodes' tensors to a callback."""

    def __init__(
        self,
        program: Any,
        module: Any,
        parameter_names: tuple[str, ...],
        positional_names: tuple[str, ...] = (),
    ) -> None:
        self.program = program  # the decomposed ExportedProgram (its graph names the values)
        self.module = module  # program.module(): the runnable form
        self.parameter_names = parameter_names
        self.positional_names = positional_names  # a .pt2's positional arguments
        # eager torch (a HookCapture) when the program is a re-export of the model, to be
        # checked against at the outputs (parity.layers.localise); None for a .pt2's own
        self.eager: Any = None
        self.nodes = {
            n.name: n for n in program.graph.nodes if n.op == "call_function"
        }  # name -> node

    def run(self, input_set: InputSet, wanted: Collection[str], on_value: ValueCallback) -> Any:
        """Hands the wanted values to `on_value`; returns the program's outputs."""
        from torch.utils import _pytree as pytree

        tensors = {name: _tensor(a) for name, a in input_set.feeds.items()}
        binding = bind_inputs(
            tensors, keyword=self.parameter_names, positional=self.positional_names
        )
        flat = pytree.tree_leaves((binding.args, dict(binding.kwargs)))
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _Handing(self.module, set(wanted), on_value).run(*flat)


class _Handing(torch.fx.Interpreter):
    """Hands wanted call_function values to a callback. A module-level class on purpose: a
    class made per run lives in a reference cycle, and its closure kept the batch's ONNX
    arrays alive until the cyclic GC ran (+1 GB per batch on a 3 GB model)."""

    def __init__(self, module: Any, wanted: set[str], on_value: ValueCallback) -> None:
        super().__init__(module)
        self.wanted = wanted
        self.on_value = on_value
        self.layered = _layered(wanted)  # recurrent FX node -> its wanted layer keys

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op == "call_function" and n.name in self.wanted:
            self.on_value(n.name, result)
        if n.op == "call_function" and n.name in self.layered:
            kind = recurrent.fx_kind(str(n.target))
            args, _ = self.fetch_args_kwargs_from_env(n)
            if kind is not None:
                stack = recurrent.from_fx(kind, args)
                _hand_layers(stack, result, self.layered[n.name], self.on_value)
        return result


def _layered(wanted: Collection[str]) -> dict[str, list[str]]:
    """Wanted recurrent layer keys (parity.layers.recurrent), by the module or FX node."""
    found: dict[str, list[str]] = {}
    for key in wanted:
        parts = recurrent.split_key(key)
        if parts is not None:
            found.setdefault(parts[0], []).append(key)
    return found


def _hand_layers(
    stack: recurrent.Stack | str, output: Any, keys: Collection[str], on_value: ValueCallback
) -> None:
    """Each wanted layer value of one recurrent call to `on_value`, when the layers computed
    apart agree with the call's own result (else none: nothing compared from them)."""
    if isinstance(stack, str):
        return
    per_layer = recurrent.layers(stack)
    if isinstance(per_layer, str) or not recurrent.agrees_with(per_layer, output):
        return
    for key in keys:
        parts = recurrent.split_key(key)
        assert parts is not None
        _, k, slot = parts
        if k < len(per_layer) and slot in per_layer[k]:
            on_value(key, per_layer[k][slot])


class HookCapture:
    """Forward hooks on named modules; the model is run as the plain validation runs it."""

    def __init__(
        self,
        model: Any,
        signature: OnnxSignature,
        call: Callable[[InputSet], Any] | None = None,
    ) -> None:
        self.model = model  # parity.load.torch_model.TorchModel, or a source's model
        self.signature = signature
        self.call = call  # the source's forward on one case (an hf: captured call)
        self.paths = {name for name, _ in model.module.named_modules()}

    def forward(self, input_set: InputSet) -> None:
        """torch on one case, as the run's reference was made."""
        if self.call is not None:
            self.call(input_set)
            return
        from parity.run.runner import run_torch

        run_torch(self.model, input_set, self.signature)

    def run(self, input_set: InputSet, wanted: Collection[str], on_value: ValueCallback) -> None:
        modules = dict(self.model.module.named_modules())
        handles = []
        try:
            for path in wanted:
                if path in modules:

                    def hook(_m: Any, _args: Any, output: Any, _path: str = path) -> None:
                        on_value(_path, output)

                    handles.append(modules[path].register_forward_hook(hook))
                elif (made := projections.parse(path)) is not None:
                    handles += _projection_hooks(made, path, modules, on_value)
                elif path.endswith(INPUT) and path.removesuffix(INPUT) in modules:

                    def pre(_m: Any, args: Any, kwargs: Any, _key: str = path) -> None:
                        leaves = tensor_leaves((args, kwargs))
                        if leaves:
                            on_value(_key, leaves[0])

                    module = modules[path.removesuffix(INPUT)]
                    handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            for base, keys in _layered(wanted).items():
                if base in modules:

                    def layered(m: Any, args: Any, output: Any, _keys: list[str] = keys) -> None:
                        _hand_layers(recurrent.from_module(m, args), output, _keys, on_value)

                    handles.append(modules[base].register_forward_hook(layered))
            self.forward(input_set)
        finally:
            for h in handles:
                h.remove()

    def folds(self, input_set: InputSet, scoped: Collection[str]) -> dict[str, str]:
        """Modules the exporter folded into the op before them (a BatchNorm after a Conv):
        leaf P (scoped in ONNX) -> BatchNorm Q (no scope) where Q's input is P's very output
        tensor. P's ONNX value then holds Q's result. Only a BatchNorm: in eval it is an
        affine map per channel, which an exporter can fold into the Conv or Linear before
        it; a module that reads P's output otherwise (a Linear after a layer norm, whose
        scope a file spells another way: GenAI's `attn/qkv_proj`) is not folded into it."""

        scoped = set(scoped)
        # id -> (weak reference, module): an id alone can be reused once a tensor is freed
        made_by: dict[int, tuple[Any, str]] = {}
        folded: dict[str, str] = {}
        handles = []

        def source_of(t: Any) -> str | None:
            entry = made_by.get(id(t)) if isinstance(t, torch.Tensor) else None
            return entry[1] if entry is not None and entry[0]() is t else None

        def after(path: str, module: Any) -> Callable[..., None]:
            foldable = isinstance(module, torch.nn.modules.batchnorm._BatchNorm)

            def hook(_m: Any, args: Any, output: Any) -> None:
                if not isinstance(output, torch.Tensor):
                    return
                first = args[0] if args else None
                if first is output:  # identity (eval Dropout): not a fold, not a new value
                    return
                source = source_of(first)
                if path not in scoped and source is not None and foldable:
                    folded.setdefault(source, path)
                made_by[id(output)] = (weakref.ref(output), path)

            return hook

        for path, module in self.model.module.named_modules():
            if path and not list(module.children()):
                handles.append(module.register_forward_hook(after(path, module)))
        try:
            self.forward(input_set)
        finally:
            for h in handles:
                h.remove()
        return folded


def _projection_hooks(
    made: projections.Packed | projections.Chunk,
    key: str,
    modules: dict[str, Any],
    on_value: ValueCallback,
) -> list[Any]:
    """Hooks that hand a packed projection's value (its parts' outputs concatenated on
    the last axis, once all are made) or a split one's (its chunk of the packed output)."""
    if isinstance(made, projections.Chunk):
        if made.path not in modules:
            return []

        def chunk(_m: Any, _args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor) and output.shape[-1] % made.count == 0:
                on_value(key, output.chunk(made.count, dim=-1)[made.index])

        return [modules[made.path].register_forward_hook(chunk)]
    if not all(p in modules for p in made.parts):
        return []
    pending: dict[str, Any] = {}

    def part(path: str) -> Callable[..., None]:
        def hook(_m: Any, _args: Any, output: Any) -> None:
            pending[path] = output
            if len(pending) == len(made.parts):
                tensors = [pending.pop(p) for p in made.parts]
                if all(isinstance(t, torch.Tensor) for t in tensors):
                    on_value(key, torch.cat(tensors, dim=-1))

        return hook

    return [modules[p].register_forward_hook(part(p)) for p in made.parts]


def exporter_program(
    model: Any, input_set: InputSet, signature: OnnxSignature
) -> tuple[Any, list[str]]:
    """The program the dynamo exporter converted: the model's (or a fresh torch.export of
    it), decomposed the exporter's way. Returns (program or None, notes)."""
    notes: list[str] = []
    program = getattr(model, "program", None)
    if program is None:
        if not isinstance(model.module, torch.nn.Module) or model.kind == "torchscript":
            return None, ["the torch model is not an nn.Module torch.export can trace"]
        try:
            program = _export(model, input_set, signature)
            notes.append("torch side: torch.export.export of the loaded module (strict=False)")
        except Exception as exc:  # data-dependent control flow, unsupported ops, ...
            text = str(exc).strip().splitlines()
            return None, [
                f"torch.export could not trace the model ({type(exc).__name__}: "
                f"{text[0] if text else ''})"
            ]
    else:
        notes.append("torch side: the .pt2's ExportedProgram")
    try:
        decomposed = _decomposed(program)
    except Exception as exc:
        return None, [*notes, decomposition_failure(exc, saved=model.program is not None)]
    return decomposed, notes


def decomposition_failure(exc: BaseException, *, saved: bool) -> str:
    """Why there is no decomposed program: torch itself failed to run the exporter's
    decompositions (not a version to change, not the ONNX file); for a .pt2, the route that
    works: the model itself, which Parity exports afresh."""
    text = str(exc).strip().splitlines()
    cause = f"{type(exc).__name__}: {text[0] if text else ''}"
    what = "the .pt2's program" if saved else "torch.export's program of the model"
    said = (
        f"torch itself failed to run the ONNX exporter's decompositions on {what} ({cause}); "
        "this is torch's failure, not the ONNX file's"
    )
    if saved:
        said += (
            ": compare layers with the model instead of its .pt2, --model FILE.py:CALLABLE "
            "(a factory returning the nn.Module; Parity exports it afresh)"
        )
    return said


_DECOMPOSED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _decomposed(program: Any) -> Any:
    """The exporter's own pre-conversion step (decompositions, type promotion): the graph
    whose node names the ONNX values carry. Cached per program (the dashboard reruns).

    Under the export lock: the decompositions change torch's global state as an export
    does, and two threads decomposing at once named the wrong first divergence."""
    from torch.onnx._internal.exporter import _core

    with export_lock():
        if program in _DECOMPOSED:
            return _DECOMPOSED[program]
        with quiet_torch(), _no_stdout():
            decomposed = _core._prepare_exported_program_for_export(program, registry=_registry())
        _DECOMPOSED[program] = decomposed
    return decomposed


@functools.cache
def _registry() -> Any:
    from torch.onnx._internal.exporter import _registration

    # quiet: it logs a warning per torchvision op when torchvision is not installed
    with export_lock(), quiet_torch(), _no_stdout():
        return _registration.ONNXRegistry.from_torchlib()


@contextlib.contextmanager
def _no_stdout() -> Iterator[None]:
    """The exporter's prints dropped. Only under the export lock, so that two blocks never
    interleave their save and restore of sys.stdout; a sink rather than None, so another
    thread that writes to sys.stdout meanwhile writes nowhere instead of failing, and
    sys.stdout is restored whatever the block raises."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _export(model: Any, input_set: InputSet, signature: OnnxSignature) -> Any:
    """torch.export of a plain module, dims that are symbolic in the ONNX file left dynamic."""
    tensors = {name: _tensor(a) for name, a in input_set.feeds.items()}
    specs = {s.name: s for s in signature.inputs}
    dynamic = {
        name: {
            axis: torch.export.Dim.AUTO
            for axis, dim in enumerate(specs[name].shape)
            if not isinstance(dim, int)
        }
        for name in tensors
        if name in specs
    }
    binding = bind_inputs(tensors, keyword=model.parameter_names)  # a plain module: keywords
    with export_lock(), warnings.catch_warnings():  # torch.export: one at a time per process
        warnings.simplefilter("ignore")
        if binding.by == BY_NAME:
            return torch.export.export(
                model.module, (), tensors, dynamic_shapes=dynamic or None, strict=False
            )
        return torch.export.export(
            model.module,
            tuple(tensors.values()),
            dynamic_shapes=tuple(dynamic.get(n) for n in tensors) if dynamic else None,
            strict=False,
        )


def tensor_leaves(value: Any) -> list[Any]:
    """The tensors in a module's output, in order (nested tuples, dicts, ModelOutput)."""
    from parity.run.runner import flatten_outputs

    return [leaf.value for leaf in flatten_outputs(value)]


def to_numpy(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if not isinstance(value, torch.Tensor) or value.is_complex():
        return None
    t = value.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.cpu().contiguous().numpy()


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, copy=True, order="C"))
