"""A self-contained HTML report: one file that opens offline, for people who won't run Python.

Plotly's script is inlined once; every figure is a div that calls it, so the page makes no
network request. Figures come from parity.show.figures over parity.show.reductions' reduced
views (block max-pooled heatmaps, numpy-binned histograms), so the file stays a few MB whatever
the output sizes: about 4.8 MB of plotly.js plus well under 1 MB per failing output.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from parity.files.atomic import write_output
from parity.judge.pass_rule import RULE_SENTENCE
from parity.judge.where import WhereProfile, where_of
from parity.labels import status_label, verdict_label
from parity.results import OutputComparison, Status, ValidationRun
from parity.run.input_binding import binding_text
from parity.show.cause_labels import INTENDED_WORDS, intended_outputs, run_cause
from parity.show.colors import css_palette
from parity.show.rows import COLUMNS, ComparisonRow, comparison_rows
from parity.show.sentences import failing_outputs, other_failing_sets, output_facts
from parity.show.summary import notes, onnx_words, plain_summary
from parity.text import html_text as _e
from parity.text import number_pair_text, number_text, tolerance_text
from parity.verdict import Verdict
from parity.version import __version__

FIGURES_PER_FAILING_OUTPUT = 2  # error heatmap + |error| histogram (+ the where profile)
REPORT_MAX_CELLS = 200  # heatmap side in the report: 200x200 cells, ~0.2 MB each
WORST_K = 15
LAYER_ROWS = 8
MAX_DETAILED_OUTPUTS = 24
"""Failing outputs drawn with figures, worst first; the rest are listed (keeps a few MB)."""

_PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def write_html_report(run: ValidationRun, path: str | Path) -> Path:
    """Write the report for `run` to `path` (UTF-8) and return the path."""
    return write_output(path, render_html_report(run), what="HTML report")


def render_html_report(run: ValidationRun) -> str:
    """The whole page as one string."""
    from plotly.offline import get_plotlyjs

    if run.is_multi_candidate:
        sections = _candidate_sections(run)
    else:
        failing = _failing(run)
        sections = [  # plain words first (parity.show.summary), the numbers, then the notes
            _header(run, failing),
            _data(run),
            _numbers_lead(run, failing),
            _grid(run),
            _outputs_table(run),
            _failing_details(run, failing),
            _noise(run),
            _suggested(run),
            _generation(run),
            _layers(run),
            _technical_notes(run),
            _tolerances(run),
            _provenance(run),
            _environment(run),
        ]
    body = "\n".join(s for s in sections if s)
    title = f"Parity report: {run.verdict} - {Path(run.onnx).name or run.onnx}"
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        # No network, ever: the policy blocks any fetch the page (or a figure) might try.
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
        'img-src data: blob:; font-src data:">'
        f"<title>{_e(title)}</title><style>{css_palette()}{_CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head>\n<body>\n{body}\n"
        f"<footer>Written by Parity {_e(__version__)} on "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}.</footer>\n</body></html>\n"
    )


# ----------------------------------------------------------------------------- sections


def _candidate_sections(run: ValidationRun) -> list[str]:
    """Several candidates: their verdicts, table and grid (parity.reports.html_candidates), then
    each
    failing candidate's details as a single run's (its view, ValidationRun.for_candidate)."""
    from parity.reports.html_candidates import (
        candidate_heading,
        candidates_header,
        candidates_section,
    )

    sections = [candidates_header(run), candidates_section(run, _figure_html)]
    for view in _failing_views(run):
        index = view.candidates[0].index
        failing = _failing(view)
        details = _failing_details(view, failing)
        heading = candidate_heading(run, index)
        sections += [heading, _numbers_lead(view, failing), _outputs_table(view), details]
    return [*sections, _input_sets(run), _tolerances(run), _environment(run)]


def _failing_views(run: ValidationRun) -> list[ValidationRun]:
    return [run.for_candidate(v.index) for v in run.candidates if v.verdict is Verdict.FAIL]


def _failing(run: ValidationRun) -> list[tuple[OutputComparison, WhereProfile | None]]:
    """Each failing output's worst comparison, with where its mismatches are."""
    return [(c, where_of(run, c)) for c in failing_outputs(run)]


