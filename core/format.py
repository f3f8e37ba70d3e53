"""Plain-text rendering of a run for terminals: a per-output table and the verdict."""

from __future__ import annotations

from core.input_binding import BY_POSITION, binding_text
from core.labels import status_label
from core.results import OutputComparison, RunKind, Status, ValidationRun
from core.text import number_text, shape_text


def _row(c: OutputComparison, multi_set: bool) -> list[str]:
    shape = shape_text(c.ref_shape)
    if c.onnx_shape != c.ref_shape:
        shape = f"{shape_text(c.ref_shape)} vs {shape_text(c.onnx_shape)}"
    dtype = c.ref_dtype or "-"
    if c.onnx_dtype != c.ref_dtype:
        dtype = f"{c.ref_dtype or '-'} vs {c.onnx_dtype or '-'}"
    s = c.stats
    nonfinite = "-"
    if s is not None and (s.n_nan_mismatch or s.n_inf_mismatch):
        nonfinite = f"{s.n_nan_mismatch}/{s.n_inf_mismatch}"
    mismatch = "-"
    if c.n_mismatch is not None:
        mismatch = f"{c.n_mismatch} ({100 * (c.mismatch_fraction or 0):.3g}%)"
    row = [
        c.name,
        status_label(c.status, "terminal"),
        shape,
        dtype,
        number_text(s.max_abs if s else None),
        number_text(s.max_rel if s else None),
        mismatch,
        nonfinite,
        number_text(c.min_atol_to_pass),
        f"{number_text(c.tolerance.atol)}/{number_text(c.tolerance.rtol)}",
    ]
    return [str(c.input_set), *row] if multi_set else row


def format_table(run: ValidationRun) -> str:
    multi_set = len(run.input_sets) > 1
    header = [
        "output",
        "status",
        "shape",
        "dtype",
        "max abs",
        "max rel",
        "mismatched",
        "nan/inf",
        "min atol",
        "atol/rtol",
    ]
    if multi_set:
        header = ["set", *header]
    rows = [header] + [_row(c, multi_set) for c in run.comparisons]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def format_verdict(run: ValidationRun) -> str:
    unit = "step" if run.is_generation else "input set"
    size = f"{_count(len(run.output_names), 'output')} × {_count(len(run.input_sets), unit)}"
    failing = [c for c in run.comparisons if not c.status.passed]
    if not failing:
        return f"PASS: every output within tolerance ({size})"
    names = sorted({c.name for c in failing})
    where = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"FAIL: {len(failing)} of {len(run.comparisons)} comparisons ({size}) failed: {where}"


def format_input_sets(run: ValidationRun) -> str:
    lines = []
    for s in run.input_sets:
        shapes = ", ".join(f"{n}{shape_text(tuple(a.shape))}" for n, a in s.feeds.items())
        lines.append(f"input set {s.index}: {shapes}" + (f"  [{s.label}]" if s.label else ""))
    return "\n".join(lines)


def format_failure(c: OutputComparison) -> str:
    """numpy.testing-style lines for one failing output, plus where the worst element sits."""
    lines = [line.strip() for line in c.message.splitlines() if line.strip()]
    s = c.stats
    if s is not None and s.worst_index is not None and c.status is Status.FAIL:
        lines.append(
            f"Worst element at index {list(s.worst_index)}: "
            f"ref {number_text(s.ref_at_worst)}, onnx {number_text(s.onnx_at_worst)}"
        )
    head = f"set {c.input_set} {c.name}: "
    return head + ("\n" + " " * len(head)).join(lines or [status_label(c.status, "terminal")])


def reference_text(run: ValidationRun) -> str:
    """What the candidates were compared with: the model, or the reference ONNX file and
    how it ran (ONNX against ONNX)."""
    p = run.provenance
    if p.kind is RunKind.ONNX and p.reference_file:
        return f"reference {p.reference_file} ({p.reference_provider}, {p.reference_opt_level})"
    return f"model {run.model}"


def run_head(run: ValidationRun, *, onnx: bool = True) -> str:
    """The reference, the ONNX file (a run with one candidate), and how torch got the feeds
    when it was not by name."""
    head = reference_text(run) + (f"\nonnx  {run.onnx}" if onnx else "")
    if run.provenance.inputs_by == BY_POSITION:  # by name is the norm; position is a warning
        head += "\ninputs fed " + binding_text(run.provenance.inputs_by, run.provenance.inputs_note)
    return head


def format_run(run: ValidationRun) -> str:
    head = run_head(run)
    failures = [format_failure(c) for c in run.comparisons if not c.status.passed]
    parts = [head, format_input_sets(run), "", format_table(run)]
    if failures:
        parts += ["", *failures]
    parts += ["", format_verdict(run)]
    return "\n".join(parts)
