"""How feeds named after the ONNX inputs are passed to a torch model: by name, or by position.

One decision for every caller that runs the torch side (the runner, parity.layers). A model
knows its input names in two ways: names forward() accepts by keyword (an nn.Module's or
TorchScript's parameters, a .pt2's keyword arguments) and names of arguments it takes by
position only (a .pt2's positional arguments, read from its graph signature). Feeds go by
name when every positional name is fed and every feed has a name the model knows; otherwise
by position in the ONNX order, and the binding says why (the report shows it), because a
position-matched pair whose inputs are ordered differently feeds the wrong tensors.

When the call fails because the model's parameters are not the ONNX inputs (a stateful
TorchScript's ``forward(x, sr)`` against its ONNX file's ``(input, state, sr)``: torch says only
"forward() expected at most 3 argument(s) but received 4"), `signature_mismatch` says both
signatures and writes the few-line wrapper factory that fixes it.

Only a call that failed at the call itself is blamed on the signature (`at_the_call`): an
exception raised by the model's own code once forward() ran is the model's error, said as it
is, whatever the names.

Contract: bind_inputs(feeds, *, keyword, positional) -> InputBinding
signature_mismatch(model, onnx_inputs, binding, cause) -> SignatureMismatch | None
at_the_call(exc, module) -> bool
"""

from __future__ import annotations

import keyword as python_keyword
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parity.errors import SignatureMismatch

if TYPE_CHECKING:
    from parity.load.torch_model import TorchModel

BY_NAME = "name"
BY_POSITION = "position"
NO_NAMES = "the model records no input names"


@dataclass(frozen=True)
class InputBinding:
    """The call: `args` (positional, in the model's order) and `kwargs`; `by` is BY_NAME or
    BY_POSITION and `note` says why a call went by position ("" when by name)."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    by: str = BY_NAME
    note: str = ""


def bind_inputs(
    feeds: Mapping[str, Any], *, keyword: Sequence[str] = (), positional: Sequence[str] = ()
) -> InputBinding:
    """Bind `feeds` (ONNX order) to a model's positional and keyword names."""
    names = list(feeds)
    known = set(positional) | set(keyword)
    if not known:
        return InputBinding(args=tuple(feeds.values()), by=BY_POSITION, note=NO_NAMES)
    unfed = [n for n in positional if n not in feeds]
    unknown = [n for n in names if n not in known]
    if not unfed and not unknown:
        return InputBinding(
            args=tuple(feeds[n] for n in positional),
            kwargs={n: feeds[n] for n in names if n not in positional},
        )
    model_names = list(positional) + [n for n in keyword if n not in positional]
    return InputBinding(
        args=tuple(feeds.values()),
        by=BY_POSITION,
        note=(
            f"the ONNX inputs {names} are not the model's inputs {model_names}: "
            "fed in the ONNX order"
        ),
    )


def binding_text(by: str | None, note: str | None) -> str:
    """How the inputs were fed, as the terminal and the HTML report say it ("" unknown)."""
    if by is None:
        return ""
    if by == BY_NAME:
        return "by name"
    return f"by position ({note})" if note else "by position"


def model_parameters(model: TorchModel) -> tuple[str, ...]:
    """forward()'s parameters in order, as far as the model records them."""
    positional = tuple(getattr(model, "positional_names", ()))
    return positional + tuple(n for n in model.parameter_names if n not in positional)


def signature_mismatch(
    model: TorchModel, onnx_inputs: Sequence[str], binding: InputBinding, cause: str
) -> SignatureMismatch | None:
    """The error for a call that failed because the model's parameters are not the ONNX
    inputs (fed by position, and the names disagree); None for any other failure."""
    params = model_parameters(model)
    if binding.by != BY_POSITION or binding.note == NO_NAMES or not params:
        return None
    if list(params) == list(onnx_inputs):
        return None
    message = (
        f"the model's forward({', '.join(params)}) does not take the ONNX file's inputs "
        f"({', '.join(onnx_inputs)}); torch said: {cause}. Write a factory whose forward() "
        "takes the ONNX inputs and calls the model (below), and give it as the model "
        "(--model wrap.py:make)"
    )
    return SignatureMismatch(message, detail=wrapper_code(model, params, onnx_inputs))


_ARGUMENTS = re.compile(
    r"expected at most \d+ argument|missing value for argument|argument '?\w+'? not provided"
    r"|unexpected keyword|positional argument|required (positional|keyword)",
    re.IGNORECASE,
)
"""How torch and Python say a call's arguments do not fit (TorchScript's "forward() expected
at most 3 argument(s) but received 4", Python's "takes 2 positional arguments but 3 were
given")."""


def at_the_call(exc: BaseException, module: Any) -> bool:
    """Whether calling `module` failed at the call (its arguments do not fit its forward),
    not in the model's own code: a Python forward (an nn.Module's, an exported program's
    generated one) whose frame never ran; TorchScript, by torch's words for arguments."""
    forward = getattr(type(module), "forward", None)
    code = getattr(forward, "__code__", None)
    if code is not None and not hasattr(module, "_c"):  # `_c`: a TorchScript module
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is code:
                return False
            tb = tb.tb_next
        return isinstance(exc, TypeError)
    return bool(_ARGUMENTS.search(str(exc).split("\n", 1)[0]))


def _identifier(name: str, taken: set[str]) -> str:
    """`name` as a Python parameter name (ONNX names may hold dots); unique among `taken`."""
    text = re.sub(r"\W", "_", name) or "x"
    if text[0].isdigit() or python_keyword.iskeyword(text) or text == "self":
        text = f"in_{text}"
    while text in taken:
        text += "_"
    taken.add(text)
    return text


def _load_line(model: TorchModel) -> str:
    """The line of make() that loads the model as Parity did."""
    spec = model.spec
    if model.kind == "torchscript":
        return f"inner = torch.jit.load({spec!r})"
    if model.kind == "exported_program" and not spec.startswith("<"):
        return f"inner = torch.export.load({spec!r}).module()"
    if model.kind in ("factory", "demo"):
        return f"inner = load_torch_model({spec!r}).module  # as Parity loads it"
    return "inner = ...  # your model"


def wrapper_code(model: TorchModel, params: Sequence[str], onnx_inputs: Sequence[str]) -> str:
    """A factory file whose forward() takes the ONNX inputs in their order and passes the
    model's parameters on: by name where both sides use the name, the rest in order."""
    taken: set[str] = set()
    names = {onnx: _identifier(onnx, taken) for onnx in onnx_inputs}
    spare = [onnx for onnx in onnx_inputs if onnx not in params]
    call = []
    for param in params:
        if param in names:
            call.append(names[param])
        elif spare:
            call.append(names[spare.pop(0)])
    unused = [names[n] for n in spare]
    note = f"; {', '.join(unused)} not passed on" if unused else ""
    load = _load_line(model)
    signature = f"the model's forward({', '.join(params)})"
    imports = ["import torch"]
    if "load_torch_model" in load:
        imports.append("from parity.load.torch_model import load_torch_model")
    return "\n".join(
        [
            "# wrap.py, then: parity validate --model wrap.py:make --onnx YOUR.onnx",
            *imports,
            "",
            "",
            "class Wrapped(torch.nn.Module):",
            "    def __init__(self, inner):",
            "        super().__init__()",
            "        self.inner = inner",
            "",
            f"    def forward(self, {', '.join(names.values())}):  # the ONNX file's inputs",
            f"        return self.inner({', '.join(call)})  # {signature}{note}",
            "",
            "",
            "def make():",
            f"    {load}",
            "    return Wrapped(inner)",
        ]
    )
