"""Manifests written by earlier Parity versions, upgraded as they are read (every upgrade of
older data is here, none on the result types): runs saved before provenance had a type
("extra"), with one flat "ref_outputs" list, and with flat rows, ONNX output sets and layers
(top-level "comparisons", "onnx_outputs", "layers", "candidate_layers"; no "candidates"
before there were several)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import parity.files.strict_json as sj
from parity.files.array_members import ArrayGet
from parity.files.derived_json import decode
from parity.layers.result import LayersResult
from parity.results import (
    CandidateInfo,
    CandidateRun,
    GenerationInfo,
    GenerationStep,
    OutputComparison,
    OutputSet,
    Provenance,
    RunKind,
)

__all__ = ["check_indices", "flat_candidates", "flat_references", "from_extra"]


def flat_references(
    m: Mapping[str, Any], get: ArrayGet, n_sets: int, outputs_kept: bool
) -> list[OutputSet | None]:
    """Each input set's reference outputs from the flat "ref_outputs" list."""
    from parity.reports.members import output_sets_from_json

    flat = output_sets_from_json(m, "ref_outputs", get)
    if len(flat) != n_sets and (flat or outputs_kept):
        raise sj.FieldError(f"ref_outputs: {len(flat)} output sets for {n_sets} input sets")
    return list(flat) if flat else [None] * n_sets


def from_extra(extra: Mapping[str, Any]) -> tuple[Provenance, GenerationInfo | None]:
    """Provenance and generation info of a run saved before they had types ("extra")."""
    provenance = decode(Provenance, extra, "provenance")
    if extra.get("kind") != RunKind.HF_GENERATE:
        return provenance, None
    keys = [f.name for f in fields(GenerationStep)]
    steps = [{k: step.get(k, 0) for k in keys} for step in extra.get("steps") or []]
    raw = {"summary": extra.get("summary") or {}, "steps": steps}
    return provenance, decode(GenerationInfo, raw, "generation")


def _implied_candidate(
    onnx: str, environment: Mapping[str, str], provenance: Provenance
) -> CandidateInfo:
    """The one candidate of a run saved before candidates were kept: its file, provider and
    level, from the run's own fields."""
    provider = str(environment.get("provider", "CPUExecutionProvider"))
    level = provenance.ort_opt_level or "all"
    return CandidateInfo(0, onnx, provider, level, provenance.onnx_sha256)


def flat_candidates(
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
    from parity.reports.members import comparison_from_json, output_sets_from_json

    comparisons = [
        comparison_from_json(entry, f"comparisons[{c}]", get)
        for c, entry in enumerate(sj.array(sj.field(m, "comparisons", "manifest"), "comparisons"))
    ]
    layers = _layers_from_json(m.get("layers"), get, "layers")
    listed = sj.array(m.get("candidates") or [], "candidates")
    infos = tuple(
        decode(CandidateInfo, entry, f"candidates[{i}]") for i, entry in enumerate(listed)
    ) or (_implied_candidate(onnx, environment, provenance),)
    candidate_layers = _candidate_layers(m.get("candidate_layers"), layers, get)
    if not candidate_layers and layers is not None:  # one candidate, or saved before each kept
        candidate_layers = {infos[0].index: layers}
    check_indices(sets, {i.index for i in infos}, comparisons, candidate_layers)
    onnx_outputs = output_sets_from_json(m, "onnx_outputs", get)
    # rows by their `candidate`, output sets candidate after candidate (one candidate: all)
    n = len(sets) if len(infos) > 1 else len(onnx_outputs)
    return tuple(
        CandidateRun(
            info,
            tuple(c for c in comparisons if c.candidate == info.index),
            onnx_outputs[k * n : (k + 1) * n],
            _layers_held(candidate_layers.get(info.index)),
        )
        for k, info in enumerate(infos)
    )


def _layers_from_json(raw: Any, get: ArrayGet, at: str) -> LayersResult | None:
    return None if raw is None else LayersResult.from_saved_json(raw, get, at)


def _layers_held(layers: LayersResult | None) -> dict[str, object]:
    """A candidate's results as its layers make them (--layers' result "layers")."""
    return {} if layers is None else {"layers": layers}


def _candidate_layers(
    raw: Any, layers: LayersResult | None, get: ArrayGet
) -> dict[int, LayersResult | None]:
    """Each candidate's layers (absent in runs saved before they were kept: {})."""
    result: dict[int, LayersResult | None] = {}
    for i, entry in enumerate(sj.array(raw or [], "candidate_layers")):
        at = f"candidate_layers[{i}]"
        entry = sj.obj(entry, at)
        index = sj.integer(sj.field(entry, "candidate", at), f"{at}.candidate")
        if sj.boolean(entry.get("is_layers", False), f"{at}.is_layers"):
            if layers is None:
                raise sj.FieldError(f"{at}.is_layers: the run has no layers")
            result[index] = layers
        else:
            result[index] = _layers_from_json(sj.field(entry, "layers", at), get, f"{at}.layers")
    return result


def check_indices(
    sets: set[int],
    candidates: set[int],
    comparisons: Sequence[OutputComparison],
    layers: Mapping[int, Any],
    at: str = "comparisons",
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
