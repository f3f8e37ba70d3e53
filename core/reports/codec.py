"""The one codec: every result type to and from JSON-able dicts.

Two forms share it. The JSON report (`report_json`, schema ``parity.report/1``) is strict and
read by people and CI: non-finite numbers are null, and its fields keep their names and
meanings once they exist. A saved run's manifest (`run_to_json` / `run_from_json`) must
reopen the run exactly: figures are written losslessly, arrays go to the container
(parity.reports.saved_run) through an `ArrayPut` and come back through an `ArrayGet`.
Each result type has one ``X_to_json`` and one ``X_from_json`` here, so a field added to a
type is added once, for both forms. The number policy is parity.files.json_output's; reading
checks each field with parity.files.strict_json (FieldError naming its dotted path).

Manifests written by earlier Parity versions still read: fields added since are optional,
runs saved before provenance had a type ("extra") are read by `_from_extra`, and runs saved
with flat rows, ONNX output sets and layers (top-level "comparisons", "onnx_outputs",
"layers", "candidate_layers"; no "candidates" before there were several) are upgraded by
`_upgraded_candidates`: every upgrade of older data is here, none on the result types.
A manifest now keeps each candidate's rows, output sets and layers in its `candidates[]`
entry, and each input set's reference outputs and exclusion masks in its `input_sets[]`
entry (a flat "ref_outputs" list is read as before).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np

import parity.files.strict_json as sj
from parity.files.json_output import exact, from_exact, plain, strict
from parity.judge.where import WhereProfile, where_of
from parity.labels import wrong_pair_note
from parity.results import (
    FINDING_KINDS,
    FROZEN_KINDS,
    NOISE_PRECISIONS,
    SUGGESTION_BASES,
    AnalysisNote,
    CandidateInfo,
    CandidateRun,
    ErrorStats,
    FindingKind,
    FrozenNode,
    GenerationInfo,
    GenerationStep,
    InputCase,
    InputSet,
    Noise,
    OutputComparison,
    OutputSet,
    PaddedBatch,
    PaddedPrompt,
    PromptGeneration,
    Provenance,
    QuantizationResult,
    QuantizedOutput,
    QuantizedTokens,
    QuantizedWeight,
    RunKind,
    SavedFrom,
    StaticAxis,
    Status,
    SuggestedTolerances,
    TokenDivergence,
    ValidationRun,
)
from parity.show.cause_labels import intended_json
from parity.show.forgiven import forgiven_json
from parity.show.rows import ComparisonRow
from parity.signature import OnnxSignature, TensorSpec
from parity.tolerances import Tolerance, Tolerances
from parity.verdict import Judge, Verdict, judge_of

if TYPE_CHECKING:
    from parity.layers.result import LayersResult

__all__ = [
    "REPORT_SCHEMA",
    "ArrayGet",
    "ArrayPut",
    "candidate_from_json",
    "candidate_to_json",
    "comparison_from_json",
    "comparison_to_json",
    "generation_from_json",
    "generation_report_json",
    "generation_to_json",
    "layers_from_json",
    "layers_to_json",
    "noise_from_json",
    "noise_to_json",
    "prompt_to_json",
    "prompts_from_json",
    "provenance_from_json",
    "provenance_to_json",
    "quantization_from_json",
    "quantization_to_json",
    "report_json",
    "report_rows_from_json",
    "report_verdict",
    "row_from_json",
    "row_to_json",
    "run_from_json",
    "run_to_json",
    "signature_from_json",
    "signature_to_json",
    "stats_from_json",
    "stats_to_json",
    "where_to_json",
]

REPORT_SCHEMA = "parity.report/1"
MAX_NOTES = 10_000
"""The most entries a saved run's list of sentences may have (analyses, notes, frozen,
static axes): a run says a few dozen; a forged one's 300,000 is refused in one line."""
MAX_TOKENS = 1_000_000  # a generation's token pieces, per prompt (one per token it made)

ArrayPut = Callable[[str, np.ndarray, str], str]
"""(member name, array, what it is, for errors) -> the member name the manifest records."""
ArrayGet = Callable[[Any, str], np.ndarray]
"""(member name as the manifest has it, its dotted path) -> the array (FieldError if absent)."""


# ---------------------------------------------------------------------------------------
# the JSON report (parity.report/1)


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
        "frozen": [frozen_to_json(f) for f in run.frozen],
        "static_axes": [static_axis_to_json(a) for a in run.static_axes],
        "analyses": [analysis_note_to_json(a) for a in run.analyses],
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
    if run.layers is not None:
        data["layers"] = run.layers.to_json()
    if run.quantization is not None:  # a file's quantized weights judged (on by default)
        data["quantization"] = quantization_to_json(run.quantization)
    if run.approximation is not None:  # what the file approximates on purpose, judged
        from parity.reports.approximation_json import approximation_to_json

        data["approximation"] = approximation_to_json(run.approximation)
    if run.data is not None:  # --data: answers on the user's samples (parity.data.codec)
        from parity.data.codec import data_to_json

        data["data"] = data_to_json(run.data)
    from parity.show.findings import findings_json

    data["findings"] = findings_json(run)  # the one list every front renders
    if run.suggested_tolerances is not None:  # asked for (--suggest): checked on fresh sets
        data["suggested_tolerances"] = suggested_to_json(run.suggested_tolerances)
    return strict(data)


def report_candidate_json(run: ValidationRun, candidate: CandidateRun) -> dict[str, Any]:
    """One ``candidates[]`` entry (file x provider x level): how it ran and its own verdict;
    its layers where several candidates were compared layer by layer (ONNX against ONNX)."""
    info = candidate.info
    data = candidate_to_json(info)
    head = {k: data.pop(k) for k in ("index", "onnx", "provider", "ort_opt_level")}
    data["seconds"] = round(float(info.seconds), 6)
    if run.is_multi_candidate and candidate.layers is not None:
        data["layers"] = candidate.layers.to_json()
    if run.is_multi_candidate and candidate.quantization is not None:
        data["quantization"] = quantization_to_json(candidate.quantization)
    if run.is_multi_candidate and candidate.approximation is not None:
        from parity.reports.approximation_json import approximation_to_json

        data["approximation"] = approximation_to_json(candidate.approximation)
    return {**head, "verdict": candidate.verdict, **data}


def report_output_json(c: OutputComparison, where: WhereProfile | None = None) -> dict[str, Any]:
    """One ``outputs[]`` entry: the comparison's table row as JSON (parity.show.rows); `where`
    (parity.judge.where, failing outputs whose arrays were kept) says where its mismatches are."""
    return {
        **row_to_json(ComparisonRow.from_comparison(c)),
        "where": where_to_json(where),
        "noise": noise_to_json(c.noise),
    }


def row_to_json(row: ComparisonRow) -> dict[str, Any]:
    """The comparison's table row (parity.show.rows) as ``outputs[]`` names it (these names
    and meanings are fixed). Not yet strict: `report_json` makes non-finite numbers null."""
    return {
        "candidate": row.candidate,
        "input_set": row.input_set,
        "name": row.name,
        "status": row.status.value,
        "ref_shape": _shape(row.ref_shape),
        "onnx_shape": _shape(row.onnx_shape),
        "ref_dtype": row.ref_dtype,
        "onnx_dtype": row.onnx_dtype,
        "n_elements": row.n_elements,
        "n_excluded": row.n_excluded,  # not judged (e.g. padding), counted apart
        "max_abs": row.max_abs,
        "max_rel": row.max_rel,
        "mean_abs": row.mean_abs,
        "rms": row.rms,
        "p99_abs": row.p99_abs,
        "n_mismatch": row.n_mismatch,
        "mismatch_fraction": row.mismatch_fraction,
        "n_nan_mismatch": row.n_nan_mismatch,
        "n_inf_mismatch": row.n_inf_mismatch,
        "worst_index": _shape(row.worst_index),
        "ref_at_worst": row.ref_at_worst,
        "onnx_at_worst": row.onnx_at_worst,
        "cosine": row.cosine,
        "snr_db": row.snr_db,
        "atol": row.atol,
        "rtol": row.rtol,
        "min_atol_to_pass": row.min_atol_to_pass,
        "message": row.message,
    }


