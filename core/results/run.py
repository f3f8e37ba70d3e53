"""The one run class (ValidationRun): everything one validation produced, immutable, with the
views every reader uses; its files are parity.reports' (RunFiles)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from parity.data.result import DataResult
from parity.results.approximation import ApproximationResult
from parity.results.candidate import CandidateInfo, CandidateRun, Provenance
from parity.results.comparison import (
    InputCase,
    InputSet,
    OutputComparison,
    OutputSet,
    Status,
)
from parity.results.evidence import AnalysisNote, Finding, SuggestedTolerances
from parity.results.frozen import FrozenNode, FrozenNodes, StaticAxes, StaticAxis
from parity.results.generation import GenerationInfo
from parity.results.quantization import QuantizationResult
from parity.signature import OnnxSignature
from parity.text import html_text
from parity.tolerances import Tolerance, Tolerances, TolerancesLike, tolerances_of
from parity.verdict import Judge, Verdict, judge_of

if TYPE_CHECKING:  # annotation only: parity.layers stands on this package
    from parity.layers.result import LayersResult

R = TypeVar("R")


@dataclass(frozen=True)
class SavedFrom:
    """Where a reopened run was saved, and what was hashed then (parity.reports.saved_run)."""

    path: str
    identity: Mapping[str, Any]
    saved_by: Mapping[str, Any]
    outputs_kept: bool


@dataclass(frozen=True)
class ValidationRun:
    """Everything one validation produced. Raw outputs are kept for inspection views.

    The one run class: `parity.validate`, the CLI, the dashboard, sweeps and saved runs all
    give this. Runs are immutable: `rejudge` returns a new one. `to_json`, `save`,
    `write_html` and the notebook view call `parity.reports` through `RunFiles` (it stands on
    this module, which therefore cannot import it).

    `candidates` holds one `CandidateRun` per way the ONNX side ran (file x provider x opt
    level): its info, rows, ONNX outputs and layers. `outputs` (every candidate's rows, the
    JSON report's `outputs`) and `layers` (the lead candidate's) are read from them; a
    one-candidate view is `for_candidate(i)`. `cases` holds each input set with its
    reference outputs and exclusion masks (`InputCase`); `input_sets`, `ref_outputs` and
    `exclusions` are read from them. `from_rows` builds a run from flat fields.
    """

    model: str
    onnx: str
    signature: OnnxSignature | None
    tolerances: Tolerances
    environment: Mapping[str, str]
    cases: tuple[InputCase, ...]  # each input set with its reference outputs and exclusions
    candidates: tuple[CandidateRun, ...]  # at least one; the lead (the run's `onnx`) first
    timings: Mapping[str, float] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=Provenance)
    generation: GenerationInfo | None = None
    saved: SavedFrom | None = None
    # what each analysis of the whole run found, by its name (parity.results.by_name): the
    # tolerances suggested and checked on fresh input sets ("suggested_tolerances", --suggest),
    # the frozen search's nodes and static axes ("frozen", "static_axes"), what changes per
    # output on the user's samples ("data", --data)
    results: Mapping[str, object] = field(default_factory=dict)
    # what each analysis asked for did, or why it could not (parity.analyses)
    analyses: tuple[AnalysisNote, ...] = ()
    # how `verdict` is decided: the tolerance (default) or the cause (parity.show.cause)
    judge: Judge = Judge.TOLERANCE

    @classmethod
    def from_rows(
        cls,
        *,
        outputs: Sequence[OutputComparison],
        input_sets: Sequence[InputSet] = (),
        ref_outputs: Sequence[OutputSet] = (),
        exclusions: Sequence[Mapping[str, np.ndarray]] = (),
        onnx_outputs: Sequence[OutputSet] = (),
        candidates: Sequence[CandidateInfo] = (),
        layers: LayersResult | None = None,
        **fields: Any,
    ) -> ValidationRun:
        """A run from flat fields (tests, notebooks, a hand-made run): `ref_outputs` and
        `exclusions` by position in `input_sets` (either may be ()); each row goes to the
        candidate its `candidate` names; `onnx_outputs` and `layers` are the lead's (with
        several candidates, `onnx_outputs` holds each one's sets in turn). Without
        `candidates`, one on CPU at level "all" (index 0) is the run's."""
        cases = tuple(
            InputCase(
                s,
                ref_outputs[k] if ref_outputs else None,
                exclusions[k] if exclusions else {},
            )
            for k, s in enumerate(input_sets)
        )
        infos = tuple(candidates) or (
            CandidateInfo(0, str(fields.get("onnx", "")), "CPUExecutionProvider", "all"),
        )
        n = len(input_sets) if len(infos) > 1 else len(onnx_outputs)
        runs = tuple(
            CandidateRun(
                info,
                tuple(c for c in outputs if c.candidate == info.index),
                tuple(onnx_outputs[k * n : (k + 1) * n]),
                {"layers": layers} if k == 0 and layers is not None else {},
            )
            for k, info in enumerate(infos)
        )
        return cls(cases=cases, candidates=runs, **fields)

    def result(self, name: str, cls: type[R]) -> R | None:
        """Analysis `name`'s result of the whole run (None: not run, or found nothing)."""
        value = self.results.get(name)
        return value if isinstance(value, cls) else None

    def with_result(self, name: str, result: object) -> ValidationRun:
        """The run with analysis `name`'s result of the whole run (a type registered under
        `name` with per_run: parity.results.by_name)."""
        return replace(self, results={**self.results, name: result})

    @property
    def suggested_tolerances(self) -> SuggestedTolerances | None:
        """Tolerances suggested and checked on fresh input sets (parity.analyses.fresh_check)."""
        return self.result("suggested_tolerances", SuggestedTolerances)

    @property
    def data(self) -> DataResult | None:
        """--data: what changes per output on the user's samples (parity.analyses.answers;
        the run's result "data")."""
        return self.result("data", DataResult)

    @property
    def frozen(self) -> tuple[FrozenNode, ...]:
        """Nodes holding a size or branch frozen at export, confirmed ones first (the frozen
        search's result "frozen": parity.results.frozen)."""
        found = self.result("frozen", FrozenNodes)
        return found.nodes if found is not None else ()

    @property
    def static_axes(self) -> tuple[StaticAxis, ...]:
        """Input axes the file fixes where the torch model takes other sizes (the frozen
        search's result "static_axes")."""
        found = self.result("static_axes", StaticAxes)
        return found.axes if found is not None else ()

    @cached_property
    def input_sets(self) -> tuple[InputSet, ...]:
        return tuple(c.input_set for c in self.cases)

    @cached_property
    def ref_outputs(self) -> tuple[OutputSet, ...]:
        """Each input set's reference outputs, in `input_sets` order; () when not kept."""
        refs = tuple(c.reference for c in self.cases if c.reference is not None)
        return refs if len(refs) == len(self.cases) else ()

    @cached_property
    def exclusions(self) -> tuple[Mapping[str, np.ndarray], ...]:
        """Each input set's exclusion masks by output name, in `input_sets` order."""
        return tuple(c.exclusions for c in self.cases)

    @cached_property
    def outputs(self) -> tuple[OutputComparison, ...]:
        """Every candidate's rows, candidate after candidate: one per (input set, output)."""
        return tuple(c for run in self.candidates for c in run.outputs)

    @property
    def infos(self) -> tuple[CandidateInfo, ...]:
        """Each candidate's info (file, provider, level, error), in `candidates` order."""
        return tuple(c.info for c in self.candidates)

    @property
    def onnx_outputs(self) -> tuple[OutputSet, ...]:
        """Every candidate's ONNX output sets, candidate after candidate (each in
        `input_sets` order): one candidate's are `candidate(i).onnx_outputs`."""
        return tuple(o for c in self.candidates for o in c.onnx_outputs)

    @property
    def quantization(self) -> QuantizationResult | None:
        """The lead candidate's quantized weights judged (parity.analyses.quantization)."""
        return self.candidates[0].quantization if self.candidates else None

    @property
    def approximation(self) -> ApproximationResult | None:
        """The lead candidate's approximations judged (parity.analyses.approximation)."""
        return self.candidates[0].approximation if self.candidates else None

    @property
    def layers(self) -> LayersResult | None:
        """The lead candidate's layers (--layers), or None."""
        return self.candidates[0].layers if self.candidates else None

    @property
    def verdict(self) -> Verdict:
        """The run's verdict as its `judge` decides it: by tolerance (`tolerance_verdict`),
        or by cause (parity.show.cause: FAIL on a bug or an unexplained difference, PASS
        where every difference is what the file was meant to do). ERROR either way when a
        candidate could not be run at all (the CLI's exit 2)."""
        if self.judge is Judge.CAUSE:
            return _run_files().cause_verdict(self)
        return self.tolerance_verdict

    @property
    def tolerance_verdict(self) -> Verdict:
        """PASS when every candidate passes every output at its tolerance; ERROR when a
        candidate could not be run at all; else FAIL."""
        if any(c.info.error is not None for c in self.candidates):
            return Verdict.ERROR
        if self.outputs and not self.failing:
            return Verdict.PASS
        return Verdict.FAIL

    @property
    def passed(self) -> bool:
        """Every output of every input set passes at the run's tolerances."""
        return self.verdict is Verdict.PASS

    @property
    def failing(self) -> tuple[str, ...]:
        """Names of the outputs that fail (any status but pass) in at least one input set. An
        output judged on agreement (--min-agreement) fails on it instead of on its values; an
        LLM's logits fail on a left-padded batch the file gets wrong (GenerationInfo)."""
        bad = {c.name for c in self.verdict_rows if not c.status.passed}
        bad |= {name for name, passed in self.answer_criteria.items() if not passed}
        padded = self.generation.padded_batch if self.generation is not None else None
        if padded is not None and padded.fails:  # a left-padded batch the file gets wrong
            bad.add(padded.output)
        return tuple(name for name in self.output_names if name in bad)

    @property
    def answer_criteria(self) -> dict[str, bool]:
        """Outputs judged on their answers (--min-agreement with --data): name -> passed."""
        return self.data.criteria if self.data is not None else {}

    @property
    def verdict_rows(self) -> tuple[OutputComparison, ...]:
        """The rows that decide the verdict: all but the value failures of an output judged
        on its answers (its shape, dtype and errors still count)."""
        answers = self.answer_criteria
        return tuple(c for c in self.outputs if not (c.name in answers and c.status is Status.FAIL))

    @property
    def comparisons(self) -> tuple[OutputComparison, ...]:
        """Deprecated alias of `outputs` (the same tuple): the name the JSON report and the
        docs use is `outputs`; this one stays so that older code runs."""
        return self.outputs

    @property
    def is_multi_candidate(self) -> bool:
        return len(self.candidates) > 1

    def candidate(self, index: int) -> CandidateRun:
        """The candidate numbered `index` (KeyError if the run has none)."""
        for view in self.candidates:
            if view.index == index:
                return view
        raise KeyError(index)

    def candidate_verdict(self, index: int) -> Verdict:
        """Candidate `index`'s verdict as the run's judge decides it (by cause: its own
        findings); `CandidateRun.verdict` is the tolerance's."""
        return self.for_candidate(index).verdict if self.is_multi_candidate else self.verdict

    def for_candidate(self, index: int) -> ValidationRun:
        """The run as if `index` had been its only candidate: the view every single-candidate
        reader (pages, Inspect, HTML details) works on."""
        view = self.candidate(index)
        if not self.is_multi_candidate:
            return self
        info = view.info
        return replace(
            self,
            onnx=info.onnx,
            environment={**self.environment, "provider": info.provider},
            provenance=replace(
                self.provenance, onnx_sha256=info.onnx_sha256, ort_opt_level=info.ort_opt_level
            ),
            candidates=(view,),
        )

    def renamed(self, names: Sequence[tuple[str, str]]) -> ValidationRun:
        """The run with every text naming a file by where it was read (`old`) naming it as it
        was given (`new`): a sweep pair reads an s3:// object from a temporary folder, and
        its report, HTML and saved run name the URI (parity.sweep.names)."""
        pairs = [(old, new) for old, new in names if old and old != new]
        return _renamed(self, pairs) if pairs else self

    def with_layers(self, layers: Mapping[int, LayersResult | None]) -> ValidationRun:
        """The run with each candidate's layers (--layers) by its index; others keep theirs."""
        return self.with_results("layers", layers)

    def with_results(self, name: str, found: Mapping[int, object | None]) -> ValidationRun:
        """The run with analysis `name`'s result for each candidate, by its index (a type
        registered under `name`: parity.results.by_name; None: it has none)."""

        def held(c: CandidateRun) -> Mapping[str, object]:
            kept = {k: v for k, v in c.results.items() if k != name}
            return kept if found[c.index] is None else {**c.results, name: found[c.index]}

        return replace(
            self,
            candidates=tuple(
                replace(c, results=held(c)) if c.index in found else c for c in self.candidates
            ),
        )

    def with_rows(self, rows: Sequence[OutputComparison]) -> ValidationRun:
        """The run with `rows` in place of its rows, each to the candidate it names."""
        return replace(
            self,
            candidates=tuple(
                replace(c, outputs=tuple(r for r in rows if r.candidate == c.index))
                for c in self.candidates
            ),
        )

    @property
    def is_generation(self) -> bool:
        """Its input sets are an LLM's generate() steps (parity.hf), not generated inputs."""
        return self.generation is not None

    def exclusion(self, input_set: int, name: str) -> np.ndarray | None:
        """The exclusion mask of one output (broadcastable to it), or None."""
        for case in self.cases:
            if case.index == input_set:
                return case.exclusions.get(name)
        return None

    def dim_names(self, name: str, rank: int) -> tuple[str | None, ...]:
        """The ONNX name of each axis of output `name` (``"batch"``, ``"height"``); None for
        fixed or unnamed axes, and for every axis without a signature or at another rank."""
        if self.signature is None:
            return (None,) * rank
        return self.signature.output_dim_names(name, rank)

    def arrays(self, c: OutputComparison) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The raw (reference, ONNX) outputs behind comparison `c`, None where not kept."""
        position = next((k for k, s in enumerate(self.cases) if s.index == c.input_set), None)
        if position is None:
            return None, None
        reference = self.cases[position].reference
        onnx_sets = self.candidate(c.candidate).onnx_outputs  # () when the run kept none
        onnx = onnx_sets[position] if onnx_sets else None
        ref_array = None if reference is None else reference.arrays.get(c.name)
        onnx_array = None if onnx is None else onnx.arrays.get(c.name)
        return (
            None if ref_array is None else np.asarray(ref_array),
            None if onnx_array is None else np.asarray(onnx_array),
        )

    @property
    def output_names(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for c in self.outputs:
            seen.setdefault(c.name, None)
        return tuple(seen)

    def comparison(self, input_set: int, name: str) -> OutputComparison:
        for c in self.outputs:
            if c.input_set == input_set and c.name == name:
                return c
        raise KeyError((input_set, name))

    def rejudge(
        self,
        tolerances: TolerancesLike = None,
        *,
        atol: float | None = None,
        rtol: float | None = None,
        judge: Judge | str | None = None,
    ) -> ValidationRun:
        """Judge every output again at other tolerances; milliseconds, no tensors touched
        (a left-padded batch too, from its kept figures: parity.results.padded).

        `tolerances`: a `Tolerances`, a mapping name -> atol or (atol, rtol), or a tolerances
        JSON file; `atol` / `rtol` replace the default (the run's where not given); `judge`
        "tolerance" or "cause" (the run's where not given).
        """
        base = self.tolerances.default
        default = Tolerance(
            atol=base.atol if atol is None else atol, rtol=base.rtol if rtol is None else rtol
        )
        if tolerances is None:
            tolerances = replace(self.tolerances, default=default)
        else:
            explicit = atol is not None or rtol is not None
            tolerances = tolerances_of(tolerances, default, explicit=explicit)
        tolerances.check_outputs(self.output_names)
        candidates = tuple(c.rejudge(tolerances) for c in self.candidates)
        generation = self.generation
        if generation is not None:  # the left-padded batch, beside the rows it was judged with
            generation = generation.rejudge(tolerances, [r for c in candidates for r in c.outputs])
        return replace(
            self,
            judge=self.judge if judge is None else judge_of(judge),
            tolerances=tolerances,
            candidates=candidates,
            generation=generation,
        )

    @property
    def findings(self) -> tuple[Finding, ...]:
        """What the run concludes (bug, rounding at the file's precision, frozen size, near
        tie, ONNX Runtime error, what was not measured): the one list every front renders,
        the JSON report's `findings` (parity.show.findings)."""
        return _run_files().findings(self)

    def to_json(self) -> dict[str, Any]:
        """The `parity.report/1` dict (strict JSON: null, never NaN or Infinity)."""
        return _run_files().report(self)

    def save(self, path: str | os.PathLike[str], *, keep_outputs: bool = True) -> Path:
        """Write a saved run (it reopens with `parity report` and in the dashboard)."""
        return _run_files().save(self, path, keep_outputs=keep_outputs)

    def write_html(self, path: str | os.PathLike[str]) -> Path:
        """Write the offline HTML report."""
        return _run_files().write_html(self, path)

    def _repr_html_(self) -> str:
        """The offline HTML report, framed: a notebook shows verdict, table and figures."""
        page = html_text(_run_files().html(self))
        return (
            f'<iframe srcdoc="{page}" style="width:100%;height:640px;border:1px solid #ddd" '
            'sandbox="allow-scripts"></iframe>'
        )


def _renamed(value: Any, pairs: list[tuple[str, str]]) -> Any:
    """`value` with `old` -> `new` in every string it holds (dataclasses, tuples, lists and
    mappings walked; arrays, enums and numbers as they are); the same object when unchanged."""
    if type(value) is str:
        for old, new in pairs:
            value = value.replace(old, new)
        return value
    if isinstance(value, np.ndarray | StrEnum):
        return value
    if is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in fields(value):
            if f.init:
                old_value = getattr(value, f.name)
                new_value = _renamed(old_value, pairs)
                if new_value is not old_value:
                    changed[f.name] = new_value
        return replace(value, **changed) if changed else value
    if isinstance(value, tuple | list):
        items = [_renamed(v, pairs) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if type(value) in (tuple, list) else value
    if isinstance(value, Mapping):
        entries = {_renamed(k, pairs): _renamed(v, pairs) for k, v in value.items()}
        same = list(entries) == list(value) and all(
            a is b for a, b in zip(entries.values(), value.values(), strict=True)
        )
        return value if same else entries
    return value


class RunFiles(Protocol):
    """What turns a run into its files: `parity.reports`, which stands on this module, so this
    module cannot import it. `parity.api` registers the one implementation when `parity` is
    imported (importing any of its modules does that first); ValidationRun's methods call it."""

    def report(self, run: ValidationRun) -> dict[str, Any]: ...

    def findings(self, run: ValidationRun) -> tuple[Finding, ...]: ...

    def cause_verdict(self, run: ValidationRun) -> Verdict: ...

    def save(
        self, run: ValidationRun, path: str | os.PathLike[str], *, keep_outputs: bool
    ) -> Path: ...

    def write_html(self, run: ValidationRun, path: str | os.PathLike[str]) -> Path: ...

    def html(self, run: ValidationRun) -> str: ...


_RUN_FILES: list[RunFiles] = []


def register_run_files(files: RunFiles) -> None:
    """Set the one RunFiles (parity.api does, once)."""
    _RUN_FILES[:] = [files]


def _run_files() -> RunFiles:
    if not _RUN_FILES:  # only if parity/__init__ was bypassed
        raise RuntimeError("parity.reports is not wired to ValidationRun: import parity first")
    return _RUN_FILES[0]