def _others(run: ValidationRun, c: OutputComparison) -> list[tuple[int, WhereProfile | None]]:
    """Where the output's other failing input sets have their mismatches (the headline
    sentence weighs every set)."""
    return [(x.input_set, where_of(run, x)) for x in other_failing_sets(run, c)]


def _header(run: ValidationRun, failing: list[tuple[OutputComparison, WhereProfile | None]]) -> str:
    """The verdict in plain words, what was compared, then the findings (where the export
    starts to diverge, rounding or a bug): a reader who stops here knows the answer."""
    plain = plain_summary(run)
    found = ""
    if plain.findings:
        items = "".join(
            f"<li class='finding {_e(f.kind)}'>{_e(f.text)}</li>" for f in plain.findings
        )
        found = f"<h2 class='findings'>What we found</h2><ul class='findings'>{items}</ul>"
    model = f"<p class='what'>{_e(run.model)} against {_e(onnx_words(run))}</p>"
    look = run_cause(run)  # amber, and named, where every failure is intended
    intended = f" · {_e(look.intended)}" if look.intended else ""
    return (
        f"<header><h1>Parity report</h1>"
        f"<div class='verdict {look.css}'>{_e(verdict_label(run.verdict))}{intended}</div>"
        f"<p class='summary'>{_e(plain.headline)}</p>{model}{found}</header>"
    )


def _numbers_lead(
    run: ValidationRun, failing: list[tuple[OutputComparison, WhereProfile | None]]
) -> str:
    """Per failing output, worst first, its facts one a line (parity.show.sentences.
    output_facts: the Overview's words)."""
    if not failing:
        return ""
    shown = failing[:MAX_DETAILED_OUTPUTS]
    facts = [output_facts(run, c, where, _others(run, c)) for c, where in shown]
    items = "".join(
        f"<li><b>{_e(f.head)}</b><ul>{''.join(f'<li>{_e(x)}</li>' for x in f.lines)}</ul></li>"
        for f in facts
    )
    more = len(failing) - MAX_DETAILED_OUTPUTS
    if more > 0:
        items += f"<li>{more} more failing output{_s(more)}: see the table below.</li>"
    return f"<section><h2>In numbers</h2><ul class='lead'>{items}</ul></section>"


def _data(run: ValidationRun) -> str:
    """--data: each output's changed samples by id (the answer itself leads the findings),
    and the samples that were skipped."""
    d = run.data
    if d is None:
        return ""
    from parity.data.words import FLIPS_SHOWN

    parts = [
        "<section><h2>Answers on your data</h2>",
        f"<p>{_e(d.source)}: {d.samples} samples ({_e(d.format)}, batches of {d.batch_size}).</p>",
    ]
    for o in d.outputs:
        what = "class" if o.task == "classification" else "neighbour"
        parts.append(f"<h3>{_e(o.name)}: {_e(o.task)}, {o.agree} of {o.samples} agree</h3>")
        if not o.flips:
            continue
        rows = "".join(
            f"<tr><td>{f.sample}</td><td>{_e(f.id)}</td><td>{f.torch}</td><td>{f.onnx}</td>"
            f"<td>{f.torch_margin:.3g}</td><td>{'near tie' if f.near_tie else 'real change'}"
            "</td></tr>"
            for f in o.flips[: 5 * FLIPS_SHOWN]
        )
        more = o.n_flips - min(len(o.flips), 5 * FLIPS_SHOWN)
        parts.append(
            f"<table><tr><th>sample</th><th>id</th><th>torch {what}</th><th>ONNX {what}</th>"
            f"<th>torch margin</th><th></th></tr>{rows}</table>"
            + (f"<p>... and {more} more (the JSON report lists them all).</p>" if more else "")
        )
    if d.skipped:
        items = "".join(f"<li>{_e(s.id)}: {_e(s.reason)}</li>" for s in d.skipped[:50])
        parts.append(f"<h3>Skipped samples ({len(d.skipped)})</h3><ul>{items}</ul>")
    parts.append("</section>")
    return "".join(parts)


