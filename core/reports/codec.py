"""A saved run's manifest: the run whole, to JSON and back (`run_to_json` / `run_from_json`).

A manifest must reopen the run exactly: figures are written losslessly, arrays go to the
container (parity.reports.saved_run) through an `ArrayPut` and come back through an
`ArrayGet`. Every result type's JSON is derived from its fields (parity.files.derived_json, with
parity.reports.forms where a type's JSON differs), so a field added to a type is saved and
read back with no edit here. This module says where the run's parts and arrays lie: each
input set's feeds, reference outputs and exclusion masks in its `input_sets[]` entry, each
candidate's rows, ONNX output sets, layers and analyses in its `candidates[]` entry. Reading
checks each field strictly (parity.files.strict_json: FieldError naming its dotted path).

Manifests written by earlier Parity versions still read (parity.reports.older_runs): fields
added since take their defaults, and older layouts are upgraded there, none on the result
types. The JSON report is parity.reports.report_json's (its names are re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import parity.files.strict_json as sj
from parity.files.array_members import ArrayGet, ArrayPut
from parity.files.derived_json import MAX_NOTES, MAX_TOKENS, decode, encode
from parity.files.json_output import exact, from_exact, plain
from parity.reports.analysis_results import result_types  # every one registered
from parity.reports.forms import register_forms
from parity.reports.members import (
    comparison_from_json,
    comparison_to_json,
    input_set_from_json,
    input_set_to_json,
    output_set_from_json,
    output_sets_from_json,
    output_sets_to_json,
)
from parity.reports.report_json import (
    REPORT_SCHEMA,
    generation_report_json,
    put_results,
    report_json,
    report_rows_from_json,
    report_verdict,
    row_from_json,
    row_to_json,
    where_to_json,
)
from parity.results import (
    AnalysisNote,
    CandidateInfo,
    CandidateRun,
    GenerationInfo,
    InputCase,
    OutputSet,
    PromptGeneration,
    Provenance,
    SavedFrom,
    ValidationRun,
)
from parity.results.by_name import OwnJson
from parity.results.noise import noise_from_json, noise_to_json
from parity.signature import OnnxSignature
from parity.tolerances import Tolerances
from parity.verdict import Judge

if TYPE_CHECKING:
    pass

__all__ = [
    "MAX_NOTES",
    "MAX_TOKENS",
    "REPORT_SCHEMA",
    "ArrayGet",
    "ArrayPut",
    "generation_report_json",
    "noise_from_json",
    "noise_to_json",
    "prompt_to_json",
    "prompts_from_json",
    "provenance_from_json",
    "report_json",
    "report_rows_from_json",
    "report_verdict",
    "row_from_json",
    "row_to_json",
    "run_from_json",
    "run_to_json",
    "where_to_json",
]

register_forms()


def run_to_json(run: ValidationRun, put: ArrayPut, *, keep_outputs: bool = True) -> dict[str, Any]:
    """Everything of `run` but its container's own fields (schema, identity, members)."""
    input_sets = []
    for s, case in enumerate(run.cases):
        entry = input_set_to_json(case.input_set, s, case.exclusions, put)
        kept = case.reference if keep_outputs else None
        entry["reference"] = (
            None if kept is None else output_sets_to_json("ref", (kept,), put, start=s)[0]
        )
        input_sets.append(entry)
    manifest = {
        "model": run.model,
        "onnx": run.onnx,
        "environment": {str(k): str(v) for k, v in run.environment.items()},
        "signature": encode(run.signature),
        "tolerances": run.tolerances.to_json(),
        "input_sets": input_sets,
        "outputs_kept": bool(keep_outputs and (run.ref_outputs or run.onnx_outputs)),
        "timings": {str(k): exact(v) for k, v in run.timings.items()},
        "provenance": plain(encode(run.provenance)),
        # a generation's JSON is plain (null where a margin was infinite), as it always was
        "generation": encode(run.generation, exact=False),
        "candidates": _candidates_to_json(run, put, keep_outputs),
        "analyses": encode(run.analyses),
        "judge": run.judge,
    }
    _put_saved(manifest, run.results, put, "", per_run=True)  # each analysis's of the run
    return manifest