def row_from_json(entry: Any, at: str) -> ComparisonRow:
    """An ``outputs[]`` entry of a JSON report read back as its table row (what a sweep or any
    reader of a report judges by: parity.show.rows, parity.labels.badness). The report does not
    hold `can_rejudge` (False here) nor `n_judged` (elements less the excluded ones)."""
    e = sj.obj(entry, at)

    def get(key: str) -> Any:
        return e.get(key)  # a field an older report lacks reads as null

    def num(key: str) -> float | None:
        return sj.optional(sj.number, get(key), f"{at}.{key}")

    def count(key: str) -> int | None:
        return sj.optional(sj.integer, get(key), f"{at}.{key}")

    status = sj.string(sj.field(e, "status", at), f"{at}.status")
    if status not in Status._value2member_map_:
        raise sj.FieldError(f"{at}.status: {status!r} is not a status")
    n_elements, n_excluded = count("n_elements") or 0, count("n_excluded") or 0
    return ComparisonRow(
        input_set=count("input_set"),
        name=sj.string(sj.field(e, "name", at), f"{at}.name"),
        status=Status(status),
        ref_shape=sj.optional(sj.shape, get("ref_shape"), f"{at}.ref_shape"),
        onnx_shape=sj.optional(sj.shape, get("onnx_shape"), f"{at}.onnx_shape"),
        ref_dtype=sj.optional(sj.string, get("ref_dtype"), f"{at}.ref_dtype"),
        onnx_dtype=sj.optional(sj.string, get("onnx_dtype"), f"{at}.onnx_dtype"),
        n_elements=n_elements,
        n_excluded=n_excluded,
        n_judged=max(0, n_elements - n_excluded),
        n_mismatch=count("n_mismatch"),
        mismatch_fraction=num("mismatch_fraction"),
        max_abs=num("max_abs"),
        max_rel=num("max_rel"),
        mean_abs=num("mean_abs"),
        rms=num("rms"),
        p99_abs=num("p99_abs"),
        n_nan_mismatch=count("n_nan_mismatch"),
        n_inf_mismatch=count("n_inf_mismatch"),
        worst_index=sj.optional(sj.shape, get("worst_index"), f"{at}.worst_index"),
        ref_at_worst=num("ref_at_worst"),
        onnx_at_worst=num("onnx_at_worst"),
        cosine=num("cosine"),
        snr_db=num("snr_db"),
        atol=sj.optional(sj.number, get("atol"), f"{at}.atol") or 0.0,
        rtol=sj.optional(sj.number, get("rtol"), f"{at}.rtol") or 0.0,
        min_atol_to_pass=num("min_atol_to_pass"),
        can_rejudge=False,
        message=sj.optional(sj.string, get("message"), f"{at}.message") or "",
        candidate=count("candidate") or 0,
    )


def report_rows_from_json(report: Mapping[str, Any]) -> tuple[ComparisonRow, ...]:
    """Every ``outputs[]`` row of a JSON report (FieldError naming the first bad field)."""
    raw = report.get("outputs")
    items = sj.array(raw if raw is not None else [], "outputs")
    return tuple(row_from_json(o, f"outputs[{i}]") for i, o in enumerate(items))


def report_verdict(report: Mapping[str, Any]) -> Verdict:
    """A JSON report's verdict (FieldError when it is not one)."""
    value = sj.string(report.get("verdict"), "verdict")
    if value not in Verdict._value2member_map_:
        raise sj.FieldError(f"verdict: {value!r} is not a verdict")
    return Verdict(value)


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


# ---------------------------------------------------------------------------------------
# a saved run's manifest: the run whole


def run_to_json(run: ValidationRun, put: ArrayPut, *, keep_outputs: bool = True) -> dict[str, Any]:
    """Everything of `run` but its container's own fields (schema, identity, members)."""
    input_sets = []
    for s, case in enumerate(run.cases):
        entry = _input_set_to_json(case.input_set, s, case.exclusions, put)
        kept = case.reference if keep_outputs else None
        entry["reference"] = (
            None if kept is None else _output_sets_to_json("ref", (kept,), put, start=s)[0]
        )
        input_sets.append(entry)
    return {
        "model": run.model,
        "onnx": run.onnx,
        "environment": {str(k): str(v) for k, v in run.environment.items()},
        "signature": signature_to_json(run.signature),
        "tolerances": run.tolerances.to_json(),
        "input_sets": input_sets,
        "outputs_kept": bool(keep_outputs and (run.ref_outputs or run.onnx_outputs)),
        "timings": {str(k): exact(v) for k, v in run.timings.items()},
        "provenance": provenance_to_json(run.provenance),
        "generation": None if run.generation is None else generation_to_json(run.generation),
        "candidates": _candidate_records_to_json(run, put, keep_outputs),
        "suggested_tolerances": None
        if run.suggested_tolerances is None
        else suggested_to_json(run.suggested_tolerances),
        "frozen": [frozen_to_json(f) for f in run.frozen],
        "static_axes": [static_axis_to_json(a) for a in run.static_axes],
        "analyses": [analysis_note_to_json(a) for a in run.analyses],
        "judge": run.judge,
        "data": None if run.data is None else _data_to_json(run.data, put),
    }


def _data_to_json(data: Any, put: ArrayPut) -> dict[str, Any]:
    from parity.data.codec import data_to_json

    return plain(data_to_json(data, put))


def run_from_json(m: Mapping[str, Any], get: ArrayGet, saved: SavedFrom) -> ValidationRun:
    """The run a manifest holds, every field type-checked (sj.FieldError names the first bad
    one). Fields added since a run was saved take their defaults."""
    input_sets, exclusions, references = [], [], []
    for i, entry in enumerate(sj.array(sj.field(m, "input_sets", "manifest"), "input_sets")):
        at = f"input_sets[{i}]"
        input_set, masks = _input_set_from_json(entry, at, get)
        input_sets.append(input_set)
        exclusions.append(masks)
        raw = entry.get("reference")
        references.append(
            None if raw is None else _output_set_from_json(raw, f"{at}.reference", get)
        )
    outputs_kept = sj.boolean(m.get("outputs_kept", False), "outputs_kept")
    if "ref_outputs" in m:  # saved before each input set kept its reference outputs
        flat = _output_sets_from_json(m, "ref_outputs", get)
        if len(flat) != len(input_sets) and (flat or outputs_kept):
            raise sj.FieldError(
                f"ref_outputs: {len(flat)} output sets for {len(input_sets)} input sets"
            )
        references = list(flat) if flat else [None] * len(input_sets)
    _check_references(references, outputs_kept)
    _check_unique([s.index for s in input_sets], "input_sets", "index")
    if "provenance" in m:
        provenance = provenance_from_json(sj.obj(m["provenance"], "provenance"))
        generation = generation_from_json(
            sj.optional(sj.obj, sj.field(m, "generation", "manifest"), "generation")
        )
    else:
        provenance, generation = _from_extra(sj.optional(sj.obj, m.get("extra"), "extra") or {})
    timings = {
        k: from_exact(v, f"timings.{k}")
        for k, v in sj.obj(sj.field(m, "timings", "manifest"), "timings").items()
    }
    environment = {
        k: sj.string(v, f"environment.{k}")
        for k, v in sj.obj(sj.field(m, "environment", "manifest"), "environment").items()
    }
    onnx = sj.string(sj.field(m, "onnx", "manifest"), "onnx")
    sets = {s.index for s in input_sets}
    if "comparisons" in m:  # saved before each candidate kept its own rows, outputs, layers
        candidates = _upgraded_candidates(m, get, onnx, environment, provenance, sets)
    else:
        candidates = _candidate_records_from_json(m.get("candidates"), get, sets)
    _check_candidates(candidates, len(input_sets))
    return ValidationRun(
        model=sj.string(sj.field(m, "model", "manifest"), "model"),
        onnx=onnx,
        signature=signature_from_json(sj.field(m, "signature", "manifest")),
        tolerances=Tolerances.from_json(sj.field(m, "tolerances", "manifest"), source="tolerances"),
        environment=environment,
        cases=tuple(InputCase(s, references[k], exclusions[k]) for k, s in enumerate(input_sets)),
        candidates=candidates,
        timings=timings,
        provenance=provenance,
        generation=generation,
        saved=saved,
        frozen=frozen_from_json(m.get("frozen")),
        static_axes=static_axes_from_json(m.get("static_axes")),
        suggested_tolerances=suggested_from_json(m.get("suggested_tolerances")),
        analyses=analysis_notes_from_json(m.get("analyses")),
        judge=_judge_from_json(m.get("judge", "tolerance")),
        data=_data_from_json(m.get("data"), get),
    )


