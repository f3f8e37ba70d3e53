"""The terminal's few lines about a layers result: where it starts, how big the jump, what
follows. Names are printed as text (repr, and each line through parity.text.terminal_text: an
op type, a note or a dim name from a file starts no line and moves no cursor); numbers
and the jump's wording come from parity.layers.views, as in the dashboard and the HTML."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from parity.labels import OUTSIDE_MODULES
from parity.layers import criterion
from parity.layers.birth_words import birth_sentence, other_lines
from parity.layers.precision_view import precision_lines
from parity.layers.result import LayersResult, LayerStatus, LayerValue
from parity.layers.views import fmt, jump_words, metric_of, place_words
from parity.text import ratio_text, terminal_text

if TYPE_CHECKING:  # annotation only
    from parity.results import ValidationRun


def format_layers(
    result: LayersResult, *, after: int = 4, labels: Mapping[int, str] | None = None
) -> str:
    other = "candidate" if result.matching == "onnx names" else "torch"  # ONNX against ONNX
    head = (
        f"Layers: {result.matched} values matched ({result.matching}); "
        f"{result.unmatched_onnx} ONNX values and {result.unmatched_torch} {other} values "
        "not matched"
    )
    lines = [head]
    first = result.first_divergence
    if result.matched == 0:
        lines.extend(f"  {note}" for note in result.notes)
        return _joined(lines)
    if first is None:
        # a value that is not comparable (int8 rounding, a fusion) is no "largest" anything
        compared = [v for v in result.values if v.status != LayerStatus.NOT_COMPARABLE.value]
        worst = max(compared, key=lambda v: metric_of(v, "error_ratio") or 0.0, default=None)
        lines.append("  no value diverges (see the criterion in the JSON report)")
        rounded = {v.onnx_value for v in result.values if (v.reason or "").startswith("int8")}
        if rounded:
            lines.append(
                f"  {len(rounded)} value(s) made with quantized values: int8 rounding by "
                "design, not a birth (the quantization-aware reference judges the file)"
            )
        lines.extend(_confirmed(result))
        if worst is not None:
            lines.append(f"  largest error: {_where(worst)}  error_ratio {fmt(worst.error_ratio)}")
        jumped = max(compared, key=lambda v: v.jump or 0.0, default=None)
        if jumped is not None and jumped.jump:
            why = (  # above the threshold, not diverging: what feeds it erred as much
                "carried: a jump under the criterion's minimum"
                if jumped.status == LayerStatus.CARRIED.value
                else f"under {_threshold_words(result, jumped)}"
            )
            lines.append(
                f"  largest jump: {_where(jumped)}  {ratio_text(jumped.jump)} (error_ratio "
                f"{fmt(jumped.error_ratio)}, {why})"
            )
        lines.extend(_notes(result))
        return _joined(lines)
    born = LayerStatus(first.status).born
    place = place_words(result, first)
    if born and place is not None:
        lines.append(
            f"  diverges first in {place} (value {first.onnx_value!r}, the input of "
            f"{first.feeds!r}), input set {first.input_set}"
        )
    elif born:
        lines.append(f"  diverges first at {_where(first)}, input set {first.input_set}")
    else:  # named by a precision check (a QDQ pair's loss), not by the criterion
        lines.append(
            f"  named as the first divergence: {_where(first)}, input set {first.input_set} "
            f"(the criterion alone judges it {_STATUS_WORDS.get(first.status, first.status)})"
        )
    status = f", status {first.status}" if born else ""
    lines.append(
        f"  error_ratio {fmt(first.error_ratio)} ({jump_words(first)}); "
        f"max abs {fmt(first.max_abs)}, max rel {fmt(first.max_rel)}{status}"
    )
    lines.extend(_confirmed(result))
    later = result.after_first(after)
    if later:
        lines.append("  then:")
        lines.extend(
            f"    {_where(v)}  error_ratio {fmt(v.error_ratio)}  {v.status}" for v in later
        )
    lines.extend(_per_set(result, labels or {}))
    lines.extend(_notes(result))
    return _joined(lines)


def _joined(lines: list[str]) -> str:
    """The lines as one text, each one line of text whatever a file named its parts."""
    return "\n".join(terminal_text(line) for line in lines)


def _notes(result: LayersResult) -> list[str]:
    """What the run says about how it compared (its torch side, what was left out)."""
    return [f"  note: {note}" for note in result.notes]


_STATUS_WORDS = {
    LayerStatus.CARRIED.value: "carried: its error is no bigger than the error flowing into it",
    LayerStatus.PASS.value: "within its threshold",
    LayerStatus.NOT_COMPARED.value: "not comparable",
    LayerStatus.NOT_COMPARABLE.value: "not comparable (no torch value stands for it)",
}


def _threshold_words(result: LayersResult, v: LayerValue) -> str:
    """The threshold `v` was judged at: its dtype's (float16 and bfloat16 are looser)."""
    if not v.dtype:
        return f"the threshold {fmt(result.threshold)}"
    threshold = criterion.threshold_for(v.dtype)
    if threshold == criterion.THRESHOLD:
        return f"the threshold {fmt(threshold)}"
    return f"its {v.dtype} threshold {fmt(threshold)}"


