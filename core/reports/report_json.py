"""The JSON report (schema ``parity.report/1``), strict and read by people and CI: non-finite
numbers are null, and its fields keep their names and meanings once they exist. Each part is
the derived codec's (parity.files.derived_json, in its strict form); this module says which
parts the report holds, and reads a report's rows and verdict back (a sweep judges by them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import parity.files.strict_json as sj
from parity.files.derived_json import decode, encode
from parity.files.json_output import strict
from parity.judge.where import WhereProfile, where_of
from parity.labels import wrong_pair_note
from parity.reports.forms import register_forms
from parity.results import CandidateRun, GenerationInfo, OutputComparison, RunKind, ValidationRun
from parity.results.by_name import OwnJson, written_results
from parity.results.noise import noise_to_json
from parity.show.cause_labels import intended_json
from parity.show.forgiven import forgiven_json
from parity.show.rows import REPORT_KEYS, ComparisonRow
from parity.verdict import Verdict

__all__ = [
    "REPORT_SCHEMA",
    "generation_report_json",
    "put_results",
    "report_json",
    "report_rows_from_json",
    "report_verdict",
    "row_from_json",
    "row_to_json",
    "where_to_json",
]

REPORT_SCHEMA = "parity.report/1"
register_forms()


def report_json(run: ValidationRun) -> dict[str, Any]:
    """The run's JSON report (strict: null, never NaN or Infinity)."""
    data: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "verdict": run.verdict,
        # how the verdict was decided, and what each judge says (both, so CI can read either)
        "judge": run.judge,
        "tolerance_verdict": run.tolerance_verdict,
        # outputs beyond their tolerance by what the file meant (parity.show.cause_labels)
        "intended": intended_json(run),
        "model": run.model,
        "onnx": run.onnx,
        "environment": dict(run.environment),
        "tolerances": run.tolerances.to_json(),
        "input_sets": [
            {"index": s.index, "label": s.label, "inputs": s.describe()} for s in run.input_sets
        ],
        "candidates": [report_candidate_json(run, c) for c in run.candidates],
        "outputs": [report_output_json(c, where_of(run, c)) for c in run.outputs],
        "errors": [],  # a run that could not be made has parity.reports.report's error report
        "likely_wrong_pair": wrong_pair_note(run) is not None,
        "wrong_pair_note": wrong_pair_note(run),  # the sentence (parity.labels), or null
        "timings": {k: round(float(v), 6) for k, v in run.timings.items()},
        "analyses": _strict(run.analyses),
        # what each tolerance the user set forgives against its output's rounding noise
        "tolerance_forgives": forgiven_json(run),
    }
    if run.provenance.inputs_by is not None:  # how torch got the feeds (parity.run.input_binding)
        data["input_matching"] = {
            "by": run.provenance.inputs_by,
            "note": run.provenance.inputs_note or "",
        }
    if run.provenance.kind is RunKind.ONNX:  # ONNX against ONNX: what the reference was
        data["reference"] = {
            "kind": "onnx",
            "onnx": run.provenance.reference_file,
            "provider": run.provenance.reference_provider,
            "ort_opt_level": run.provenance.reference_opt_level,
        }
    if run.signature is not None:
        data["opset"] = run.signature.opset
        data["producer"] = run.signature.producer
    if run.generation is not None:  # LLM runs (parity.hf)
        from parity.hf.summary import judged_summary, masked_positions_json, steps_json

        data["summary"] = judged_summary(run)
        data["steps"] = steps_json(run)
        data["masked_positions"] = masked_positions_json(run)
        g = run.generation
        if g.prompts or g.free_run_note or g.padded_batch is not None:  # causal LMs
            data["generation"] = generation_report_json(g)
    from parity.show.findings import findings_json

    data["findings"] = findings_json(run)  # the one list every front renders
    # the run's analysis results, by name: "frozen", "static_axes", "data", ...
    put_results(data, run.results, exact=False, per_run=True)
    if run.candidates:  # the lead's analysis results, by name: "layers", "quantization", ...
        put_results(data, run.candidates[0].results, exact=False, per_run=False)
    return strict(data)


