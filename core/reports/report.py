"""The JSON report, schema ``parity.report/1``: strict JSON (null, never NaN or Infinity).

Written the same way from a live run and from a saved run, so CI and the dashboard agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parity.files.atomic import write_output
from parity.files.json_output import dumps as strict_dumps
from parity.files.json_output import strict
from parity.judge.where import WhereProfile, where_of
from parity.labels import wrong_pair_note
from parity.results import CandidateInfo, OutputComparison, RunKind, ValidationRun
from parity.show.rows import ComparisonRow
from parity.tolerances import Tolerances
from parity.verdict import Verdict

SCHEMA = "parity.report/1"


def report_dict(run: ValidationRun) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "verdict": run.verdict,
        "model": run.model,
        "onnx": run.onnx,
        "environment": dict(run.environment),
        "tolerances": run.tolerances.to_json(),
        "input_sets": [
            {"index": s.index, "label": s.label, "inputs": s.describe()} for s in run.input_sets
        ],
        "candidates": [candidate_dict(run, info) for info in run.candidate_list],
        "outputs": [output_dict(c, where_of(run, c)) for c in run.comparisons],
        "errors": [],  # a run that could not be made has its report from error_report_dict
        "likely_wrong_pair": wrong_pair_note(run) is not None,
        "wrong_pair_note": wrong_pair_note(run),  # the sentence (parity.labels), or null
        "timings": {k: round(float(v), 6) for k, v in run.timings.items()},
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
        if run.generation.prompts or run.generation.free_run_note:  # causal LMs
            from parity.hf.generation_report import generation_json

            data["generation"] = generation_json(run.generation)  # free-running generation
    if run.layers is not None:
        data["layers"] = run.layers.to_json()
    return strict(data)


def candidate_dict(run: ValidationRun, info: CandidateInfo) -> dict[str, Any]:
    """One candidate (file x provider x level): how it ran and its own verdict."""
    return {
        "index": info.index,
        "onnx": info.onnx,
        "provider": info.provider,
        "ort_opt_level": info.ort_opt_level,
        "verdict": run.candidate_verdict(info.index),
        "error": info.error,
        "error_kind": info.error_kind,
        "onnx_sha256": info.onnx_sha256,
        "notes": list(info.notes),
        "seconds": round(float(info.seconds), 6),
        **(
            {"layers": run.candidate_layers[info.index].to_json()}
            if info.index in run.candidate_layers
            else {}
        ),
    }


def output_dict(c: OutputComparison, where: WhereProfile | None = None) -> dict[str, Any]:
    """One ``outputs[]`` entry: the comparison's table row as JSON (parity.show.rows); `where`
    (parity.judge.where, failing outputs whose arrays were kept) says where its mismatches are."""
    return {
        **ComparisonRow.from_comparison(c).to_json(),
        "where": where.to_json() if where is not None else None,
        "noise": c.noise.to_json() if c.noise is not None else None,
    }


def error_report_dict(
    *,
    model: str | None,
    onnx: str | None,
    tolerances: Tolerances,
    kind: str,
    message: str,
    environment: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The report of a run that could not be made (verdict ERROR)."""
    return strict(
        {
            "schema": SCHEMA,
            "verdict": Verdict.ERROR,
            "model": model,
            "onnx": onnx,
            "environment": environment or {},
            "tolerances": tolerances.to_json(),
            "input_sets": [],
            "outputs": [],
            "errors": [{"kind": kind, "message": message}],
        }
    )


def dumps(data: dict[str, Any]) -> str:
    return strict_dumps(data)


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    """Atomically (a killed write leaves the previous report whole); WriteError on failure."""
    write_output(path, dumps(data) + "\n", what="JSON report")