def _per_set(result: LayersResult, labels: Mapping[int, str]) -> list[str]:
    lines = per_set_lines(result, labels)
    return (
        ["  first divergence per input set:", *(f"    {line}" for line in lines)] if lines else []
    )


def per_set_lines(result: LayersResult, labels: Mapping[int, str]) -> list[str]:
    """Each input set's (an hf: run's: each step's) first divergence, one line each, when
    several sets ran (the terminal and the HTML report both list these)."""
    if len(result.input_sets) < 2:
        return []
    firsts = {v.input_set: v for v in result.firsts}
    lines = []
    for s in result.input_sets:
        name = labels.get(s) or f"input set {s}"
        v = firsts.get(s)
        if v is None:
            lines.append(f"{name}: none")
            continue
        c = result.confirmation_of(v)
        said = f", {c.outcome} alone" if c is not None else ", not re-run alone"
        lines.append(f"{name}: {_where(v)}  {v.status}{said}")
    return lines


def _confirmed(result: LayersResult) -> list[str]:
    """Re-running flagged nodes alone: what it said of the first, and which were carried."""
    sentence = birth_sentence(result)
    lines = [f"  {sentence}"] if sentence else []
    return lines + [f"  {line}" for line in other_lines(result)]


def _where(v: LayerValue) -> str:
    if v.torch_module is None and v.torch_node is None:  # ONNX against ONNX: no module
        return f"{v.onnx_op} node {v.onnx_node!r} -> {v.onnx_value!r}"
    module = v.torch_module if v.torch_module else OUTSIDE_MODULES
    if v.feeds is not None:  # ops between modules: the module after them is not the place
        where = f"{v.onnx_op} node {v.onnx_node!r} -> {v.onnx_value!r}"
        return f"{module!r}: {where} (the input of {v.feeds!r})"
    node = f" fx {v.torch_node!r}" if v.torch_node and v.torch_node != v.onnx_value else ""
    return f"{module!r}: {v.onnx_op} node {v.onnx_node!r} -> {v.onnx_value!r}{node}"


def format_run_layers(run: ValidationRun) -> str:
    """The terminal's layers section: the result and its precision lines; when several
    candidates were compared layer by layer (ONNX against ONNX), each candidate's own under
    its label, in the candidates' order, so none is left out."""
    if run.is_multi_candidate and any(c.layers is not None for c in run.candidates):
        return "\n\n".join(
            f"Layers of candidate {terminal_text(c.label)}:\n" + _with_precision(c.layers)
            for c in run.candidates
            if c.layers is not None
        )
    assert run.layers is not None
    labels = {s.index: s.label for s in run.input_sets if s.label}
    return _with_precision(run.layers, labels)


def _with_precision(result: LayersResult, labels: Mapping[int, str] | None = None) -> str:
    text = format_layers(result, labels=labels)
    return text + "".join(f"\n  {terminal_text(line)}" for line in precision_lines(result))
