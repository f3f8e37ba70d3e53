"""Resolve a model-spec string to a runnable torch model.

One spec string is shared by the CLI and the dashboard:

- ``demo:NAME``                 a built-in demo (``parity.load.demos.DEMOS``);
- ``FILE`` (any suffix)         a ``torch.export.save`` archive, read by ``parity.load.pt2_archive``
                                 (nothing in it runs), or a TorchScript archive; which one
                                 is decided by the zip's members, never by the suffix;
- ``FILE.py:CALLABLE``          a factory in a Python file (imported by path);
- ``package.module:CALLABLE``   a factory in an importable module.

A factory is called without arguments and must return an ``nn.Module`` (an ``nn.Module``
object named directly is used as is). Factories and TorchScript run code from the user's
files: ``allow_code=False`` (the dashboard, unless started trusting its users) refuses them.
Weights (``.safetensors``, or a torch file read with ``weights_only=True``: never unpickled)
are loaded strictly. The model is put in eval mode. torch's own log output is silenced
while loading (``parity.load.quiet``).

Contract:
@dataclass(frozen=True) class TorchModel: spec: str; kind: str; module: Callable (eval mode);
    parameter_names: tuple[str, ...] (names forward() takes by keyword, () if unknown);
    sha256: str; positional_names: tuple[str, ...] (a .pt2's positional arguments, in order)
load_torch_model(spec, *, weights=None, allow_code=True, max_memory=None) -> TorchModel
    (max_memory: bytes a .pt2's weights, constants and sample inputs may take; None: the
    default budget of parity.limits.budget)
    raises ModelLoadError / UsageError
is_code_spec(spec) -> bool   True when loading the spec runs code from the user's files
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import pickle
import sys
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from parity.errors import ModelLoadError, UsageError, first_line
from parity.files.hashing import update_with_file
from parity.files.safe_read import check_regular
from parity.load.pickle_cause import file_pickle_cause, is_raw_pickle
from parity.load.pt2_archive import is_pt2, load_pt2
from parity.load.quiet import quiet_torch
from parity.load.specs import TRUST_COMMANDS, demo_name
from parity.load.specs import split_factory as _split_factory
from parity.settings import Mention

KINDS = ("demo", "exported_program", "torchscript", "factory", "module")

_MAX_KEYS_SHOWN = 5


@dataclass(frozen=True)
class TorchModel:
    spec: str
    kind: str
    module: Callable[..., Any]
    parameter_names: tuple[str, ...]
    sha256: str
    program: Any = None  # a .pt2's ExportedProgram (parity.layers interprets its graph)
    positional_names: tuple[str, ...] = ()  # names of arguments taken by position only


CODE_REFUSED_HINT = (
    f"the dashboard refuses code-bearing models unless started with: {TRUST_COMMANDS[0]} "
    f"(from a checkout: {TRUST_COMMANDS[1]})"
)


def is_code_spec(spec: str) -> bool:
    """True when loading `spec` runs code from the user's files (factory or TorchScript)."""
    spec = spec.strip()
    if not spec or demo_name(spec) is not None:
        return False
    if _split_factory(spec) is not None:
        return True
    path = Path(spec)
    return path.is_file() and _archive_kind(path) == "torchscript"


def load_torch_model(
    spec: str,
    *,
    weights: str | os.PathLike[str] | None = None,
    allow_code: bool = True,
    max_memory: int | None = None,
) -> TorchModel:
    """Load the model a spec names, apply optional weights, and put it in eval mode.

    allow_code=False refuses the formats that are code (Python factories, TorchScript).
    """
    with quiet_torch():
        return _load(spec, weights=weights, allow_code=allow_code, max_memory=max_memory)