def _judge_from_json(raw: Any) -> Judge:
    try:
        return judge_of(sj.string(raw, "judge"))
    except ValueError as exc:
        raise sj.FieldError(str(exc)) from None


def _data_from_json(raw: Any, get: ArrayGet) -> Any:
    from parity.data.codec import data_from_json

    return data_from_json(raw, get)


def _check_references(references: Sequence[OutputSet | None], outputs_kept: bool) -> None:
    """Every input set keeps its reference outputs, or none does (a run saved without its
    outputs): a forged file with one set's missing is refused, never shown half."""
    missing = [k for k, r in enumerate(references) if r is None]
    if missing and (outputs_kept or len(missing) < len(references)):
        raise sj.FieldError(
            f"input_sets[{missing[0]}].reference: missing, though the run keeps its outputs "
            f"({len(references) - len(missing)} of {len(references)} input sets have theirs)"
        )


def _check_unique(indices: Sequence[int], at: str, key: str) -> None:
    seen: set[int] = set()
    for k, index in enumerate(indices):
        if index in seen:
            raise sj.FieldError(f"{at}[{k}].{key}: {index} is listed twice")
        seen.add(index)


def _check_candidates(candidates: Sequence[CandidateRun], n_sets: int) -> None:
    """Candidates numbered 0, 1, ... in order (as a run makes them: readers find one by its
    index), each with its ONNX outputs for every input set or for none."""
    for k, c in enumerate(candidates):
        if c.info.index != k:
            raise sj.FieldError(
                f"candidates[{k}].index: {c.info.index}, expected {k} (candidates are "
                "numbered in order, each once)"
            )
        if len(c.onnx_outputs) not in (0, n_sets):
            raise sj.FieldError(
                f"candidates[{k}].onnx_outputs: {len(c.onnx_outputs)} output sets for "
                f"{n_sets} input sets"
            )


def suggested_to_json(s: SuggestedTolerances) -> dict[str, Any]:
    """``suggested_tolerances``: {"default"?, "outputs": {NAME: {atol, rtol}}, "basis",
    "checked_on": [...], "withheld": {NAME: why}, "fitted_on", "k"}; the same in the report
    and the manifest (tolerances are finite)."""
    data: dict[str, Any] = {}
    if s.default is not None:
        data["default"] = s.default.to_json()
    data.update(
        {
            "outputs": {name: t.to_json() for name, t in s.outputs.items()},
            "basis": s.basis,
            "checked_on": list(s.checked_on),
            "withheld": dict(s.withheld),
            "fitted_on": int(s.fitted_on),
            "k": s.k,
        }
    )
    return data


def suggested_from_json(raw: Any, at: str = "suggested_tolerances") -> SuggestedTolerances | None:
    if raw is None:
        return None
    raw = sj.obj(raw, at)
    basis = sj.string(sj.field(raw, "basis", at), f"{at}.basis")
    if basis not in SUGGESTION_BASES:
        raise sj.FieldError(f"{at}.basis: expected one of {', '.join(SUGGESTION_BASES)}")

    def tolerance(value: Any, where: str) -> Tolerance:
        value = sj.obj(value, where)
        return Tolerance(
            atol=sj.number(sj.field(value, "atol", where), f"{where}.atol"),
            rtol=sj.number(sj.field(value, "rtol", where), f"{where}.rtol"),
        )

    outputs = sj.obj(raw.get("outputs") or {}, f"{at}.outputs")
    return SuggestedTolerances(
        outputs={k: tolerance(v, f"{at}.outputs.{k}") for k, v in outputs.items()},
        basis=basis,
        checked_on=_texts(raw.get("checked_on") or [], f"{at}.checked_on"),
        withheld={
            k: sj.string(v, f"{at}.withheld.{k}")
            for k, v in sj.obj(raw.get("withheld") or {}, f"{at}.withheld").items()
        },
        default=None if raw.get("default") is None else tolerance(raw["default"], f"{at}.default"),
        fitted_on=sj.integer(raw.get("fitted_on", 0), f"{at}.fitted_on"),
        k=sj.optional(sj.number, raw.get("k"), f"{at}.k"),
    )


def _named_arrays_to_json(
    arrays: Mapping[str, np.ndarray], prefix: str, put: ArrayPut, what: Callable[[str], str]
) -> list[dict[str, Any]]:
    """{NAME: array} as [{"name": NAME, "member": PREFIX/K.npy}]: user names stay in the
    manifest, never in member names."""
    return [
        {"name": name, "member": put(f"{prefix}/{k}.npy", array, what(name))}
        for k, (name, array) in enumerate(arrays.items())
    ]


def _named_arrays_from_json(value: Any, at: str, get: ArrayGet) -> dict[str, np.ndarray]:
    result = {}
    for k, item in enumerate(sj.array(value, at)):
        item = sj.obj(item, f"{at}[{k}]")
        name = sj.string(sj.field(item, "name", f"{at}[{k}]"), f"{at}[{k}].name")
        result[name] = get(sj.field(item, "member", f"{at}[{k}]"), f"{at}[{k}].member")
    return result


def _input_set_to_json(
    s: InputSet, position: int, masks: Mapping[str, np.ndarray], put: ArrayPut
) -> dict[str, Any]:
    """One input set: its feeds and its outputs' exclusion masks as members, its label."""
    at = f"of set {s.index}"
    return {
        "index": s.index,
        "label": s.label,
        "feeds": _named_arrays_to_json(
            s.feeds, f"inputs/{position}", put, lambda n: f"input {n!r} {at}"
        ),
        "exclude": _named_arrays_to_json(
            {name: np.asarray(mask, dtype=bool) for name, mask in masks.items()},
            f"exclude/{position}",
            put,
            lambda n: f"exclusion mask of output {n!r} {at}",
        ),
    }


def _input_set_from_json(
    entry: Any, at: str, get: ArrayGet
) -> tuple[InputSet, dict[str, np.ndarray]]:
    entry = sj.obj(entry, at)
    input_set = InputSet(
        index=sj.integer(sj.field(entry, "index", at), f"{at}.index"),
        feeds=_named_arrays_from_json(sj.field(entry, "feeds", at), f"{at}.feeds", get),
        label=sj.string(sj.field(entry, "label", at), f"{at}.label"),
    )
    return input_set, _named_arrays_from_json(entry.get("exclude", []), f"{at}.exclude", get)


def _implied_candidate(
    onnx: str, environment: Mapping[str, str], provenance: Provenance
) -> CandidateInfo:
    """The one candidate of a run saved before candidates were kept: its file, provider and
    level, from the run's own fields."""
    provider = str(environment.get("provider", "CPUExecutionProvider"))
    level = provenance.ort_opt_level or "all"
    return CandidateInfo(0, onnx, provider, level, provenance.onnx_sha256)


def _candidate_records_to_json(
    run: ValidationRun, put: ArrayPut, keep_outputs: bool
) -> list[dict[str, Any]]:
    """Each candidate with its rows, ONNX output sets and layers. Members keep the names they
    had when these were flat (rows and output sets numbered across candidates, the lead's
    layers under "layers"), so a run's arrays are named as in older saved runs."""
    entries, row, position = [], 0, 0
    for k, c in enumerate(run.candidates):
        entry = candidate_to_json(c.info)
        entry["comparisons"] = [
            comparison_to_json(r, put, row + j) for j, r in enumerate(c.outputs)
        ]
        entry["onnx_outputs"] = (
            _output_sets_to_json("onnx", c.onnx_outputs, put, start=position)
            if keep_outputs
            else []
        )
        entry["layers"] = (
            None
            if c.layers is None
            else layers_to_json(c.layers, put, "layers" if k == 0 else f"layers/c{c.index}")
        )
        entry["quantization"] = (
            None if c.quantization is None else quantization_to_json(c.quantization, saved=True)
        )
        if c.approximation is not None:
            from parity.reports.approximation_json import approximation_to_json

            entry["approximation"] = approximation_to_json(c.approximation, saved=True)
        row += len(c.outputs)
        position += len(c.onnx_outputs)
        entries.append(entry)
    return entries