def _strict(value: Any) -> Any:
    return encode(value, exact=False)


def put_results(
    data: dict[str, Any], results: Mapping[str, object], *, exact: bool, per_run: bool = False
) -> None:
    """Each analysis's result into `data` under the analysis's name (parity.results.by_name:
    one registered `always` is written empty where the run holds none); a name `data` already
    has is refused: a result never stands in for another field."""
    for name, result in written_results(results, per_run=per_run).items():
        if name in data:
            raise ValueError(f"analysis result {name!r} would replace the JSON's own {name!r}")
        if isinstance(result, OwnJson):  # it writes its own JSON (--layers): the report's
            data[name] = result.to_json()
        else:
            data[name] = encode(result, exact=exact)


def report_candidate_json(run: ValidationRun, candidate: CandidateRun) -> dict[str, Any]:
    """One ``candidates[]`` entry (file x provider x level): how it ran and its own verdict;
    its layers where several candidates were compared layer by layer (ONNX against ONNX)."""
    info = candidate.info
    data = _strict(info)
    head = {k: data.pop(k) for k in ("index", "onnx", "provider", "ort_opt_level")}
    data["seconds"] = round(float(info.seconds), 6)
    if run.is_multi_candidate:
        put_results(data, candidate.results, exact=False, per_run=False)
    return {**head, "verdict": candidate.verdict, **data}


def report_output_json(c: OutputComparison, where: WhereProfile | None = None) -> dict[str, Any]:
    """One ``outputs[]`` entry: the comparison's table row as JSON (parity.show.rows); `where`
    (parity.judge.where, failing outputs whose arrays were kept) says where its mismatches are."""
    return {
        **row_to_json(ComparisonRow.from_comparison(c)),
        "where": where_to_json(where),
        "noise": noise_to_json(c.noise),  # the noise floor's (parity.results.noise)
    }


def row_to_json(row: ComparisonRow) -> dict[str, Any]:
    """The comparison's table row (parity.show.rows) as ``outputs[]`` names it (these names
    and meanings are fixed), in the contract's order (parity.show.rows.REPORT_KEYS)."""
    data: dict[str, Any] = _strict(row)
    return {key: data[key] for key in REPORT_KEYS}


def row_from_json(entry: Any, at: str) -> ComparisonRow:
    """An ``outputs[]`` entry of a JSON report read back as its table row (what a sweep or any
    reader of a report judges by: parity.show.rows, parity.labels.badness). The report does not
    hold `can_rejudge` (False here) nor `n_judged` (elements less the excluded ones)."""
    row = decode(ComparisonRow, entry, at, n_judged=0, can_rejudge=False)
    return replace(row, n_judged=max(0, row.n_elements - row.n_excluded))


def report_rows_from_json(report: Mapping[str, Any]) -> tuple[ComparisonRow, ...]:
    """Every ``outputs[]`` row of a JSON report (FieldError naming the first bad field)."""
    raw = report.get("outputs")
    items = sj.array(raw if raw is not None else [], "outputs")
    return tuple(row_from_json(o, f"outputs[{i}]") for i, o in enumerate(items))


def report_verdict(report: Mapping[str, Any]) -> Verdict:
    """A JSON report's verdict (FieldError when it is not one)."""
    return decode(Verdict, report.get("verdict"), "verdict")


def where_to_json(where: WhereProfile | None) -> dict[str, Any] | None:
    """``outputs[].where``: the summary, and per axis the indices mismatches concentrate at."""
    if where is None:
        return None
    return {
        "summary": where.summary,
        "axes": [
            {
                "axis": a.axis,
                "name": a.name,
                "size": a.size,
                "concentrated": [int(i) for i in a.concentrated],
            }
            for a in where.axes
        ],
    }


def generation_report_json(g: GenerationInfo) -> dict[str, Any]:
    """The report's "generation": {"prompts": [...]} (and "note" when it was not run; the
    "padded_batch" where one ran)."""
    data = _strict(g)
    return {k: data[k] for k in ("prompts", "note", "padded_batch") if k in data}