def run_from_json(m: Mapping[str, Any], get: ArrayGet, saved: SavedFrom) -> ValidationRun:
    """The run a manifest holds, every field type-checked (sj.FieldError names the first bad
    one). Fields added since a run was saved take their defaults."""
    from parity.reports import older_runs

    input_sets, exclusions, references = [], [], []
    for i, entry in enumerate(sj.array(sj.field(m, "input_sets", "manifest"), "input_sets")):
        at = f"input_sets[{i}]"
        input_set, masks = input_set_from_json(entry, at, get)
        input_sets.append(input_set)
        exclusions.append(masks)
        raw = entry.get("reference")
        references.append(
            None if raw is None else output_set_from_json(raw, f"{at}.reference", get)
        )
    outputs_kept = sj.boolean(m.get("outputs_kept", False), "outputs_kept")
    if "ref_outputs" in m:  # saved before each input set kept its reference outputs
        references = older_runs.flat_references(m, get, len(input_sets), outputs_kept)
    _check_references(references, outputs_kept)
    _check_unique([s.index for s in input_sets], "input_sets", "index")
    if "provenance" in m:
        provenance = provenance_from_json(sj.obj(m["provenance"], "provenance"))
        generation = decode(
            GenerationInfo | None, sj.field(m, "generation", "manifest"), "generation"
        )
    else:
        provenance, generation = older_runs.from_extra(
            sj.optional(sj.obj, m.get("extra"), "extra") or {}
        )
    timings = {  # a step's seconds; null (never written by exact) reads as not timed
        k: seconds
        for k, v in sj.obj(sj.field(m, "timings", "manifest"), "timings").items()
        if (seconds := from_exact(v, f"timings.{k}")) is not None
    }
    environment = decode(dict[str, str], sj.field(m, "environment", "manifest"), "environment")
    onnx = sj.string(sj.field(m, "onnx", "manifest"), "onnx")
    sets = {s.index for s in input_sets}
    if "comparisons" in m:  # saved before each candidate kept its own rows, outputs, layers
        candidates = older_runs.flat_candidates(m, get, onnx, environment, provenance, sets)
    else:
        candidates = _candidates_from_json(m.get("candidates"), get, sets)
    _check_candidates(candidates, len(input_sets))
    return ValidationRun(
        model=sj.string(sj.field(m, "model", "manifest"), "model"),
        onnx=onnx,
        signature=decode(OnnxSignature | None, sj.field(m, "signature", "manifest"), "signature"),
        tolerances=Tolerances.from_json(sj.field(m, "tolerances", "manifest"), source="tolerances"),
        environment=environment,
        cases=tuple(InputCase(s, references[k], exclusions[k]) for k, s in enumerate(input_sets)),
        candidates=candidates,
        timings=timings,
        provenance=provenance,
        generation=generation,
        saved=saved,
        results=_results_from_json(m, "", get, per_run=True),
        analyses=_listed(AnalysisNote, m.get("analyses"), "analyses"),
        judge=decode(Judge, m.get("judge", "tolerance"), "judge"),
    )


def _listed(cls: type, raw: Any, at: str) -> tuple[Any, ...]:
    """A run's list of `cls` (absent in runs saved before it was kept: ()), at most
    MAX_NOTES long."""
    items = sj.array(raw or [], at, limit=MAX_NOTES)
    return tuple(decode(cls, entry, f"{at}[{i}]") for i, entry in enumerate(items))


def provenance_from_json(raw: Mapping[str, Any]) -> Provenance:
    """Provenance read back; a key this Parity does not know is skipped, one it knows is
    checked (each is absent in runs saved before it existed)."""
    return decode(Provenance, raw, "provenance")


def prompt_to_json(p: PromptGeneration) -> dict[str, Any]:
    """One prompt generated freely, as the report and the manifest write it."""
    return encode(p, exact=False)


