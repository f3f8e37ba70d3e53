"""How feeds named after the ONNX inputs are passed to a torch model: by name, or by position.

One decision for every caller that runs the torch side (the runner, parity.layers). A model
knows its input names in two ways: names forward() accepts by keyword (an nn.Module's or
TorchScript's parameters, a .pt2's keyword arguments) and names of arguments it takes by
position only (a .pt2's positional arguments, read from its graph signature). Feeds go by
name when every positional name is fed and every feed has a name the model knows; otherwise
by position in the ONNX order, and the binding says why (the report shows it), because a
position-matched pair whose inputs are ordered differently feeds the wrong tensors.

Contract: bind_inputs(feeds, *, keyword, positional) -> InputBinding
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