def _technical_notes(run: ValidationRun) -> str:
    """What the verdict holds under, for the engineer (parity.show.summary.notes)."""
    items = "".join(f"<li>{_e(line)}</li>" for line in notes(run))
    return f"<section><h2>Technical notes</h2><ul class='notes'>{items}</ul></section>"


def _provenance(run: ValidationRun) -> str:
    """What the run was made from: files, content hashes, opset (after the results)."""
    rows = [("model", run.model), ("ONNX", run.onnx)]
    identity = run.saved.identity if run.saved is not None else {}
    onnx_hash = identity.get("onnx_sha256") or run.provenance.onnx_sha256
    model_hash = identity.get("model_sha256") or run.provenance.model_sha256
    if onnx_hash:
        rows.append(("ONNX SHA-256", onnx_hash))
    if model_hash:
        rows.append(("model SHA-256", model_hash))
    if run.signature is not None:
        rows.append(("opset / producer", f"{run.signature.opset} / {run.signature.producer}"))
    for label, key in (("weights", "weights_file"), ("reference outputs", "reference_file")):
        if getattr(run.provenance, key):
            rows.append((label, getattr(run.provenance, key)))
    if inputs := binding_text(run.provenance.inputs_by, run.provenance.inputs_note):
        rows.append(("inputs fed", inputs))
    if run.saved is not None:
        rows.append(("saved run", run.saved.path))
    return f"<section><h2>Files</h2>{_kv_table(rows)}</section>"


def _outputs_table(run: ValidationRun) -> str:
    head = "<tr>" + "".join(f"<th>{_e(c.header)}</th>" for c in COLUMNS) + "</tr>"
    rows = [
        f"<tr class='{_row_class(row)}'>" + "".join(_cell(row, c.key) for c in COLUMNS) + "</tr>"
        for row in comparison_rows(run)
    ]
    n_pass = sum(c.status.passed for c in run.outputs)
    caption = f"{n_pass} of {len(run.outputs)} (input set, output) pairs pass"
    return (
        f"<section><h2>Outputs</h2><p>{_e(caption)}.</p>"
        f"<div class='scroll'><table class='outputs'>{head}{''.join(rows)}</table></div></section>"
    )


def _row_class(row: ComparisonRow) -> str:
    """pass, fail, or intended (a failure the file meant: amber, parity.show.cause_labels);
    a pass a finding calls a bug the tolerance hides is red."""
    if row.status.passed:
        return "fail" if row.hidden_bug else "pass"
    return "intended" if row.intended and row.status is Status.FAIL else "fail"


def _cell(row: ComparisonRow, key: str) -> str:
    """One cell of the outputs table: the row's text (parity.show.rows), escaped, with the classes
    and the mismatch bar the page's style sheet draws."""
    text = _e(row.cell(key))
    if key == "output":
        return f"<td class='name'>{text}</td>"
    if key == "status":
        return f"<td class='status'>{text}</td>"
    if (key == "shape" and row.status is Status.SHAPE_MISMATCH) or (
        key == "dtype" and row.status is Status.DTYPE_MISMATCH
    ):
        return f"<td class='bad'>{text}</td>"
    if key == "mismatch" and row.mismatch_fraction is not None and row.n_mismatch is not None:
        width = min(100.0, 100.0 * row.mismatch_fraction)
        return f"<td><div class='bar'><span style='width:{width:.2f}%'></span></div>{text}</td>"
    return f"<td>{text}</td>"


def _input_sets(run: ValidationRun) -> str:
    """The input sets' table alone (a run with several candidates has its own grid)."""
    return f"<section><h2>Input sets</h2>{_input_sets_table(run)}</section>"


