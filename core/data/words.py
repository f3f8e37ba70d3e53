"""The sentences a data run leads with, made once and said by every front (the findings,
the terminal, the HTML report, the Overview): the answer a stakeholder asks, per output."""

from __future__ import annotations

from collections import Counter

from parity.data.result import DataOutput, DataResult, Flip

FLIPS_SHOWN = 10  # changed samples listed in the terminal and the HTML report
ONE_CLASS_AT_LEAST = 3  # flips, all to one class, that make the "one class" sentence


def _pct(x: float) -> str:
    text = f"{100 * x:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "%"


def _points(x: float) -> str:
    return f"{100 * x:+.1f} points"


def answer_sentence(d: DataResult, o: DataOutput, *, named: bool) -> str:
    """One output's answer in one sentence (`named`: say which output)."""
    of = f" ({o.name})" if named else ""
    head = f"On {o.samples} of your samples"
    if o.task == "classification":
        text = _classes(o, head, of)
    elif o.task == "embedding":
        text = _embedding(o, head, of)
    else:
        text = _regression(o, head, of)
    if o.min_agreement is not None:
        verdict = "passes" if o.passed else "fails"
        text += f" Output {o.name} {verdict} its criterion: agreement {_pct(o.agreement)}"
        text += f" against at least {_pct(o.min_agreement)} (--min-agreement)."
    return text


def _classes(o: DataOutput, head: str, of: str) -> str:
    if not o.n_flips:
        text = f"{head} the ONNX file gives the same class{of} for all {o.samples}"
    else:
        share = _pct(o.n_flips / o.samples)
        text = f"{head} the ONNX file changes the class{of} of {o.n_flips} ({share})"
        target = one_class(o.flips)
        if target is not None:  # the near-tie split says nothing when the error is a bug
            text += f", all to class {target}: a shift toward one class, likely a bug"
        else:
            ties = sum(f.near_tie for f in o.flips)
            real = len(o.flips) - ties
            text += f": {ties} near tie{'s' * (ties != 1)}, {real} real change{'s' * (real != 1)}"
    a = o.accuracy
    if a is None:
        return text + "."
    if a.torch == a.onnx:
        return text + f"; accuracy {_pct(a.torch)} on both."
    noise = "within noise" if a.within_noise else "beyond noise"
    low, high = a.interval
    return text + (
        f"; accuracy {_pct(a.torch)} with torch, {_pct(a.onnx)} with the ONNX file "
        f"({_points(a.difference)}, 95% interval {_points(low)} to {_points(high)}: {noise})."
    )


def _embedding(o: DataOutput, head: str, of: str) -> str:
    cos = "" if o.cosine_min is None else f"cosine similarity at least {o.cosine_min:.4f}"
    mean = "" if o.cosine_mean is None else f" (mean {o.cosine_mean:.4f})"
    text = f"{head} the ONNX file's embeddings{of} keep {cos}{mean}"
    if o.neighbours_on >= 3:
        text += f"; the nearest neighbour is the same for {o.agree} of {o.neighbours_on}" + (
            f" (the first {o.neighbours_on} samples)" if o.neighbours_on < o.samples else ""
        )
    return text + "."


def _regression(o: DataOutput, head: str, of: str) -> str:
    if o.relative_error_max is None:
        return f"{head} output{of} was compared; its spread is zero."
    return (
        f"{head} output{of} differs from torch's by at most {_pct(o.relative_error_max)} of "
        f"its spread (median {_pct(o.relative_error_median or 0.0)}); {o.agree} of "
        f"{o.samples} within 1%."
    )


PROPOSED_AGREEMENT = 0.995  # the criterion proposed where the answers hold
PROPOSE_FROM = 0.995  # ... at or above this agreement, and no shift toward one class


def criterion_hint(o: DataOutput, values_fail: bool) -> str:
    """Where an output's element errors fail but its answers hold (a classification at or
    above PROPOSE_FROM agreement, its changes not all to one class): the criterion that
    judges it on them ("" otherwise, and once one is given)."""
    if o.min_agreement is not None or not values_fail or o.task != "classification":
        return ""
    if o.suggestion is not None:  # --suggest proposed one, checked: that one speaks
        return ""
    if o.agreement < PROPOSE_FROM or one_class(o.flips) is not None:
        return ""
    return (
        f" Its element errors fail the tolerance while its answers hold: to judge it on "
        f"them, --min-agreement {o.name}={PROPOSED_AGREEMENT}."
    )


def one_class(flips: tuple[Flip, ...]) -> int | None:
    """The class every changed sample went to, where there are enough to say so."""
    if len(flips) < ONE_CLASS_AT_LEAST:
        return None
    (target, count), *_ = Counter(f.onnx for f in flips).most_common(1)
    return target if count == len(flips) else None


def skipped_sentence(d: DataResult) -> str:
    """The samples that could not be used, named ("" when none)."""
    if not d.skipped:
        return ""
    shown = "; ".join(f"{s.id}: {s.reason}" for s in d.skipped[:3])
    more = f"; and {len(d.skipped) - 3} more" if len(d.skipped) > 3 else ""
    n = len(d.skipped)
    return f"{n} sample{'s' * (n != 1)} skipped (could not be used): {shown}{more}."


def flip_line(f: Flip, task: str, *, ties: bool = True) -> str:
    """One changed sample: index, id (where it says more), both answers, torch's margin, and
    near tie or not (`ties` False: not said, the changes being a shift toward one class)."""
    what = "class" if task == "classification" else "nearest neighbour"
    kind = (" (near tie)" if f.near_tie else " (real change)") if ties else ""
    name = "" if f.id == str(f.sample) else f" ({f.id})"
    return (
        f"sample {f.sample}{name}: {what} {f.torch} with torch, {f.onnx} with the ONNX file; "
        f"torch's margin {f.torch_margin:.3g}{kind}"
    )


def suggestion_lines(d: DataResult) -> list[str]:
    """--suggest on a data run: each output's criterion, checked, or why none ([]: none
    asked)."""
    made = [o for o in d.outputs if o.suggestion is not None]
    if not made:
        return []
    lines = ["Suggested criteria on answers (--suggest):"]
    for o in made:
        g = o.suggestion
        assert g is not None
        if g.value is None:
            lines.append(f"  {o.name}: none, {g.reason}")
        else:
            lines.append(f"  --min-agreement {o.name}={g.value:g} ({g.reason})")
    return lines


def data_lines(d: DataResult) -> list[str]:
    """The terminal's block on the samples (the answers themselves lead the findings): each
    output's changed samples, the criteria --suggest proposes, then the skipped samples; []
    when there are none."""
    lines = []
    for o in d.outputs:
        if not o.flips:
            continue
        lines.append(f"Changed samples of {o.name} ({o.n_flips} of {o.samples}):")
        ties = one_class(o.flips) is None
        lines += ["  " + flip_line(f, o.task, ties=ties) for f in o.flips[:FLIPS_SHOWN]]
        if o.n_flips > FLIPS_SHOWN:
            lines.append(f"  ... and {o.n_flips - FLIPS_SHOWN} more (--json lists them all)")
    lines += suggestion_lines(d)
    if d.skipped:
        lines.append(f"Skipped samples ({len(d.skipped)}):")
        lines += [f"  {s.id}: {s.reason}" for s in d.skipped[:FLIPS_SHOWN]]
        if len(d.skipped) > FLIPS_SHOWN:
            lines.append(f"  ... and {len(d.skipped) - FLIPS_SHOWN} more (--json lists them all)")
    return lines