def _candidate_records_from_json(
    raw: Any, get: ArrayGet, sets: set[int]
) -> tuple[CandidateRun, ...]:
    """The candidates of a manifest that keeps each one's rows, output sets and layers."""
    from parity.reports.approximation_json import approximation_from_json

    records = []
    for i, entry in enumerate(sj.array(raw, "candidates")):
        at = f"candidates[{i}]"
        entry = sj.obj(entry, at)
        info = candidate_from_json(entry, at)
        rows = [
            comparison_from_json(row, f"{at}.comparisons[{j}]", get)
            for j, row in enumerate(
                sj.array(sj.field(entry, "comparisons", at), f"{at}.comparisons")
            )
        ]
        _check_indices(sets, {info.index}, rows, {}, at=f"{at}.comparisons")
        records.append(
            CandidateRun(
                info,
                tuple(rows),
                _output_sets_from_json(entry, "onnx_outputs", get),
                layers_from_json(entry.get("layers"), get, f"{at}.layers"),
                quantization_from_json(entry.get("quantization"), f"{at}.quantization"),
                approximation_from_json(entry.get("approximation"), f"{at}.approximation"),
            )
        )
    if not records:
        raise sj.FieldError("candidates: the run has none")
    return tuple(records)


def _upgraded_candidates(
    m: Mapping[str, Any],
    get: ArrayGet,
    onnx: str,
    environment: Mapping[str, str],
    provenance: Provenance,
    sets: set[int],
) -> tuple[CandidateRun, ...]:
    """The candidates of a manifest saved with flat rows ("comparisons"), flat ONNX output
    sets and the lead's layers apart ("layers", "candidate_layers"); before there were
    several candidates, none listed: the one implied by the run's own fields."""
    comparisons = [
        comparison_from_json(entry, f"comparisons[{c}]", get)
        for c, entry in enumerate(sj.array(sj.field(m, "comparisons", "manifest"), "comparisons"))
    ]
    layers = layers_from_json(m.get("layers"), get, "layers")
    infos = candidates_from_json(m.get("candidates")) or (
        _implied_candidate(onnx, environment, provenance),
    )
    candidate_layers = _candidate_layers_from_json(m.get("candidate_layers"), layers, get)
    if not candidate_layers and layers is not None:  # one candidate, or saved before each kept
        candidate_layers = {infos[0].index: layers}
    _check_indices(sets, {i.index for i in infos}, comparisons, candidate_layers)
    return _candidate_records(
        infos,
        comparisons,
        _output_sets_from_json(m, "onnx_outputs", get),
        len(sets),
        candidate_layers,
    )


def _candidate_records(
    infos: tuple[CandidateInfo, ...],
    rows: Sequence[OutputComparison],
    onnx_outputs: tuple[OutputSet, ...],
    n_sets: int,
    layers: Mapping[int, LayersResult],
) -> tuple[CandidateRun, ...]:
    """Each candidate's record from the saved layout: rows by their `candidate`, output sets
    candidate after candidate (one candidate: all of them), layers by candidate index (a run
    saved before each candidate's were kept: the lead's only)."""
    n = n_sets if len(infos) > 1 else len(onnx_outputs)
    return tuple(
        CandidateRun(
            info,
            tuple(c for c in rows if c.candidate == info.index),
            onnx_outputs[k * n : (k + 1) * n],
            layers.get(info.index),
        )
        for k, info in enumerate(infos)
    )


def _output_what(side: str, s: int) -> Callable[[str], str]:
    return lambda n: f"{side} output {n!r} of set {s}"


def _output_sets_to_json(
    side: str, sets: tuple[OutputSet, ...], put: ArrayPut, *, start: int = 0
) -> list[dict[str, Any]]:
    """Output sets as entries whose arrays are members SIDE/POSITION/K (`start`: the first's
    position, where several candidates' sets are numbered in turn)."""
    return [
        {
            "seconds": exact(output_set.seconds),
            "arrays": _named_arrays_to_json(
                output_set.arrays,
                f"{side}/{s}",
                put,
                _output_what(side, s),
            ),
            "notes": [str(n) for n in output_set.notes],
        }
        for s, output_set in enumerate(sets, start=start)
    ]


def _output_sets_from_json(m: Mapping[str, Any], key: str, get: ArrayGet) -> tuple[OutputSet, ...]:
    return tuple(
        _output_set_from_json(entry, f"{key}[{i}]", get)
        for i, entry in enumerate(sj.array(sj.field(m, key, "manifest"), key))
    )


def _output_set_from_json(entry: Any, at: str, get: ArrayGet) -> OutputSet:
    entry = sj.obj(entry, at)
    return OutputSet(
        arrays=_named_arrays_from_json(sj.field(entry, "arrays", at), f"{at}.arrays", get),
        seconds=from_exact(sj.field(entry, "seconds", at), f"{at}.seconds") or 0.0,
        notes=_texts(entry.get("notes", []), f"{at}.notes"),
    )


def _texts(value: Any, at: str, limit: int = MAX_NOTES) -> tuple[str, ...]:
    return tuple(sj.string(n, f"{at}[{j}]") for j, n in enumerate(sj.array(value, at, limit=limit)))


# ---------------------------------------------------------------------------------------
# one comparison: statistics, rounding noise, re-judge profile


def comparison_to_json(c: OutputComparison, put: ArrayPut, position: int) -> dict[str, Any]:
    """One comparison, exactly; its re-judge profile as members profiles/POSITION/K."""
    return {
        "input_set": c.input_set,
        "name": c.name,
        "status": c.status.value,
        "tolerance": c.tolerance.to_json(),
        "ref_shape": _shape(c.ref_shape),
        "onnx_shape": _shape(c.onnx_shape),
        "ref_dtype": c.ref_dtype,
        "onnx_dtype": c.onnx_dtype,
        "n_elements": int(c.n_elements),
        "stats": None if c.stats is None else stats_to_json(c.stats),
        "n_mismatch": None if c.n_mismatch is None else int(c.n_mismatch),
        "message": c.message,
        "n_excluded": int(c.n_excluded),
        "excluded_max_abs": exact(c.excluded_max_abs),
        "candidate": int(c.candidate),
        "notes": list(c.notes),
        "noise": noise_to_json(c.noise),
        "profile": None
        if c.profile is None
        else {
            key: put(
                f"profiles/{position}/{i}.npy",
                np.asarray(value),
                f"profile {key!r} of output {c.name!r}",
            )
            for i, (key, value) in enumerate(c.profile.to_arrays().items())
        },
    }


def comparison_from_json(entry: Any, at: str, get: ArrayGet) -> OutputComparison:
    entry = sj.obj(entry, at)

    def field(key: str) -> Any:
        return sj.field(entry, key, at)

    status = sj.string(field("status"), f"{at}.status")
    if status not in {s.value for s in Status}:
        raise sj.FieldError(f"{at}.status: unknown status {status!r}")
    tolerance = sj.obj(field("tolerance"), f"{at}.tolerance")
    if set(tolerance) != {"atol", "rtol"}:
        raise sj.FieldError(f'{at}.tolerance: expected {{"atol": number, "rtol": number}}')
    profile = None
    raw_profile = sj.optional(sj.obj, field("profile"), f"{at}.profile")
    if raw_profile is not None:
        from parity.judge.error_profile import ErrorProfile

        arrays = {str(k): get(member, f"{at}.profile.{k}") for k, member in raw_profile.items()}
        profile = ErrorProfile.from_arrays(_profile_arrays(arrays, f"{at}.profile"))
    raw_stats = sj.optional(sj.obj, field("stats"), f"{at}.stats")
    comparison = OutputComparison(
        input_set=sj.integer(field("input_set"), f"{at}.input_set"),
        name=sj.string(field("name"), f"{at}.name"),
        status=Status(status),
        tolerance=Tolerance(
            atol=sj.number(tolerance["atol"], f"{at}.tolerance.atol", minimum=0),
            rtol=sj.number(tolerance["rtol"], f"{at}.tolerance.rtol", minimum=0),
        ),
        ref_shape=sj.optional(sj.shape, field("ref_shape"), f"{at}.ref_shape"),
        onnx_shape=sj.optional(sj.shape, field("onnx_shape"), f"{at}.onnx_shape"),
        ref_dtype=sj.optional(sj.string, field("ref_dtype"), f"{at}.ref_dtype"),
        onnx_dtype=sj.optional(sj.string, field("onnx_dtype"), f"{at}.onnx_dtype"),
        n_elements=sj.integer(field("n_elements"), f"{at}.n_elements"),
        stats=None if raw_stats is None else stats_from_json(raw_stats, f"{at}.stats"),
        profile=profile,
        n_mismatch=sj.optional(sj.integer, field("n_mismatch"), f"{at}.n_mismatch"),
        message=sj.string(field("message"), f"{at}.message"),
        n_excluded=sj.integer(entry.get("n_excluded", 0), f"{at}.n_excluded"),
        excluded_max_abs=from_exact(entry.get("excluded_max_abs"), f"{at}.excluded_max_abs"),
        candidate=sj.integer(entry.get("candidate", 0), f"{at}.candidate"),
        notes=_texts(entry.get("notes", []), f"{at}.notes"),
        noise=noise_from_json(entry.get("noise"), f"{at}.noise"),
    )
    _check_comparison(comparison, at)
    return comparison