def _load(
    spec: str,
    *,
    weights: str | os.PathLike[str] | None,
    allow_code: bool,
    max_memory: int | None = None,
) -> TorchModel:
    spec = spec.strip()
    if not spec:
        raise UsageError(
            "empty model spec; give demo:NAME, FILE.pt2, a TorchScript file, "
            "FILE.py:CALLABLE or package.module:CALLABLE"
        )
    digest = hashlib.sha256()
    program = None
    if (demo := demo_name(spec)) is not None:
        module, kind = _load_demo(demo), "demo"
        digest.update(spec.encode())
    elif (factory := _split_factory(spec)) is not None:
        if not allow_code:
            raise ModelLoadError(
                f"refused model {spec}: a Python factory is code and runs when loaded; "
                + CODE_REFUSED_HINT
            )
        module, kind = _load_factory(spec, *factory), "factory"
        digest.update(spec.encode())
        if factory[0].endswith(".py") and Path(factory[0]).is_file():
            update_with_file(digest, Path(factory[0]))
    else:
        path = Path(spec)
        _regular_file(path, f"cannot load model {spec}: no such file", "model")
        module, kind, program = _load_archive(path, allow_code=allow_code, max_memory=max_memory)
        update_with_file(digest, path)

    if weights is not None:
        wpath = Path(weights)
        _apply_weights(module, wpath)
        digest.update(b"\0weights\0")
        update_with_file(digest, wpath)
    _to_eval(module)
    return TorchModel(
        spec=spec,
        kind=kind,
        module=module,
        parameter_names=_parameter_names(module, kind),
        sha256=digest.hexdigest(),
        program=program,
        positional_names=_positional_names(program),
    )


def from_object(model: Any) -> TorchModel:
    """Wrap a model already in memory (an ``nn.Module`` or a ``torch.export.ExportedProgram``)
    like a loaded spec: eval mode, forward()'s parameter names, a hash of its state."""
    if isinstance(model, torch.export.ExportedProgram):
        module, kind = model.module(), "exported_program"
        state = model.state_dict
    elif isinstance(model, nn.Module):
        module, kind, state = model, "module", model.state_dict()
    else:
        raise UsageError(
            f"model must be an nn.Module, a torch.export.ExportedProgram, a model spec string "
            f"or None, got {type(model).__name__}"
        )
    on_meta = [name for name, tensor in state.items() if tensor.device.type == "meta"]
    if on_meta:
        raise ModelLoadError(
            f"model {type(model).__qualname__}: {_few(on_meta)} on the meta device hold no "
            "data; load its weights (e.g. to_empty + load_state_dict) before validating"
        )
    digest = hashlib.sha256(f"{kind}:{type(model).__qualname__}".encode())
    for name, tensor in state.items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    _to_eval(module)
    return TorchModel(
        spec=f"<{type(model).__qualname__} in memory>",
        kind=kind,
        module=module,
        parameter_names=_parameter_names(module, kind),
        sha256=digest.hexdigest(),
    )


# --- spec kinds -------------------------------------------------------------------------


def _load_demo(name: str) -> nn.Module:
    from parity.load.demos import DEMOS  # lazy: demos build and export models

    if name not in DEMOS:
        raise UsageError(f"unknown demo {name!r}; demos: {', '.join(sorted(DEMOS))}")
    try:
        module = DEMOS[name].build()
    except Exception as exc:
        raise ModelLoadError(f"demo:{name} raised {type(exc).__name__}: {first_line(exc)}") from exc
    return module


