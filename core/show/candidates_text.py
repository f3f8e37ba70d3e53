"""Several candidates as terminal text: one compact table (outputs as rows, candidates as
columns: max abs and pass/fail), then each candidate's verdict, then the overall verdict.

A single-candidate run keeps parity.show.format's per-output table; this is the side-by-side view.
"""

from __future__ import annotations

from parity.labels import WORST_WORDS, set_noun, status_label, verdict_label, worst_first
from parity.results import CandidateInfo, OutputComparison, Status, ValidationRun
from parity.show.cause_labels import intended_outputs, run_cause
from parity.show.format import format_failure, format_input_sets, run_head
from parity.text import aligned_table, number_text, terminal_text
from parity.verdict import Verdict

__all__ = ["candidate_verdict_text", "format_candidates", "overall_verdict_text"]


def _cell(c: OutputComparison | None, info: CandidateInfo, intended: str = "") -> str:
    if info.error is not None:
        return Verdict.ERROR
    if c is None:
        return "-"
    label = status_label(c.status, "terminal", intended)  # "float16 rounding" if intended
    if c.stats is None or c.status in (Status.MISSING, Status.SHAPE_MISMATCH):
        return label
    return f"{number_text(c.stats.max_abs)} {label}"


def candidates_table(run: ValidationRun) -> str:
    """Rows: (input set, output); columns: candidates #0, #1, ... (named in the legend)."""
    infos = run.infos
    by_key = {(c.candidate, c.input_set, c.name): c for c in run.outputs}
    intended = intended_outputs(run)
    multi_set = len(run.input_sets) > 1
    header = (["set"] if multi_set else []) + ["output"] + [f"#{i.index}" for i in infos]
    rows = [header]
    for s in run.input_sets:
        for name in run.output_names:
            cells = [
                _cell(by_key.get((i.index, s.index, name)), i, intended.get((i.index, name), ""))
                for i in infos
            ]
            rows.append(([str(s.index)] if multi_set else []) + [name] + cells)
    return aligned_table(rows)


def candidate_verdict_text(run: ValidationRun, info: CandidateInfo) -> str:
    """``PASS``, ``FAIL: 2 of 4 comparisons failed: logits`` or ``ERROR: <why>``."""
    view = run.candidate(info.index)
    verdict = run.candidate_verdict(info.index)
    if verdict is Verdict.ERROR:
        return f"{verdict_label(Verdict.ERROR)}: {terminal_text(info.error)}"
    failing = [c for c in view.outputs if not c.status.passed]
    if verdict is Verdict.PASS:
        return verdict_label(Verdict.PASS) + (" by cause" if failing else "")
    names = [terminal_text(n) for n in view.failing]
    where = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    head = verdict_label(Verdict.FAIL)
    said = f"{head}: {len(failing)} of {len(view.outputs)} comparisons failed: {where}"
    cause = run_cause(run, info.index).intended  # every failure what the file meant
    return said + (f" (each {cause}: what the file was meant to do)" if cause else "")


def overall_verdict_text(run: ValidationRun) -> str:
    infos = run.infos
    unit = set_noun(run)
    n_sets = len(run.input_sets)
    size = (
        f"{len(infos)} candidates × {len(run.output_names)} output(s) × {n_sets} {unit}"
        f"{'' if n_sets == 1 else 's'}"
    )
    verdicts = {v.index: run.candidate_verdict(v.index) for v in run.candidates}
    bad = [i for i in infos if verdicts[i.index] is not Verdict.PASS]
    if not bad:
        return f"{verdict_label(Verdict.PASS)}: every candidate passes every output ({size})"
    errors = sum(v is Verdict.ERROR for v in verdicts.values())
    fails = sum(v is Verdict.FAIL for v in verdicts.values())
    counts = [f"{fails} of {len(infos)} fail"] * bool(fails)
    counts += [f"{errors} could not be run"] * bool(errors)
    head = verdict_label(Verdict.ERROR if errors else Verdict.FAIL)
    return f"{head}: {', '.join(counts)} ({size}): " + ", ".join(
        terminal_text(i.label) for i in bad
    )


def _worst_failure(run: ValidationRun, info: CandidateInfo) -> str | None:
    failing = [c for c in run.candidate(info.index).outputs if not c.status.passed]
    if not failing:
        return None
    text = f"{terminal_text(info.label)}, worst ({WORST_WORDS}):\n" + _indent(
        format_failure(worst_first(failing)[0])
    )
    if len(failing) > 1:
        text += f"\n  (and {len(failing) - 1} more failing comparison(s); --json lists all)"
    return text


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def format_candidates(run: ValidationRun) -> str:
    """The whole run as terminal text, for a run with several candidates."""
    infos = run.infos
    head, input_sets = run_head(run, onnx=False), format_input_sets(run)
    legend = ["candidates"] + [
        f"  {terminal_text(i.label)}"
        + (f"  {terminal_text(i.onnx)}" if not i.label.startswith(f"#{i.index} {i.onnx} ") else "")
        + "".join(f"\n      note: {terminal_text(n)}" for n in i.notes)
        for i in infos
    ]
    verdicts = [f"{terminal_text(i.label)}: {candidate_verdict_text(run, i)}" for i in infos]
    failures = [text for i in infos if (text := _worst_failure(run, i)) is not None]
    parts = [head, input_sets, "", "\n".join(legend), "", candidates_table(run), "", *verdicts]
    if failures:
        parts += ["", *failures]
    parts += ["", overall_verdict_text(run)]
    return "\n".join(parts)