def prompts_from_json(raw: Any, at: str = "generation.prompts") -> tuple[PromptGeneration, ...]:
    """Prompts read back (sj.FieldError naming the field when malformed)."""
    return () if raw is None else decode(tuple[PromptGeneration, ...], raw, at)


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


# ---------------------------------------------------------------------------------------
# candidates: each one's info with its rows, ONNX output sets, layers and analyses


def _candidates_to_json(
    run: ValidationRun, put: ArrayPut, keep_outputs: bool
) -> list[dict[str, Any]]:
    """Each candidate with its rows, ONNX output sets and analyses' results. Members keep the
    names they had when these were flat (rows and output sets numbered across candidates, the
    lead's layers under "layers"), so a run's arrays are named as in older saved runs."""
    entries, row, position = [], 0, 0
    for k, c in enumerate(run.candidates):
        entry = encode(c.info)
        entry["comparisons"] = [
            comparison_to_json(r, put, row + j) for j, r in enumerate(c.outputs)
        ]
        entry["onnx_outputs"] = (
            output_sets_to_json("onnx", c.onnx_outputs, put, start=position) if keep_outputs else []
        )
        # each analysis's, under its name; one with arrays puts them under NAME (the lead's)
        # or NAME/cINDEX
        _put_saved(entry, c.results, put, "" if k == 0 else f"/c{c.index}", per_run=False)
        row += len(c.outputs)
        position += len(c.onnx_outputs)
        entries.append(entry)
    return entries


def _put_saved(
    entry: dict[str, Any],
    results: Mapping[str, object],
    put: ArrayPut,
    suffix: str,
    *,
    per_run: bool,
) -> None:
    """Each analysis's result exactly, under its name (parity.results.by_name): one that
    writes its own JSON (OwnJson) with its arrays as members NAME{suffix}/..."""
    own = {n: r for n, r in results.items() if isinstance(r, OwnJson)}
    rest = {n: r for n, r in results.items() if n not in own}
    put_results(entry, rest, exact=True, per_run=per_run)
    for name, result in own.items():
        if name in entry:
            raise ValueError(f"analysis result {name!r} would replace the JSON's own {name!r}")
        entry[name] = result.saved_json(put, f"{name}{suffix}")


def _candidates_from_json(raw: Any, get: ArrayGet, sets: set[int]) -> tuple[CandidateRun, ...]:
    """The candidates of a manifest that keeps each one's rows, output sets and layers."""
    from parity.reports.older_runs import check_indices

    records = []
    for i, entry in enumerate(sj.array(raw, "candidates")):
        at = f"candidates[{i}]"
        entry = sj.obj(entry, at)
        info = decode(CandidateInfo, entry, at)
        rows = [
            comparison_from_json(row, f"{at}.comparisons[{j}]", get)
            for j, row in enumerate(
                sj.array(sj.field(entry, "comparisons", at), f"{at}.comparisons")
            )
        ]
        check_indices(sets, {info.index}, rows, {}, at=f"{at}.comparisons")
        records.append(
            CandidateRun(
                info,
                tuple(rows),
                output_sets_from_json(entry, "onnx_outputs", get),
                _results_from_json(entry, at, get),
            )
        )
    if not records:
        raise sj.FieldError("candidates: the run has none")
    return tuple(records)


def _results_from_json(
    entry: Mapping[str, Any], at: str, get: ArrayGet, *, per_run: bool = False
) -> dict[str, object]:
    """A candidate's analysis results (with `per_run`, the run's), each under its analysis's
    name (parity.results.by_name: a type registered there is read with no edit here; one that
    writes its own JSON, OwnJson, reads its own, arrays and all)."""
    prefix = f"{at}." if at else ""
    return {
        name: cls.from_saved_json(entry[name], get, f"{prefix}{name}")
        if issubclass(cls, OwnJson)
        else decode(cls, entry[name], f"{prefix}{name}")
        for name, cls in result_types(per_run=per_run).items()
        if entry.get(name) is not None
    }
