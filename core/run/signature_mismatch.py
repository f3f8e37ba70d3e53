"""A model whose forward() does not take the ONNX file's inputs, said with both signatures and
the wrapper to write.

A stateful TorchScript whose ``forward(x, sr)`` is not its ONNX file's ``(input, state, sr)``
fails inside torch with "forward() expected at most 3 argument(s) but received 4": neither
signature, no next step. What fixes it is a few-line factory whose forward() takes the ONNX
inputs and calls the model; this module writes it, from the names both sides record.

Contract: signature_mismatch(model, onnx_inputs, binding, cause) -> SignatureMismatch | None
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from parity.errors import ModelRunError
from parity.run.input_binding import BY_POSITION, NO_NAMES, InputBinding

if TYPE_CHECKING:
    from parity.load.torch_model import TorchModel

__all__ = ["SignatureMismatch", "signature_mismatch", "wrapper_code"]


class SignatureMismatch(ModelRunError):
    """The torch model refused the ONNX file's inputs: `detail` is the wrapper to write."""


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


def _identifier(name: str, taken: set[str]) -> str:
    """`name` as a Python parameter name (ONNX names may hold dots); unique among `taken`."""
    text = re.sub(r"\W", "_", name) or "x"
    if text[0].isdigit() or keyword.iskeyword(text) or text == "self":
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