def _input_sets_table(run: ValidationRun) -> str:
    sets = "".join(
        f"<tr><td>{s.index}</td><td>{_e(s.label)}</td><td>"
        + ", ".join(
            f"{_e(n)}: {_e(d['dtype'])} {_e(str(d['shape']))}" for n, d in s.describe().items()
        )
        + "</td></tr>"
        for s in run.input_sets
    )
    return f"<table><tr><th>set</th><th>label</th><th>inputs</th></tr>{sets}</table>"


def _grid(run: ValidationRun) -> str:
    """Input sets x outputs (pass / fail / error per size at a glance), the sets' sizes, then
    the nodes frozen at export (a static axis is said once, among the findings)."""
    parts = ["<section><h2>Input sets</h2>"]
    if run.outputs:
        from parity.show.figures import verdict_grid

        parts.append(_figure_html(verdict_grid(run), "grid"))
        if intended_outputs(run):  # the amber cells say what they are
            parts.append(f"<p class='legend'>{_e(INTENDED_WORDS[0].upper())}"
                         f"{_e(INTENDED_WORDS[1:])}; red fails by a bug or by what nothing "
                         "explains.</p>")  # fmt: skip
    parts.append(_input_sets_table(run))  # under its heading, not under the frozen list's
    if run.frozen:
        items = "".join(f"<li>{_e(f.text)}</li>" for f in run.frozen)
        parts.append(f"<h2 class='findings'>Frozen at export</h2><ul class='frozen'>{items}</ul>")
    parts.append("</section>")
    return "".join(parts)


def _noise(run: ValidationRun) -> str:
    """--noise-floor: per float32 output, whether ONNX's error is rounding at the precision
    the candidate computes it (parity.judge.noise_floor says it)."""
    if not any(c.noise is not None for c in run.outputs):
        return ""
    from parity.judge.noise_floor import noise_lines

    items = "".join(f"<li>{_e(line)}</li>" for line in noise_lines(run.outputs))
    return (
        "<section><h2>Rounding noise</h2><p>At each output's precision, against torch run "
        "again in float64 (the verdict stays the tolerance's):</p>"
        f"<ul class='noise'>{items}</ul></section>"
    )


def _suggested(run: ValidationRun) -> str:
    """--suggest: the tolerances checked on fresh input sets, in the terminal's words."""
    if run.suggested_tolerances is None:
        return ""
    from parity.judge.suggest import suggestion_lines

    lines = suggestion_lines(run.suggested_tolerances)
    if not lines:
        return ""
    head, *rest = lines
    items = "".join(f"<li>{_e(line)}</li>" for line in rest)
    return (
        f"<section><h2>Suggested tolerances</h2><p>{_e(head)}</p>"
        f"<ul class='suggested'>{items}</ul></section>"
    )


def _generation(run: ValidationRun) -> str:
    """Causal LMs: ONNX Runtime's free-running tokens beside torch's, where they part."""
    g = run.generation
    if g is None or not (g.prompts or g.free_run_note):
        return _padded(run)
    from parity.show.generation_text import parting_words, tie_words

    parts = ["<section><h2>Free-running generation</h2>"]
    if g.free_run_note:
        parts.append(f"<p class='note'>{_e(g.free_run_note)}</p>")
    if g.prompts:
        parts.append(
            "<p>ONNX Runtime generated greedily on its own (its own KV cache fed back) from "
            "the same prompts, for as many new tokens as torch's generate() (the verdict "
            "stays the tolerances'):</p><table class='generation'><tr><th>prompt</th>"
            "<th>torch</th><th>ONNX Runtime</th><th>match</th><th>where they part</th></tr>"
        )
        for p in g.prompts:
            d = p.first_divergence
            where = parting_words(p) + ("" if d is None else f"; {tie_words(d)}")
            cls = "" if d is None else (" class='tie'" if d.near_tie else " class='diverges'")
            parts.append(
                f"<tr{cls}><td>{_e(p.prompt)}</td><td>{_e(p.torch_text)}</td>"
                f"<td>{_e(p.onnx_text)}</td><td>{p.match_ratio:.0%}</td><td>{_e(where)}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</section>")
    return "".join(parts) + _padded(run)