def _check_comparison(c: OutputComparison, at: str) -> None:
    """What a comparison's own fields must agree on: counts within its elements, the worst
    element inside the compared shape (a page indexes the arrays with it)."""
    if c.n_mismatch is not None and not 0 <= c.n_mismatch <= c.n_elements:
        raise sj.FieldError(f"{at}.n_mismatch: {c.n_mismatch} of {c.n_elements} elements")
    worst = c.stats.worst_index if c.stats is not None else None
    if worst is None:
        return
    shape = c.ref_shape if c.ref_shape is not None else c.onnx_shape
    inside = shape is not None and len(worst) == len(shape)
    if not inside or any(i >= d for i, d in zip(worst, shape or (), strict=True)):
        raise sj.FieldError(
            f"{at}.stats.worst_index: {list(worst)} is not an index of the compared shape "
            f"{None if shape is None else list(shape)}"
        )


_PROFILE_SIZES = {"counts": 3, "anchor": 3, "zero_ref_max": 1, "hull_slack": 1}
_PROFILE_PAIRS = (("hull_r", "hull_d"), ("hist_bins", "hist_counts"), ("top_d", "top_r"),
                  ("sample_d", "sample_r"))  # fmt: skip


def _profile_arrays(arrays: dict[str, np.ndarray], at: str) -> dict[str, np.ndarray]:
    """A saved error profile's arrays, consistent before they are used: every member there,
    numbers, flat, the fixed ones of their size, each pair (hull, histogram, top, sample)
    of one length. A crafted file is one line, never a page's traceback."""
    needed = {"counts", "anchor", "zero_ref_max"} | {k for pair in _PROFILE_PAIRS for k in pair}
    missing = sorted(needed - set(arrays))
    if missing:
        raise sj.FieldError(f"{at}: missing {', '.join(missing)}")
    for key, array in arrays.items():
        if array.dtype.kind not in "biuf" or array.ndim > 1:
            raise sj.FieldError(f"{at}.{key}: expected a flat array of numbers, got {array.dtype}")
        if key in _PROFILE_SIZES and array.size != _PROFILE_SIZES[key]:
            raise sj.FieldError(f"{at}.{key}: expected {_PROFILE_SIZES[key]} numbers")
    for a, b in _PROFILE_PAIRS:
        if arrays[a].size != arrays[b].size:
            raise sj.FieldError(f"{at}: {a} and {b} differ in length")
    return arrays


def _check_indices(
    sets: set[int], candidates: set[int], comparisons, layers: Mapping, at: str = "comparisons"
) -> None:
    """Every comparison names an input set and a candidate the run has (a crafted index
    would be a KeyError in a page or the CLI); `at`: where the rows lie in the manifest."""
    for c, comp in enumerate(comparisons):
        if comp.input_set not in sets:
            raise sj.FieldError(
                f"{at}[{c}].input_set: {comp.input_set} is not one of the run's "
                f"input sets ({', '.join(map(str, sorted(sets)))})"
            )
        if comp.candidate not in candidates:
            raise sj.FieldError(
                f"{at}[{c}].candidate: {comp.candidate} is not the candidate's index "
                f"({', '.join(map(str, sorted(candidates)))})"
                if at != "comparisons"
                else f"{at}[{c}].candidate: {comp.candidate} is not one of the run's "
                f"candidates ({', '.join(map(str, sorted(candidates)))})"
            )
    for index in layers:
        if index not in candidates:
            raise sj.FieldError(f"candidate_layers: {index} is not one of the run's candidates")


_COUNTS = ("n_nan_mismatch", "n_inf_mismatch")


def stats_to_json(stats: ErrorStats) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(ErrorStats):
        value = getattr(stats, f.name)
        if f.name == "worst_index":
            out[f.name] = _shape(value)
        else:
            out[f.name] = int(value) if f.name in _COUNTS else exact(value)
    return out


_SIZES = ("max_abs", "max_rel", "mean_abs", "rms", "p99_abs")  # >= 0 (inf: a float64 overflow)


def stats_from_json(raw: Any, at: str) -> ErrorStats:
    """A comparison's statistics: never NaN (undefined is null), sizes of errors >= 0, the
    cosine within [-1, 1], counts >= 0."""
    raw = sj.obj(raw, at)
    values: dict[str, Any] = {}
    for f in fields(ErrorStats):
        value, where = sj.field(raw, f.name, at), f"{at}.{f.name}"
        if f.name == "worst_index":
            values[f.name] = sj.optional(sj.shape, value, where)
        elif f.name in _COUNTS:
            values[f.name] = sj.integer(value, where)
        else:
            number = from_exact(value, where)
            if number is not None and (
                math.isnan(number)
                or (f.name in _SIZES and number < 0)
                or (f.name == "cosine" and not -1 <= number <= 1)
            ):
                raise sj.FieldError(f"{where}: {value!r} is not a statistic a run can have")
            values[f.name] = number
    return ErrorStats(**values)


def noise_to_json(n: Noise | None) -> dict[str, Any] | None:
    """``outputs[].noise``, the same in the report and the manifest (strict: null for
    non-finite)."""
    if n is None:
        return None
    return strict(
        {
            "torch_error": n.torch_error,
            "onnx_error": n.onnx_error,
            "ratio": n.ratio,
            "precision": n.precision,
            "quantization": None
            if n.precision != "int8"
            else {"scale": n.scale, "tensors": int(n.tensors), "clipped": n.clipped},
            "emulated": n.emulated or None,
        }
    )


def noise_from_json(raw: Any, at: str) -> Noise | None:
    """Noise read back; precision, quantization and emulated are absent before they existed."""
    if raw is None:
        return None
    raw = sj.obj(raw, at)
    precision = sj.string(raw.get("precision", "float32"), f"{at}.precision")
    if precision not in NOISE_PRECISIONS:
        raise sj.FieldError(f"{at}.precision: expected one of {', '.join(NOISE_PRECISIONS)}")
    quantization = raw.get("quantization")
    q = {} if quantization is None else sj.obj(quantization, f"{at}.quantization")
    return Noise(
        torch_error=from_exact(raw.get("torch_error"), f"{at}.torch_error") or 0.0,
        onnx_error=from_exact(raw.get("onnx_error"), f"{at}.onnx_error") or 0.0,
        ratio=from_exact(raw.get("ratio"), f"{at}.ratio"),
        precision=precision,
        scale=from_exact(q.get("scale"), f"{at}.quantization.scale"),
        tensors=sj.integer(q.get("tensors", 0), f"{at}.quantization.tensors"),
        clipped=from_exact(q.get("clipped"), f"{at}.quantization.clipped") or 0.0,
        emulated=sj.optional(sj.string, raw.get("emulated"), f"{at}.emulated") or "",
    )


def _shape(shape: tuple[int, ...] | None) -> list[int] | None:
    return None if shape is None else [int(d) for d in shape]


# ---------------------------------------------------------------------------------------
# candidates and provenance


def candidate_to_json(info: CandidateInfo) -> dict[str, Any]:
    data = {f.name: getattr(info, f.name) for f in fields(CandidateInfo)}
    data["notes"] = [str(n) for n in info.notes]
    data["seconds"] = exact(info.seconds)
    return data


_CANDIDATE_TEXTS = ("onnx", "provider", "ort_opt_level")
_CANDIDATE_OPTIONAL = ("onnx_sha256", "error", "error_kind")