def _load_factory(spec: str, target: str, attr: str) -> nn.Module:
    if target.endswith(".py"):
        code = _import_file(spec, Path(target))
    else:
        try:
            code = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
                raise ModelLoadError(
                    f"cannot load model {spec}: no module named {exc.name!r}"
                ) from exc
            raise _raised(spec, exc) from exc
        except BaseException as exc:
            _reraise_interrupt(exc)
            raise _raised(spec, exc) from exc
    obj: Any = code
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelLoadError(f"cannot load model {spec}: {target} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, nn.Module):
        if not callable(obj):
            raise ModelLoadError(f"cannot load model {spec}: {attr} is not callable")
        try:
            obj = obj()
        except BaseException as exc:
            _reraise_interrupt(exc)
            raise _raised(spec, exc) from exc
    if not isinstance(obj, nn.Module):
        raise ModelLoadError(
            f"cannot load model {spec}: {attr}() returned {type(obj).__name__}, "
            "not a torch.nn.Module"
        )
    return obj


def _regular_file(path: Path, missing: str, what: str) -> None:
    """A model or weights file must be a regular one: `/dev/zero` or a FIFO is named for what
    it is (parity.files.safe_read), and a file that is not there says `missing`."""
    if not path.exists() and not path.is_symlink():
        raise ModelLoadError(missing)
    check_regular(path, what=what, error=ModelLoadError)


def _import_file(spec: str, path: Path) -> Any:
    _regular_file(path, f"cannot load model {spec}: no such file {path}", "model")
    path = path.resolve()
    name = "parity_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ModelLoadError(f"cannot load model {spec}: not an importable Python file")
    code = importlib.util.module_from_spec(module_spec)
    # The file's own directory goes on sys.path so it can import its siblings, now and
    # lazily later; registering the module lets dataclasses and pickling find it.
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[name] = code
    try:
        module_spec.loader.exec_module(code)
    except BaseException as exc:
        sys.modules.pop(name, None)
        _reraise_interrupt(exc)
        raise _raised(spec, exc) from exc
    return code


def _archive_kind(path: Path) -> str:
    """ "exported_program", "torchscript", "torch_save", "onnx" or "unknown", by content."""
    if is_pt2(path):
        return "exported_program"
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, RuntimeError):
        names = []
    if names:
        # torch.jit.save: <root>/code/..., <root>/constants.pkl; torch.save: <root>/data.pkl only.
        inner = {n.split("/", 1)[1] for n in names if "/" in n}
        if "constants.pkl" in inner or any(n.startswith("code/") for n in inner):
            return "torchscript"
        if "data.pkl" in inner:
            return "torch_save"
        return "unknown"
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return "unknown"
    if head[:1] == b"\x80":  # a raw pickle: torch.save's legacy (non-zip) format
        return "torch_save"
    if path.suffix == ".onnx":
        return "onnx"
    return "unknown"


def _load_archive(
    path: Path, *, allow_code: bool, max_memory: int | None = None
) -> tuple[nn.Module, str, Any]:
    """A torch.export archive (restricted reader) or a TorchScript archive (code)."""
    if path.suffix == ".py":  # a factory's file without its callable
        raise ModelLoadError(
            f"cannot load model {path}: a Python file is read as a factory: give it as "
            f"{path}:CALLABLE, the function or class in it that returns the torch.nn.Module "
            f"(e.g. {path}:build)"
        )
    kind = _archive_kind(path)
    if kind == "exported_program":
        from parity.limits.budget import MemoryBudget

        module, program = load_pt2(path, budget=MemoryBudget.of(max_memory))
        return module, "exported_program", program
    if kind == "onnx":
        raise ModelLoadError(
            (
                f"cannot load model {path}: this is an ONNX file; give it as ",
                Mention("onnx"),
                " and the torch model as ",
                Mention("model"),
            )
        )
    if kind == "torch_save":
        with open(path, "rb") as f:
            what = "a raw pickle" if is_raw_pickle(f.read(64)) else "a torch.save file"
        raise ModelLoadError(
            (
                f"cannot load model {path}: {what} (a pickle) is not a model Parity loads; for "
                "a state dict give the model as FILE.py:CALLABLE and the file as ",
                Mention("weights"),
            )
        )
    if kind != "torchscript":
        raise ModelLoadError(
            (
                f"cannot load model {path}: not a TorchScript or torch.export archive (for a "
                "state dict, give the model as FILE.py:CALLABLE and the file as ",
                Mention("weights"),
                ")",
            )
        )
    if not allow_code:
        raise ModelLoadError(
            f"refused model {path}: TorchScript is code and runs when loaded; " + CODE_REFUSED_HINT
        )
    try:
        return torch.jit.load(str(path), map_location="cpu"), "torchscript", None
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load model {path}: not a readable TorchScript archive ({first_line(exc)})"
        ) from exc


# --- weights ----------------------------------------------------------------------------