_DIVERGES = " class='diverges'"


def _padded(run: ValidationRun) -> str:
    """A decoder file with no position_ids: the prompts as one padded batch."""
    b = run.generation.padded_batch if run.generation is not None else None
    if b is None:
        return ""
    if not b.prompts:  # not run: why
        return f"<section><h2>{_e(b.title)}</h2><p class='note'>{_e(b.text)}</p></section>"
    from parity.show.generation_text import padded_prompt_words, padded_why

    rows = "".join(
        f"<tr{'' if p.batch_passed else _DIVERGES}><td>{_e(p.prompt)}</td>"
        f"<td>{_e(padded_prompt_words(p))}</td></tr>"
        for p in b.prompts
    )
    return (
        f"<section><h2>{_e(b.title)}</h2><p>{_e(b.title)}: {_e(padded_why(b))}.</p>"
        f"<table class='generation'><tr><th>prompt</th><th>in the batch and alone</th></tr>"
        f"{rows}</table><p>{_e(b.text)}</p></section>"
    )


def _layers(run: ValidationRun) -> str:
    """The layers comparison, when the run has one: where the error is born, in words, along
    the graph's depth and over the module tree (parity.layers draws and words it)."""
    result = getattr(run, "layers", None)
    if result is None:
        return ""
    from parity.layers import figures as layer_figures
    from parity.layers import views

    parts = ["<section><h2>Layers</h2>"]
    cls = "diverges" if result.first_divergence is not None else "note"
    parts.append(f"<p class='{cls}'>{_e(views.divergence_sentence(result))}</p>")
    parts.append(_confirmation_html(result))
    from parity.layers.text import per_set_lines

    labels = {s.index: s.label for s in run.input_sets if s.label}
    per_set = per_set_lines(result, labels)  # an hf: run's steps, each its own divergence
    if per_set:
        items = "".join(f"<li>{_e(line)}</li>" for line in per_set)
        parts.append(f"<p>First divergence per input set:</p><ul class='limits'>{items}</ul>")
    parts.append(f"<p>{_e('Criterion: ' + str(result.criterion))}</p>")
    limits = views.limits(result)
    if limits:
        items = "".join(f"<li>{_e(line)}</li>" for line in limits)
        parts.append(f"<p>What was compared, and what was not:</p><ul class='limits'>{items}</ul>")
    from parity.layers.precision_view import fix_call, precision_lines, quantize_call

    keep = precision_lines(result)  # a quantized or float16 candidate (parity.layers.qdq)
    if keep:
        items = "".join(f"<li>{_e(line)}</li>" for line in keep)
        call = quantize_call(result) or fix_call(result) or ""
        parts.append(f"<p>What to keep in higher precision:</p><ul>{items}</ul>")
        parts.append(f"<pre>{_e(call)}</pre>" if call else "")
    if result.values:
        line = views.pass_line(result, "error_ratio", run.tolerances.default.atol)
        fig = layer_figures.depth_plot(result, metric="error_ratio", threshold=line)
        parts.append(_figure_html(fig, "depth"))
        if _has_modules(result):
            tree = layer_figures.module_tree(result, metric="error_ratio", threshold=line)
            parts.append(_figure_html(tree, "tree"))
        parts.append(_layer_rows(result))
    parts.append("</section>")
    return "".join(parts)


def _confirmation_html(result) -> str:
    """The first divergence's node re-run alone on torch's inputs, and the values carried."""
    from parity.layers.birth_words import birth_sentence, other_lines

    sentence = birth_sentence(result)
    html = f"<p class='confirmation'>{_e(sentence)}</p>" if sentence else ""
    others = other_lines(result)
    if others:
        items = "".join(f"<li>{_e(line)}</li>" for line in others)
        html += (
            f"<p>Flagged by the criterion but not born there:</p><ul class='limits'>{items}</ul>"
        )
    return html