def candidate_from_json(entry: Any, at: str) -> CandidateInfo:
    entry = sj.obj(entry, at)
    values: dict[str, Any] = {"index": sj.integer(sj.field(entry, "index", at), f"{at}.index")}
    for key in _CANDIDATE_TEXTS:
        values[key] = sj.string(sj.field(entry, key, at), f"{at}.{key}")
    for key in _CANDIDATE_OPTIONAL:
        values[key] = sj.optional(sj.string, entry.get(key), f"{at}.{key}")
    values["notes"] = _texts(entry.get("notes", []), f"{at}.notes")
    values["seconds"] = from_exact(entry.get("seconds"), f"{at}.seconds") or 0.0
    return CandidateInfo(**values)


def candidates_from_json(raw: Any) -> tuple[CandidateInfo, ...]:
    """The candidates of a run (absent in runs saved before there were several: ())."""
    items = sj.array(raw or [], "candidates")
    return tuple(candidate_from_json(entry, f"candidates[{i}]") for i, entry in enumerate(items))


def frozen_to_json(f: FrozenNode) -> dict[str, Any]:
    """One ``frozen[]`` entry: a node holding a size (or a branch) frozen at export."""
    return strict(
        {
            "node": f.node,
            "op": f.op,
            "kind": f.kind,
            "constant": [exact(float(v)) for v in f.constant],
            "dims": {str(k): int(v) for k, v in f.dims.items()},
            "source": f.source,
            "confirmed": bool(f.confirmed),
            "text": f.text,
        }
    )


def frozen_from_json(raw: Any) -> tuple[FrozenNode, ...]:
    """The run's frozen nodes (absent in runs saved before they were looked for: ())."""
    found = []
    for i, entry in enumerate(sj.array(raw or [], "frozen", limit=MAX_NOTES)):
        at = f"frozen[{i}]"
        entry = sj.obj(entry, at)
        kind = sj.string(sj.field(entry, "kind", at), f"{at}.kind")
        if kind not in FROZEN_KINDS:
            raise sj.FieldError(f"{at}.kind: unknown kind {kind!r}")
        dims = sj.obj(entry.get("dims", {}), f"{at}.dims")
        constant = sj.array(entry.get("constant", []), f"{at}.constant")
        found.append(
            FrozenNode(
                node=sj.string(sj.field(entry, "node", at), f"{at}.node"),
                op=sj.string(sj.field(entry, "op", at), f"{at}.op"),
                kind=kind,
                constant=tuple(
                    from_exact(v, f"{at}.constant[{k}]") or 0.0 for k, v in enumerate(constant)
                ),
                dims={str(k): sj.integer(v, f"{at}.dims.{k}") for k, v in dims.items()},
                source=sj.optional(sj.string, entry.get("source"), f"{at}.source"),
                confirmed=sj.boolean(entry.get("confirmed", False), f"{at}.confirmed"),
                text=sj.string(entry.get("text", ""), f"{at}.text"),
            )
        )
    return tuple(found)


def static_axis_to_json(a: StaticAxis) -> dict[str, Any]:
    """One ``static_axes[]`` entry: an axis the file fixes where torch takes other sizes."""
    return {
        "input": a.input,
        "axis": int(a.axis),
        "size": int(a.size),
        "torch_size": int(a.torch_size),
        "text": a.text,
    }


def static_axes_from_json(raw: Any) -> tuple[StaticAxis, ...]:
    """The run's static axes (absent in runs saved before they were looked for: ())."""
    found = []
    for i, entry in enumerate(sj.array(raw or [], "static_axes", limit=MAX_NOTES)):
        at = f"static_axes[{i}]"
        entry = sj.obj(entry, at)
        found.append(
            StaticAxis(
                input=sj.string(sj.field(entry, "input", at), f"{at}.input"),
                axis=sj.integer(sj.field(entry, "axis", at), f"{at}.axis"),
                size=sj.integer(sj.field(entry, "size", at), f"{at}.size"),
                torch_size=sj.integer(sj.field(entry, "torch_size", at), f"{at}.torch_size"),
                text=sj.string(entry.get("text", ""), f"{at}.text"),
            )
        )
    return tuple(found)


def analysis_note_to_json(a: AnalysisNote) -> dict[str, Any]:
    """One ``analyses[]`` entry: what an analysis asked for did, or why it could not."""
    return {"analysis": a.analysis, "text": a.text, "done": bool(a.done)}


def analysis_notes_from_json(raw: Any) -> tuple[AnalysisNote, ...]:
    """The run's analysis notes (absent in runs saved before analyses said them: ())."""
    found = []
    for i, entry in enumerate(sj.array(raw or [], "analyses", limit=MAX_NOTES)):
        at = f"analyses[{i}]"
        entry = sj.obj(entry, at)
        found.append(
            AnalysisNote(
                analysis=sj.string(sj.field(entry, "analysis", at), f"{at}.analysis"),
                text=sj.string(sj.field(entry, "text", at), f"{at}.text"),
                done=sj.boolean(entry.get("done", True), f"{at}.done"),
            )
        )
    return tuple(found)


def provenance_to_json(p: Provenance) -> dict[str, Any]:
    return plain({f.name: getattr(p, f.name) for f in fields(Provenance)})


_PROVENANCE_INTS = ("opset", "seed")
_PROVENANCE_OBJECTS = ("config",)  # the run's settings (parity.run.config_json)


