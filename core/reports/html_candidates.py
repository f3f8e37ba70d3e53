"""The HTML report's candidates part (a run with several candidates): the verdict per
candidate, the outputs x candidates table (max abs and pass/FAIL, as in the terminal), and
the candidates x outputs grid. parity.reports.html_report places it and adds each failing
candidate's
details; every user string goes through parity.text.html_text here."""

from __future__ import annotations

from collections.abc import Callable

from parity.labels import status_label, verdict_label
from parity.results import ValidationRun
from parity.show.candidate_views import candidate_cells, verdict_counts
from parity.show.cause_labels import INTENDED_WORDS, intended_outputs, run_cause
from parity.show.format import reference_text
from parity.show.summary import headline
from parity.text import count_text, number_text
from parity.text import html_text as _e

__all__ = ["candidates_header", "candidate_heading", "candidates_section"]


def candidates_header(run: ValidationRun) -> str:
    counts = verdict_counts(run)
    n = sum(counts.values())
    parts = [f"{counts['pass']} of {n} candidates pass"]
    parts += [f"{counts['fail']} fail"] * bool(counts["fail"])
    parts += [f"{counts['error']} could not be run"] * bool(counts["error"])
    sets = len(run.input_sets)
    outputs = count_text(len(run.output_names), "output")
    summary = f"{', '.join(parts)} ({outputs}, {count_text(sets, 'input set')})"
    look = run_cause(run)  # amber, and named, where every failure is intended
    intended = f" · {_e(look.intended)}" if look.intended else ""
    return (
        f"<header><h1>Parity report</h1>"
        f"<div class='verdict {look.css}'>{_e(verdict_label(run.verdict))}{intended}</div>"
        f"<p class='summary'>{_e(headline(run))}</p><p>{_e(summary)}</p>"
        f"<p>{_e(reference_text(run))}</p>{_findings(run)}</header>"
    )


def _findings(run: ValidationRun) -> str:
    """ "What we found", as a one-file report has it: each finding about one candidate
    starts with its label (parity.show.findings puts it there, for every front)."""
    found = run.findings
    if not found:
        return ""
    items = "".join(f"<li class='finding {_e(f.kind)}'>{_e(f.text)}</li>" for f in found)
    return f"<h2 class='findings'>What we found</h2><ul class='findings'>{items}</ul>"


def candidates_section(run: ValidationRun, figure_html: Callable[[object, str], str]) -> str:
    """The candidates table, then outputs (rows) x candidates (columns), then the grid."""
    from parity.show.candidate_figures import candidates_grid

    infos = run.infos
    head = (
        "<tr><th>#</th><th>ONNX file</th><th>provider</th><th>opt level</th><th>verdict</th>"
        "<th>ORT time</th><th>notes / error</th></tr>"
    )
    rows = []
    for i in infos:
        look = run_cause(run, i.index)  # amber, named, where every failure is intended
        verdict = verdict_label(look.verdict) + (f" · {look.intended}" if look.intended else "")
        said = i.error if i.error is not None else "; ".join(i.notes)
        cls = look.css if look.css in ("pass", "intended") else "fail"
        rows.append(
            f"<tr class='{cls}'><td>{i.index}</td>"
            f"<td class='name'>{_e(i.onnx)}</td><td>{_e(i.provider)}</td>"
            f"<td>{_e(i.ort_opt_level)}</td><td class='status'>{_e(verdict)}</td>"
            f"<td>{i.seconds:.3f} s</td><td>{_e(said)}</td></tr>"
        )
    cells = {(c.candidate.index, c.name): c for c in candidate_cells(run)}
    intended = intended_outputs(run)
    side_head = "<tr><th>output</th>" + "".join(f"<th>#{i.index}</th>" for i in infos) + "</tr>"
    side_rows = []
    for name in run.output_names:
        tds = []
        for i in infos:
            cell = cells.get((i.index, name))
            if i.error is not None:
                tds.append("<td class='bad'>error</td>")
            elif cell is None:
                tds.append("<td>-</td>")
            else:
                w = cell.worst
                value = number_text(w.stats.max_abs if w.stats is not None else None)
                cause = intended.get((i.index, name), "")
                status = status_label(w.status, "words", cause)
                cls = "ok" if w.status.passed else "intended" if cause else "bad"
                tds.append(f"<td class='{cls}'>{value} {_e(status)}</td>")
        side_rows.append(f"<tr><td class='name'>{_e(name)}</td>{''.join(tds)}</tr>")
    note = (
        "Each cell: the candidate's largest max |error| for that output over the input sets, "
        "and its worst status" + (f"; {INTENDED_WORDS}." if intended else ".")
    )
    return (
        "<section><h2>Candidates</h2>"
        f"<div class='scroll'><table class='candidates'>{head}{''.join(rows)}</table></div>"
        f"<h3>Outputs × candidates</h3><p>{_e(note)}</p>"
        f"<div class='scroll'><table class='side'>{side_head}{''.join(side_rows)}</table></div>"
        f"{figure_html(candidates_grid(run), 'grid')}</section>"
    )


def candidate_heading(run: ValidationRun, index: int) -> str:
    view = run.candidate(index)
    look = run_cause(run, index)
    said = verdict_label(look.verdict) + (f" · {look.intended}" if look.intended else "")
    return (
        f"<h2 class='candidate {look.css}'>Candidate {_e(view.label)}: {_e(said)}</h2>"
        f"<p class='name'>{_e(view.info.onnx)}</p>"
    )