def _has_modules(result) -> bool:
    """The module tree says something when some value belongs to a named module."""
    return any(v.torch_module for v in result.values)


def _layer_rows(result) -> str:
    """The first divergence and the values right after it (or the worst values when none)."""
    from parity.layers import views

    ordered = views.ordered(result.values)
    first = result.first_divergence
    if first is not None:
        start = next(
            (
                i
                for i, v in enumerate(ordered)
                if (v.order, v.input_set) == (first.order, first.input_set)
            ),
            0,
        )
        rows, title = ordered[start : start + LAYER_ROWS], "From the first divergence on"
    else:
        worst = views.worst_per_value(ordered, "error_ratio").values()
        key = lambda v: views.metric_of(v, "error_ratio") or 0.0  # noqa: E731
        rows, title = sorted(worst, key=key, reverse=True)[:LAYER_ROWS], "Largest error ratios"
    head = (
        "<tr><th>order</th><th>set</th><th>status</th><th>module</th><th>op</th><th>node</th>"
        "<th>max abs</th><th>error ratio</th><th>jump</th></tr>"
    )
    body = "".join(
        f"<tr class='{_layer_class(v)}'><td>{v.order}</td>"
        f"<td>{v.input_set}</td><td class='status'>{_e(v.status)}</td>"
        f"<td class='name'>{_e(v.torch_module or '-')}</td><td>{_e(v.onnx_op)}</td>"
        f"<td class='name'>{_e(v.onnx_node)}</td><td>{number_text(v.max_abs)}</td>"
        f"<td>{number_text(v.error_ratio)}</td>"
        f"<td>{number_text(getattr(v, 'jump', None))}</td></tr>"
        for v in rows
    )
    return f"<h4>{_e(title)}</h4><table class='layers'>{head}{body}</table>"


def _layer_class(v) -> str:
    from parity.layers.views import is_divergent

    return "fail" if is_divergent(v) else ("pass" if str(v.status) == "pass" else "other")


def _failing_details(
    run: ValidationRun, failing: list[tuple[OutputComparison, WhereProfile | None]]
) -> str:
    if not failing:
        return ""
    kept = bool(run.ref_outputs and run.onnx_outputs)
    parts = ["<section><h2>Failing outputs</h2>"]
    if not kept:
        parts.append(
            "<p class='note'>This run kept no raw outputs, so heatmaps, histograms and worst "
            "elements are omitted; the statistics above are exact.</p>"
        )
    for c, where in failing[:MAX_DETAILED_OUTPUTS]:
        parts.append(_failing_output(run, c, where, kept=kept))
    if len(failing) > MAX_DETAILED_OUTPUTS:
        rest = ", ".join(_e(c.name) for c, _ in failing[MAX_DETAILED_OUTPUTS:])
        parts.append(
            f"<p class='note'>{len(failing) - MAX_DETAILED_OUTPUTS} more failing outputs are in "
            f"the table above without figures, to keep this file small: {rest}.</p>"
        )
    parts.append("</section>")
    return "".join(parts)