def provenance_from_json(raw: Mapping[str, Any]) -> Provenance:
    """Provenance read back; a key this Parity does not know is skipped, one it knows is
    checked (each is absent in runs saved before it existed)."""
    known = {f.name for f in fields(Provenance)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known or key == "kind":
            continue
        if key in _PROVENANCE_OBJECTS:
            values[key] = sj.optional(sj.obj, value, f"provenance.{key}")
            continue
        check = sj.integer if key in _PROVENANCE_INTS else sj.string
        values[key] = sj.optional(check, value, f"provenance.{key}")
    kind = sj.optional(sj.string, raw.get("kind"), "provenance.kind") or RunKind.TORCH
    if kind not in {k.value for k in RunKind}:
        raise sj.FieldError(f"provenance.kind: unknown kind {kind!r}")
    return Provenance(kind=RunKind(kind), **values)


# ---------------------------------------------------------------------------------------
# an hf: run: steps, summary, free-running generation


def generation_to_json(g: GenerationInfo) -> dict[str, Any]:
    """The manifest's "generation": summary, steps, and the report's prompts and note."""
    return {
        "summary": plain(g.summary),
        "steps": [{f.name: getattr(s, f.name) for f in fields(GenerationStep)} for s in g.steps],
        **plain(generation_report_json(g)),
    }


def generation_from_json(raw: Mapping[str, Any] | None) -> GenerationInfo | None:
    if raw is None:
        return None
    steps = []
    for i, step in enumerate(sj.array(sj.field(raw, "steps", "generation"), "generation.steps")):
        at = f"generation.steps[{i}]"
        step = sj.obj(step, at)
        values = {}
        for f in fields(GenerationStep):
            check = sj.string if f.name in ("phase", "label") else sj.integer
            values[f.name] = check(sj.field(step, f.name, at), f"{at}.{f.name}")
        steps.append(GenerationStep(**values))
    summary = sj.obj(sj.field(raw, "summary", "generation"), "generation.summary")
    return GenerationInfo(
        summary=dict(summary),
        steps=tuple(steps),
        prompts=prompts_from_json(raw.get("prompts")),  # none in runs saved before it
        free_run_note=sj.string(raw.get("note", ""), "generation.note"),
        padded_batch=padded_from_json(raw.get("padded_batch")),  # none in runs saved before it
    )


def generation_report_json(g: GenerationInfo) -> dict[str, Any]:
    """The report's "generation": {"prompts": [...]} (and "note" when it was not run)."""
    data: dict[str, Any] = {"prompts": [prompt_to_json(p) for p in g.prompts]}
    if g.free_run_note:
        data["note"] = g.free_run_note
    if g.padded_batch is not None:
        data["padded_batch"] = padded_to_json(g.padded_batch)
    return data


def padded_to_json(b: PaddedBatch) -> dict[str, Any]:
    """`generation.padded_batch`: the prompts as one left-padded batch (parity.hf.padded_batch)."""
    return {
        "steps": b.steps,
        "output": b.output,
        "kind": None if b.kind is None else str(b.kind),
        "text": b.text,
        "prompts": [{f.name: getattr(p, f.name) for f in fields(PaddedPrompt)} for p in b.prompts],
    }


def _figure(value: Any, at: str) -> float:
    """An error read back: null is a value that was not finite (strict JSON)."""
    number = sj.optional(sj.number, value, at)
    return float("inf") if number is None else number


def padded_from_json(raw: Any, at: str = "generation.padded_batch") -> PaddedBatch | None:
    if raw is None:
        return None
    raw = sj.obj(raw, at)
    prompts = []
    for i, item in enumerate(sj.array(sj.field(raw, "prompts", at), f"{at}.prompts")):
        where = f"{at}.prompts[{i}]"
        item = sj.obj(item, where)
        prompts.append(
            PaddedPrompt(
                prompt=sj.string(sj.field(item, "prompt", where), f"{where}.prompt"),
                padding=sj.integer(sj.field(item, "padding", where), f"{where}.padding"),
                batch_error=_figure(item.get("batch_error"), f"{where}.batch_error"),
                batch_passed=sj.boolean(item.get("batch_passed"), f"{where}.batch_passed"),
                alone_error=sj.optional(sj.number, item.get("alone_error"), f"{where}.alone_error"),
                alone_passed=sj.boolean(item.get("alone_passed", True), f"{where}.alone_passed"),
                shift=_figure(item.get("shift", 0.0), f"{where}.shift"),
            )
        )
    kind = raw.get("kind")
    if kind is not None and kind not in FINDING_KINDS:
        raise sj.FieldError(f"{at}.kind: unknown kind {kind!r}")
    return PaddedBatch(
        prompts=tuple(prompts),
        steps=sj.integer(sj.field(raw, "steps", at), f"{at}.steps"),
        text=sj.string(sj.field(raw, "text", at), f"{at}.text"),
        kind=None if kind is None else FindingKind(kind),
        output=sj.string(raw.get("output", "logits"), f"{at}.output"),
    )


DIVERGENCE_FIELDS = tuple(f.name for f in fields(TokenDivergence))


def prompt_to_json(p: PromptGeneration) -> dict[str, Any]:
    d = p.first_divergence
    return {
        "prompt": p.prompt,
        "torch_tokens": list(p.torch_tokens),
        "onnx_tokens": list(p.onnx_tokens),
        "torch_text": p.torch_text,
        "onnx_text": p.onnx_text,
        "match_ratio": p.match_ratio,
        "first_divergence": None if d is None else {f: getattr(d, f) for f in DIVERGENCE_FIELDS},
        "torch_pieces": list(p.torch_pieces),
        "onnx_pieces": list(p.onnx_pieces),
    }


def prompts_from_json(raw: Any, at: str = "generation.prompts") -> tuple[PromptGeneration, ...]:
    """Prompts read back (sj.FieldError naming the field when malformed)."""
    if raw is None:
        return ()
    return tuple(_prompt_from_json(item, f"{at}[{i}]") for i, item in enumerate(sj.array(raw, at)))


def _prompt_from_json(raw: Any, at: str) -> PromptGeneration:
    raw = sj.obj(raw, at)
    d = raw.get("first_divergence")

    def ints(key: str) -> tuple[int, ...]:
        items = sj.array(sj.field(raw, key, at), f"{at}.{key}")
        return tuple(sj.integer(v, f"{at}.{key}[{i}]") for i, v in enumerate(items))

    return PromptGeneration(
        prompt=sj.string(sj.field(raw, "prompt", at), f"{at}.prompt"),
        torch_tokens=ints("torch_tokens"),
        onnx_tokens=ints("onnx_tokens"),
        torch_text=sj.string(sj.field(raw, "torch_text", at), f"{at}.torch_text"),
        onnx_text=sj.string(sj.field(raw, "onnx_text", at), f"{at}.onnx_text"),
        first_divergence=None if d is None else _divergence_from_json(d, f"{at}.first_divergence"),
        # one piece per token: as many as a generation makes (the manifest's size bounds them)
        torch_pieces=_texts(raw.get("torch_pieces", []), f"{at}.torch_pieces", MAX_TOKENS),
        onnx_pieces=_texts(raw.get("onnx_pieces", []), f"{at}.onnx_pieces", MAX_TOKENS),
    )


def _divergence_from_json(raw: Any, at: str) -> TokenDivergence:
    raw = sj.obj(raw, at)

    def get(key: str, check: Any) -> Any:
        return check(sj.field(raw, key, at), f"{at}.{key}")

    def figure(key: str) -> float:  # null: a non-finite value written as strict JSON
        value = sj.optional(sj.number, raw.get(key), f"{at}.{key}")
        return float("inf") if value is None else value

    return TokenDivergence(
        position=get("position", sj.integer),
        torch_token=get("torch_token", sj.integer),
        onnx_token=get("onnx_token", sj.integer),
        torch_margin=figure("torch_margin"),
        logits_error=figure("logits_error"),
        near_tie=get("near_tie", sj.boolean),
        logits_passed=sj.boolean(raw.get("logits_passed", False), f"{at}.logits_passed"),
        torch_piece=sj.string(raw.get("torch_piece", ""), f"{at}.torch_piece"),
        onnx_piece=sj.string(raw.get("onnx_piece", ""), f"{at}.onnx_piece"),
    )


def _from_extra(extra: Mapping[str, Any]) -> tuple[Provenance, GenerationInfo | None]:
    """Provenance and generation info of a run saved before they had types ("extra")."""
    provenance = provenance_from_json(extra)
    if extra.get("kind") != RunKind.HF_GENERATE:
        return provenance, None
    keys = [f.name for f in fields(GenerationStep)]
    steps = [{k: step.get(k, 0) for k in keys} for step in extra.get("steps") or []]
    return provenance, generation_from_json({"summary": extra.get("summary") or {}, "steps": steps})


# ---------------------------------------------------------------------------------------
# the ONNX signature


def signature_to_json(signature: OnnxSignature | None) -> dict[str, Any] | None:
    if signature is None:
        return None

    def spec(t: TensorSpec) -> dict[str, Any]:
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}

    return {
        "inputs": [spec(t) for t in signature.inputs],
        "outputs": [spec(t) for t in signature.outputs],
        "opset": signature.opset,
        "producer": signature.producer,
        "ir_version": signature.ir_version,
    }


def signature_from_json(data: Any) -> OnnxSignature | None:
    if data is None:
        return None
    data = sj.obj(data, "signature")

    def specs(key: str) -> tuple[TensorSpec, ...]:
        result = []
        for i, t in enumerate(sj.array(sj.field(data, key, "signature"), f"signature.{key}")):
            at = f"signature.{key}[{i}]"
            t = sj.obj(t, at)
            result.append(
                TensorSpec(
                    name=sj.string(sj.field(t, "name", at), f"{at}.name"),
                    dtype=sj.string(sj.field(t, "dtype", at), f"{at}.dtype"),
                    shape=sj.shape(sj.field(t, "shape", at), f"{at}.shape", named=True),
                )
            )
        return tuple(result)

    return OnnxSignature(
        inputs=specs("inputs"),
        outputs=specs("outputs"),
        opset=sj.integer(sj.field(data, "opset", "signature"), "signature.opset"),
        producer=sj.string(sj.field(data, "producer", "signature"), "signature.producer"),
        ir_version=sj.integer(sj.field(data, "ir_version", "signature"), "signature.ir_version"),
    )


# ---------------------------------------------------------------------------------------
# --layers: the report's "layers" block, with its kept arrays as members


def layers_to_json(layers: LayersResult, put: ArrayPut, prefix: str) -> dict[str, Any]:
    """The report's layers block (LayersResult.to_json, parity.layers.result) and its kept
    arrays as members PREFIX/K/{ref,onnx}."""
    data = layers.to_json()
    data["kept"] = [
        {
            "order": k.order,
            "input_set": k.input_set,
            "onnx_value": k.onnx_value,
            "ref": put(f"{prefix}/{i}/ref.npy", k.ref, f"layer value {k.onnx_value!r}"),
            "onnx": put(f"{prefix}/{i}/onnx.npy", k.onnx, f"layer value {k.onnx_value!r}"),
        }
        for i, k in enumerate(layers.kept)
    ]
    return data