def _apply_weights(module: nn.Module, path: Path) -> None:
    _regular_file(path, f"cannot load weights {path}: no such file", "weights")
    state = _read_state_dict(path)
    expected = set(module.state_dict())
    missing = sorted(expected - set(state))
    unexpected = sorted(set(state) - expected)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys {_few(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {_few(unexpected)}")
        raise ModelLoadError(f"weights {path} do not fit the model: {'; '.join(parts)}")
    try:
        module.load_state_dict(state, strict=True)
    except Exception as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()]
        cause = lines[0] if lines else first_line(exc)
        raise ModelLoadError(f"weights {path} do not fit the model: {cause}") from exc


def _read_state_dict(path: Path) -> Mapping[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        except Exception as exc:
            raise ModelLoadError(
                f"cannot load weights {path}: not a readable safetensors file ({first_line(exc)})"
            ) from exc
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ModelLoadError(
            f"cannot load weights {path}: refused as unsafe, it needs pickle beyond "
            f"tensors ({file_pickle_cause(exc, path)}; save a state_dict, or use "
            ".safetensors)"
        ) from exc
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load weights {path}: not a torch weights file ({first_line(exc)})"
        ) from exc
    # Training checkpoints often wrap the state dict; accept the usual wrappers.
    if isinstance(state, Mapping):
        for key in ("state_dict", "model_state_dict", "model"):
            inner = state.get(key)
            if (
                isinstance(inner, Mapping)
                and inner
                and all(isinstance(v, torch.Tensor) for v in inner.values())
            ):
                state = inner
                break
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ModelLoadError(
            f"cannot load weights {path}: expected a state dict (names -> tensors), "
            f"got {type(state).__name__}"
        )
    return state


# --- eval mode and parameter names -------------------------------------------------------


def _to_eval(module: nn.Module) -> None:
    try:
        module.eval()
    except NotImplementedError:
        # An ExportedProgram's module refuses eval(); its graph was traced in the mode the
        # model had at export time, so there is nothing to switch. Dropout/batch-norm
        # patterns are switched where torch knows how.
        try:
            from torch.ao.quantization import move_exported_model_to_eval

            move_exported_model_to_eval(module)
        except Exception:
            pass


def _parameter_names(module: nn.Module, kind: str) -> tuple[str, ...]:
    """Names forward() accepts by keyword; () when inputs must go by position."""
    if kind == "exported_program":
        # An ExportedProgram takes by keyword only what was given by keyword at export.
        in_spec: Any = getattr(module, "_in_spec", None)
        try:  # None or another shape of spec: no keywords (the except below)
            kwargs_spec = (
                in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
            )
            return tuple(str(k) for k in (kwargs_spec.context or ()))
        except Exception:
            return ()
    if kind == "torchscript" or isinstance(module, torch.jit.ScriptModule):  # or in memory
        try:
            args = module.forward.schema.arguments
            return tuple(a.name for a in args if a.name != "self")
        except Exception:
            return ()
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    )


def _positional_names(program: Any) -> tuple[str, ...]:
    """A .pt2's positional argument names, from its graph signature (the names torch.export
    took from forward()'s parameters); () when an argument is not one plain tensor.

    Its module takes these by position only, so the runner maps ONNX names onto them.
    """
    if program is None:
        return ()
    try:
        args_spec = program.call_spec.in_spec.child(0)
        if any(not child.is_leaf() for child in args_spec.children_specs):
            return ()  # a nested argument (a tuple, a dict): its leaves have made-up names
        user = [
            spec.arg
            for spec in program.graph_signature.input_specs
            if spec.kind.name == "USER_INPUT"
        ]
        n_args = args_spec.num_children
        if len(user) < n_args or not all(
            type(a).__name__ == "TensorArgument" for a in user[:n_args]
        ):
            return ()
        return tuple(str(a.name) for a in user[:n_args])
    except Exception:
        return ()


# --- helpers ----------------------------------------------------------------------------


def _raised(spec: str, exc: BaseException) -> ModelLoadError:
    return ModelLoadError(f"{spec} raised {type(exc).__name__}: {first_line(exc)}")


def _reraise_interrupt(exc: BaseException) -> None:
    if isinstance(exc, KeyboardInterrupt):
        raise exc


def _few(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_KEYS_SHOWN])
    more = len(keys) - _MAX_KEYS_SHOWN
    return shown + (f" (+{more} more)" if more > 0 else "")
