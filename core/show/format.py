"""Plain-text rendering of a run for terminals: a per-output table and the verdict. Every
string from a file (names, paths, messages) is one field of text (parity.text.terminal_text)."""

from __future__ import annotations

from parity.judge.where import WhereProfile, where_of
from parity.labels import set_noun, status_label, worst_first, wrong_pair_note
from parity.results import OutputComparison, RunKind, Status, ValidationRun
from parity.run.input_binding import BY_POSITION, binding_text
from parity.show.cause import cause_line
from parity.show.rows import COLUMNS, comparison_rows
from parity.text import aligned_table, count_text, number_pair_text, shape_text, terminal_text
from parity.verdict import Judge, Verdict

MESSAGE_LINES = 20  # a comparison's message has a few (numpy.testing's); more are cut
TERMINAL_COLUMNS = tuple(c for c in COLUMNS if c.key != "message")  # messages follow the table


def format_table(run: ValidationRun) -> str:
    columns = TERMINAL_COLUMNS
    if len(run.input_sets) <= 1:
        columns = tuple(c for c in columns if c.key != "set")
    rows = [[c.short_header for c in columns]] + [
        [row.cell(c.key, "terminal") for c in columns] for row in comparison_rows(run)
    ]
    return aligned_table(rows)


def _count(n: int, noun: str) -> str:
    return count_text(n, noun)


def format_verdict(run: ValidationRun) -> str:
    """The terminal's last line: the verdict, by tolerance or by cause (parity.show.cause)."""
    if run.judge is Judge.CAUSE and run.verdict is not Verdict.ERROR:
        return cause_line(run)
    unit = set_noun(run)
    size = f"{_count(len(run.output_names), 'output')} × {_count(len(run.input_sets), unit)}"
    failing = [c for c in run.verdict_rows if not c.status.passed]
    answers = run.answer_criteria  # --min-agreement: judged on the samples' answers
    below = [terminal_text(n) for n, passed in answers.items() if not passed]
    padded = run.generation.padded_batch if run.generation is not None else None
    batch = padded is not None and padded.fails  # parity.hf.padded_batch
    if not failing and not below and not batch:
        on = f"; {', '.join(map(terminal_text, answers))} on its answers" if answers else ""
        return f"PASS: every output within tolerance ({size}){on}"
    if not failing and below:
        return f"FAIL: below its --min-agreement on the samples' answers: {', '.join(below)}"
    if not failing and padded is not None:
        return (
            f"FAIL: every step within tolerance ({size}), but not the prompts as one "
            f"{padded.side}-padded batch ({terminal_text(padded.output)})"
        )
    names = sorted({terminal_text(c.name) for c in failing})
    where = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"FAIL: {len(failing)} of {len(run.outputs)} comparisons ({size}) failed: {where}"
        + _wrong_pair_line(run)
    )


def format_input_sets(run: ValidationRun) -> str:
    lines = []
    for s in run.input_sets:
        shapes = ", ".join(
            f"{terminal_text(n)}{shape_text(tuple(a.shape))}" for n, a in s.feeds.items()
        )
        label = f"  [{terminal_text(s.label)}]" if s.label else ""
        lines.append(f"input set {s.index}: {shapes}{label}")
    return "\n".join(lines)


def format_failure(c: OutputComparison, where: WhereProfile | None = None) -> str:
    """numpy.testing-style lines for one failing output, where the worst element sits, and
    where the mismatches are (parity.judge.where)."""
    said = [line.strip() for line in c.message.splitlines() if line.strip()]
    lines = [terminal_text(line) for line in said[:MESSAGE_LINES]]
    if len(said) > MESSAGE_LINES:  # a saved run's message is a file's text: bounded
        lines.append(f"({len(said) - MESSAGE_LINES:,} more lines of its message cut)")
    s = c.stats
    if s is not None and s.worst_index is not None and c.status is Status.FAIL:
        ref, onnx = number_pair_text(s.ref_at_worst, s.onnx_at_worst)
        lines.append(f"Worst element at index {list(s.worst_index)}: ref {ref}, onnx {onnx}")
    if where is not None:
        lines.append(f"Where: {terminal_text(where.summary)}")
    head = f"set {c.input_set} {terminal_text(c.name)}: "
    return head + ("\n" + " " * len(head)).join(lines or [status_label(c.status, "terminal")])


def reference_text(run: ValidationRun) -> str:
    """What the candidates were compared with: the model, or the reference ONNX file and
    how it ran (ONNX against ONNX)."""
    p = run.provenance
    if p.kind is RunKind.ONNX and p.reference_file:
        how = terminal_text(f"{p.reference_provider}, {p.reference_opt_level}")
        return f"reference {terminal_text(p.reference_file)} ({how})"
    return f"model {terminal_text(run.model)}"


def run_head(run: ValidationRun, *, onnx: bool = True) -> str:
    """The reference, the ONNX file (a run with one candidate), and how torch got the feeds
    when it was not by name."""
    head = reference_text(run) + (f"\nonnx  {terminal_text(run.onnx)}" if onnx else "")
    if onnx:  # one candidate: what was adapted or computed otherwise, as every front says it
        head += "".join(f"\nnote: {terminal_text(n)}" for n in run.infos[0].notes)
    if run.provenance.inputs_by == BY_POSITION:  # by name is the norm; position is a warning
        fed = binding_text(run.provenance.inputs_by, run.provenance.inputs_note)
        head += "\ninputs fed " + terminal_text(fed)
    return head


def format_run(run: ValidationRun) -> str:
    head = run_head(run)
    view, sets = _batches_view(run)
    failures = [format_failure(c, where_of(view, c)) for c in view.outputs if not c.status.passed]
    parts = [head, sets or format_input_sets(run), "", format_table(view)]
    if failures:
        parts += ["", *failures]
    parts += ["", format_verdict(run)]
    return "\n".join(parts)


DATA_ROWS_ALL = 4
"""Batches of a data run whose every row the terminal lists; past it, each output's worst."""


def _batches_view(run: ValidationRun) -> tuple[ValidationRun, str]:
    """A data run (--data) of many batches as the terminal shows it: each output's worst batch
    (hundreds of batches would be screens of rows; --json keeps every one), and one line for
    the batches. Any other run: itself, and ""."""
    n = len(run.input_sets)
    if run.data is None or n <= DATA_ROWS_ALL:
        return run, ""
    worst: dict[str, OutputComparison] = {}
    for c in worst_first(run.outputs):
        worst.setdefault(c.name, c)
    first, last = run.input_sets[0].label, run.input_sets[-1].label
    line = (
        f"{n} batches of your samples ({first} ... {last}); each output's worst batch below "
        "(--json: every batch)"
    )
    return run.with_rows([c for c in run.outputs if worst.get(c.name) is c]), line


def _wrong_pair_line(run: ValidationRun) -> str:
    note = wrong_pair_note(run)
    return "" if note is None else f"\n{terminal_text(note[0].upper() + note[1:])}"


def sample_name(sample: int, sample_id: str) -> str:
    """A data sample as every page names it: ``sample 90``, with its id where that says more
    than its number (a file's path, a row's key): ``sample 3 · cats/a.png``."""
    return f"sample {sample}" + (f" · {sample_id}" if sample_id != str(sample) else "")