def layers_from_json(data: Any, get: ArrayGet, at: str) -> LayersResult | None:
    if data is None:
        return None
    from parity.layers.result import KeptValue, LayersResult

    data = sj.obj(data, at)
    kept = []
    for i, k in enumerate(sj.array(data.get("kept") or [], f"{at}.kept")):
        where = f"{at}.kept[{i}]"
        k = sj.obj(k, where)
        kept.append(
            KeptValue(
                order=sj.integer(sj.field(k, "order", where), f"{where}.order"),
                input_set=sj.integer(sj.field(k, "input_set", where), f"{where}.input_set"),
                onnx_value=sj.string(sj.field(k, "onnx_value", where), f"{where}.onnx_value"),
                ref=get(sj.field(k, "ref", where), f"{where}.ref"),
                onnx=get(sj.field(k, "onnx", where), f"{where}.onnx"),
            )
        )
    return LayersResult.from_json(data, kept=tuple(kept))


def _candidate_layers_from_json(
    raw: Any, layers: LayersResult | None, get: ArrayGet
) -> dict[int, LayersResult]:
    """Each candidate's layers (absent in runs saved before they were kept: {})."""
    result = {}
    for i, entry in enumerate(sj.array(raw or [], "candidate_layers")):
        at = f"candidate_layers[{i}]"
        entry = sj.obj(entry, at)
        index = sj.integer(sj.field(entry, "candidate", at), f"{at}.candidate")
        if sj.boolean(entry.get("is_layers", False), f"{at}.is_layers"):
            if layers is None:
                raise sj.FieldError(f"{at}.is_layers: the run has no layers")
            result[index] = layers
        else:
            result[index] = layers_from_json(sj.field(entry, "layers", at), get, f"{at}.layers")
    return result


# ---------------------------------------------------------------------------------------
# quantized weights judged (parity.analyses.quantization): the report's "quantization" block


def quantization_to_json(q: QuantizationResult, *, saved: bool = False) -> dict[str, Any]:
    """``quantization``: {"bits", "weights": [{node, op, bits, block_size, shape, parameter,
    status, max_steps, bad_blocks, n_blocks, defect}], "outputs": [{name, export_max_abs,
    export_passed, sqnr_db, quant_max_abs, flip_max_abs}], "unsimulated", "tokens" (causal
    LMs, or null), "notes"}.
    A saved run keeps its numbers exactly (`saved`); the report's are strict JSON."""
    num = exact if saved else _finite

    def tokens(t: QuantizedTokens | None) -> dict[str, Any] | None:
        if t is None:
            return None
        return {
            "top1_agreement": num(t.top1_agreement),
            "kl_mean": num(t.kl_mean),
            "greedy_agree": t.greedy_agree,
            "greedy_total": t.greedy_total,
            "first_change": t.first_change,
            "onnx_agree": t.onnx_agree,
        }

    return {
        "bits": q.width,
        "weights": [
            {
                "node": w.node,
                "op": w.op,
                "bits": w.bits,
                "block_size": w.block_size,
                "shape": list(w.shape),
                "parameter": w.parameter,
                "status": w.status,
                "max_steps": num(w.max_steps),
                "bad_blocks": w.bad_blocks,
                "n_blocks": w.n_blocks,
                "defect": w.defect,
            }
            for w in q.weights
        ],
        "outputs": [
            {
                "name": o.name,
                "export_max_abs": num(o.export_max_abs),
                "export_passed": o.export_passed,
                "sqnr_db": num(o.sqnr_db),
                "quant_max_abs": num(o.quant_max_abs),
                "flip_max_abs": num(o.flip_max_abs),
            }
            for o in q.outputs
        ],
        "tokens": tokens(q.tokens),
        "notes": list(q.notes),
        "activations": q.activations,
        "activations_simulated": q.activations_simulated,
        "reference": q.reference,
        "float_twin": q.float_twin,
        "located": q.located,
        "unsimulated": list(q.unsimulated),
    }


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def quantization_from_json(raw: Any, at: str = "quantization") -> QuantizationResult | None:
    """What `quantization_to_json(saved=True)` wrote (None: absent, or saved before)."""
    if raw is None:
        return None
    raw = sj.obj(raw, at)
    weights = []
    for i, entry in enumerate(sj.array(sj.field(raw, "weights", at), f"{at}.weights")):
        w = f"{at}.weights[{i}]"
        entry = sj.obj(entry, w)
        shape = sj.shape(sj.field(entry, "shape", w), f"{w}.shape")
        if len(shape) != 2:
            raise sj.FieldError(f"{w}.shape: expected [K, N], got {list(shape)}")
        weights.append(
            QuantizedWeight(
                node=sj.string(sj.field(entry, "node", w), f"{w}.node"),
                op=sj.string(sj.field(entry, "op", w), f"{w}.op"),
                bits=sj.integer(sj.field(entry, "bits", w), f"{w}.bits", minimum=1),
                block_size=sj.integer(sj.field(entry, "block_size", w), f"{w}.block_size"),
                shape=(int(shape[0]), int(shape[1])),
                parameter=sj.optional(sj.string, entry.get("parameter"), f"{w}.parameter"),
                max_steps=from_exact(entry.get("max_steps"), f"{w}.max_steps"),
                bad_blocks=sj.integer(entry.get("bad_blocks", 0), f"{w}.bad_blocks"),
                n_blocks=sj.integer(entry.get("n_blocks", 0), f"{w}.n_blocks"),
                defect=sj.string(entry.get("defect", ""), f"{w}.defect"),
            )
        )
    outputs = []
    for i, entry in enumerate(sj.array(raw.get("outputs", []), f"{at}.outputs")):
        o = f"{at}.outputs[{i}]"
        entry = sj.obj(entry, o)
        outputs.append(
            QuantizedOutput(
                name=sj.string(sj.field(entry, "name", o), f"{o}.name"),
                export_max_abs=from_exact(entry.get("export_max_abs"), f"{o}.export_max_abs"),
                export_passed=sj.optional(
                    sj.boolean, entry.get("export_passed"), f"{o}.export_passed"
                ),
                sqnr_db=from_exact(entry.get("sqnr_db"), f"{o}.sqnr_db"),
                quant_max_abs=from_exact(entry.get("quant_max_abs"), f"{o}.quant_max_abs"),
                flip_max_abs=from_exact(entry.get("flip_max_abs"), f"{o}.flip_max_abs"),
            )
        )
    tokens = None
    if raw.get("tokens") is not None:
        t, tat = sj.obj(raw["tokens"], f"{at}.tokens"), f"{at}.tokens"
        tokens = QuantizedTokens(
            top1_agreement=from_exact(t.get("top1_agreement"), f"{tat}.top1_agreement"),
            kl_mean=from_exact(t.get("kl_mean"), f"{tat}.kl_mean"),
            greedy_agree=sj.integer(t.get("greedy_agree", 0), f"{tat}.greedy_agree"),
            greedy_total=sj.integer(t.get("greedy_total", 0), f"{tat}.greedy_total"),
            first_change=sj.optional(sj.integer, t.get("first_change"), f"{tat}.first_change"),
            onnx_agree=sj.optional(sj.integer, t.get("onnx_agree"), f"{tat}.onnx_agree"),
        )
    notes = tuple(
        sj.string(n, f"{at}.notes[{i}]")
        for i, n in enumerate(sj.array(raw.get("notes", []), f"{at}.notes"))
    )
    activations = sj.string(raw.get("activations", ""), f"{at}.activations")
    reference = sj.string(raw.get("reference", "torch"), f"{at}.reference")
    simulated = sj.boolean(raw.get("activations_simulated", True), f"{at}.activations_simulated")
    unsimulated = tuple(
        sj.string(n, f"{at}.unsimulated[{i}]")
        for i, n in enumerate(sj.array(raw.get("unsimulated", []), f"{at}.unsimulated"))
    )
    return QuantizationResult(
        weights=tuple(weights),
        outputs=tuple(outputs),
        tokens=tokens,
        notes=notes,
        activations=activations,
        activations_simulated=simulated,
        reference=reference,
        float_twin=sj.boolean(raw.get("float_twin", False), f"{at}.float_twin"),
        located=sj.string(raw.get("located", ""), f"{at}.located"),
        unsimulated=unsimulated,
    )