def _failing_output(
    run: ValidationRun, c: OutputComparison, where: WhereProfile | None, *, kept: bool
) -> str:
    others = sorted(x.input_set for x in run.outputs if x.name == c.name and not x.status.passed)
    sets = f"input set {c.input_set}" + (
        f" (fails on sets {', '.join(map(str, others))})" if len(others) > 1 else ""
    )
    head = (
        f"<article class='failing'><h3>{_e(c.name)} <small>{_e(status_label(c.status))}, "
        f"{_e(sets)}</small></h3><p class='message'>{_e(c.message)}</p>"
    )
    if where is not None:
        head += f"<p class='where'><b>Where:</b> {_e(where.summary)}</p>"
    arrays = _raw_pair(run, c) if kept else None
    if arrays is None:
        if not kept:
            reason = "raw outputs not kept"
        elif run.data is not None and any(a is None for a in run.arrays(c)):  # batches: not kept
            reason = (
                "no element-wise view: a run on your data keeps the values of its worst "
                "samples, not of every batch (the dashboard's Samples page opens them)"
            )
        else:
            reason = "no element-wise view: the two sides cannot be compared element by element"
        return f"{head}<p class='note'>{_e(reason)}.</p></article>"
    import parity.show.figures as figures
    import parity.show.reductions as views

    ref, onnx = arrays
    exclude = run.exclusion(c.input_set, c.name)  # views show what the verdict judged
    worst = views.worst_elements(ref, onnx, k=WORST_K, exclude=exclude)
    at = worst.rows[0].index if worst.rows else None
    view = views.slice_view(
        ref,
        onnx,
        views.default_slice(ref.shape, at=at),
        kind="ratio",
        max_cells=REPORT_MAX_CELLS,
        exclude=exclude,
        tolerance=c.tolerance,
    )
    heatmap = figures.error_heatmap(
        view,
        worst=worst,
        shape=ref.shape,
        title=f"{c.name} error ÷ allowed",  # plain text: error_heatmap escapes it
        tolerance=c.tolerance,
        names=run.dim_names(c.name, ref.ndim),
    )
    hist = views.error_histogram(ref, onnx, exclude=exclude)
    histogram = figures.error_histogram(
        hist, atol=c.tolerance.atol, worst=worst.rows[0].abs_error if worst.rows else None
    )
    profile = _figure_html(figures.where_figure(where), "profile") if where is not None else ""
    return (
        f"{head}<div class='figs'>{_figure_html(heatmap, 'heatmap')}"
        f"{_figure_html(histogram, 'histogram')}</div>{profile}"
        f"<h4>Worst elements</h4>{_worst_table(worst)}</article>"
    )


def _tolerances(run: ValidationRun) -> str:
    d = run.tolerances.default
    rows = [("default", tolerance_text(d))]
    rows += [(f"output {n}", tolerance_text(t)) for n, t in run.tolerances.outputs.items()]
    return f"<section><h2>Tolerances</h2><p>{_e(RULE_SENTENCE)}</p>{_kv_table(rows)}</section>"


def _environment(run: ValidationRun) -> str:
    rows = list(run.environment.items())
    rows += [(f"time: {k}", f"{v:.3f} s") for k, v in run.timings.items() if _finite(v)]
    return f"<section><h2>Environment and timings</h2>{_kv_table(rows)}</section>"


# ----------------------------------------------------------------------------- helpers


def _raw_pair(run: ValidationRun, c: OutputComparison) -> tuple[np.ndarray, np.ndarray] | None:
    """The two raw arrays of comparison `c`, when kept and comparable element-wise."""
    ref, onnx = run.arrays(c)
    if ref is None or onnx is None or np.shape(ref) != np.shape(onnx) or np.size(ref) == 0:
        return None
    if not (_numeric(ref) and _numeric(onnx)):
        return None
    return ref, onnx


def figure_count(run: ValidationRun) -> int:
    """How many plotly charts the report draws (for tests and for the size budget)."""
    if run.is_multi_candidate:  # the candidates grid, then each failing candidate's details
        return 1 + sum(figure_count(view) - 1 for view in _failing_views(run))
    kept = bool(run.ref_outputs and run.onnx_outputs)
    shown = failing_outputs(run)[:MAX_DETAILED_OUTPUTS]
    detailed = sum(1 for c in shown if kept and _raw_pair(run, c) is not None)
    profiles = sum(  # where_of's conditions, without its pass over the data
        1
        for c in shown
        if kept
        and c.n_mismatch
        and c.status in (Status.FAIL, Status.DTYPE_MISMATCH)
        and _raw_pair(run, c) is not None
    )
    layers = getattr(run, "layers", None)
    depth = 1 if layers is not None and layers.values else 0
    depth += 1 if depth and _has_modules(layers) else 0  # the module tree
    return (1 if run.outputs else 0) + FIGURES_PER_FAILING_OUTPUT * detailed + profiles + depth


