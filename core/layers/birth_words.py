"""The confirmation of a first divergence in words (parity.layers.birth), said the same way by
the terminal, the HTML report and the Layers page. Plain text: names are the user's."""

from __future__ import annotations

from parity.layers.result import Confirmation, LayersResult, LayerValue, Outcome
from parity.layers.views import fmt
from parity.show.births import born_before, feeding_count, feeding_words

MAX_LISTED = 8


def birth_sentence(result: LayersResult) -> str | None:
    """What re-running the first divergence's node alone said; None when nothing was re-run."""
    first = result.first_divergence
    c = result.confirmation_of(first)
    if first is None:
        if result.with_outcome(Outcome.MATCHING_ERROR) and not result.with_outcome(Outcome.CARRIED):
            n = len(result.with_outcome(Outcome.MATCHING_ERROR))
            return (
                f"No op is confirmed as where the error is born: each of the {n} flagged "
                "value(s) is a matching error (every value after it agrees with torch again: "
                "the ONNX value was paired with a torch value it does not hold)."
            )
        if result.with_outcome(Outcome.CARRIED):
            n = len(result.with_outcome(Outcome.CARRIED))
            return (
                f"No op is confirmed as where the error is born: each of the {n} flagged "
                "value(s), re-run alone on torch's values of its inputs, agrees (carried)."
            )
        return None
    if c is None:
        if not result.confirmations:
            return None
        return (
            f"This {first.onnx_op} node was not re-run alone (more values were flagged than "
            "are checked): named by the criterion only."
        )
    if c.outcome == Outcome.UNCONFIRMED:
        return (
            f"Unconfirmed: this {c.onnx_op} node could not be re-run alone ({c.reason}); "
            f"named by the criterion only{_feeding(first)}{_standing_for(first.ops)}."
        )
    nodes = ""
    if first.feeding:  # by op; never the re-run's own count (a Dropout's ratio Constants)
        n, ops = feeding_count(first), feeding_words(first)
        nodes = f" (with the {n} unmatched node(s) feeding it: {ops})"
    here = (
        f"the error is born among those nodes (a {c.onnx_op} only moves data)"
        if born_before(first)
        else "the error is born here"
    )
    return (
        f"From the exact inputs (torch's values) this {c.onnx_op} node{nodes} alone still errs "
        f"by max |error| {fmt(c.max_abs)} (error ratio {fmt(c.error_ratio)}; in the full run "
        f"{fmt(first.max_abs)}): {here}."
    )


def other_lines(result: LayersResult) -> list[str]:
    """The flagged values shown carried or left unconfirmed, one line each."""
    shown = [c for c in result.confirmations if c.outcome != Outcome.BORN]
    lines = [_line(result, c) for c in shown[:MAX_LISTED]]
    if len(shown) > MAX_LISTED:
        lines.append(f"... and {len(shown) - MAX_LISTED} more (in the JSON report)")
    return lines


def _feeding(v: LayerValue) -> str:
    """The unmatched nodes feeding a flagged value, by op; where its own node only moves
    data, that the error is born among them."""
    if not v.feeding:
        return ""
    said = f"; {feeding_count(v)} unmatched node(s) feed it: {feeding_words(v)}"
    if born_before(v):
        said += f" (a {v.onnx_op} only moves data: the error is born among them)"
    return said


def _standing_for(ops: tuple[str, ...]) -> str:
    """The unmatched ONNX nodes a value named by the criterion stands for, in words."""
    if len(ops) <= 1:
        return ""
    return f"; it stands for these ONNX nodes, none matched alone: {', '.join(ops)}"


def _line(result: LayersResult, c: Confirmation) -> str:
    where = f"{c.torch_module or '(top level)'!r}: {c.onnx_op} node {c.onnx_node!r}"
    if c.outcome == Outcome.MATCHING_ERROR:
        return f"{where}, input set {c.input_set}: {c.reason}"
    if c.outcome == Outcome.UNCONFIRMED:
        value = next(
            (
                v
                for v in result.values
                if (v.order, v.input_set, v.onnx_value) == (c.order, c.input_set, c.onnx_value)
            ),
            None,
        )
        ops = _standing_for(value.ops) if value is not None else ""
        return f"unconfirmed: {where}, input set {c.input_set}: {c.reason}{ops}"
    in_run = next(
        (
            v.max_abs
            for v in result.values
            if (v.order, v.input_set, v.onnx_value) == (c.order, c.input_set, c.onnx_value)
        ),
        None,
    )
    return (
        f"carried: {where}, input set {c.input_set}: alone on torch's inputs it errs by only "
        f"{fmt(c.max_abs)} (error ratio {fmt(c.error_ratio)}), against {fmt(in_run)} in the "
        "full run: the error was passed on, not made"
    )