def _numeric(a: np.ndarray) -> bool:
    return np.asarray(a).dtype.kind in "biuf"


def _figure_html(fig, kind: str) -> str:
    """One figure, drawn with plotly's own template: importing Streamlit makes its theme the
    process's default, and a report must look the same from the CLI and the dashboard."""
    fig.layout.template = "plotly"  # assigned, not merged into the default one
    div = fig.to_html(full_html=False, include_plotlyjs=False, config=_PLOT_CONFIG)
    return f"<div class='fig {kind}'>{div}</div>"


def _worst_table(worst) -> str:
    rows = "".join(
        f"<tr><td>[{', '.join(str(i) for i in w.index)}]</td>"
        + "".join(f"<td>{t}</td>" for t in number_pair_text(w.ref, w.onnx))
        + f"<td>{number_text(w.abs_error)}</td><td>{number_text(w.rel_error)}</td></tr>"
        for w in worst.rows
    )
    return (
        "<table class='worst'><tr><th>index</th><th>ref</th><th>onnx</th><th>abs error</th>"
        f"<th>rel error</th></tr>{rows}</table>"
    )


def _kv_table(rows: Iterable[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(str(v))}</td></tr>" for k, v in rows)
    return f"<table class='kv'>{body}</table>"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1280px;color:var(--text);padding:0 16px}
h1{margin:0 0 8px}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:32px}
.verdict{display:inline-block;font-size:28px;font-weight:700;padding:6px 18px;border-radius:6px;
color:#fff}.verdict.pass{background:var(--pass)}.verdict.fail{background:var(--fail)}
.verdict.error{background:var(--error)}.verdict.intended{background:var(--intended);
color:var(--intended-text)}tr.intended td.status{background:var(--intended);
color:var(--intended-text);font-weight:700}td.intended{background:var(--intended);
color:var(--intended-text);font-weight:600}.summary{font-size:18px}
table.side td.ok{color:var(--pass)}h2.candidate{border-bottom:2px solid var(--fail)}
h2.candidate.intended{border-bottom-color:var(--intended)}
ul.lead{font-size:16px;line-height:1.5;padding-left:20px}ul.lead>li{margin:8px 0}
ul.lead ul{font-size:15px;padding-left:18px;margin:2px 0}ul.lead ul li{margin:1px 0}
ul.findings{font-size:16px;line-height:1.5;padding-left:20px}ul.findings li{margin:6px 0}
h2.findings{font-size:17px;margin:14px 0 4px}
.what{color:#656d76;font-size:13px;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top;
white-space:nowrap}
table.outputs{width:100%}table.outputs th{white-space:normal}
table.outputs td:last-child{white-space:pre-line;min-width:200px;overflow-wrap:anywhere}
table.kv td{white-space:normal;overflow-wrap:anywhere}
table.candidates{width:100%}table.candidates td:last-child,table.candidates td.name{
white-space:normal;min-width:160px;overflow-wrap:anywhere}
.scroll{overflow-x:auto}
th{background:#f6f8fa}table.kv th{width:180px}
tr.fail td.status{color:var(--fail);font-weight:700}tr.pass td.status{color:var(--pass)}
td.bad{background:#ffebe9;color:var(--fail);font-weight:600}td.name{font-family:monospace}
.bar{width:48px;height:8px;background:#eaeef2;display:inline-block;margin-right:6px}
.bar span{display:block;height:8px;background:var(--fail)}
.note{background:#fff8c5;padding:6px 10px;border-radius:4px}
.where{background:#ffebe9;padding:6px 10px;border-radius:4px}
.diverges{background:#ffebe9;padding:6px 10px;border-radius:4px;font-weight:600}
article.failing{border:1px solid #d0d7de;border-radius:6px;padding:8px 16px;margin:16px 0}
article.failing p.message{white-space:pre-line;font-family:monospace;font-size:13px}
.figs{display:grid;grid-template-columns:1fr 1fr;gap:8px}
footer{margin-top:40px;color:#656d76;font-size:12px}
"""
