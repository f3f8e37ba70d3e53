"""The one loop every run goes through: source -> ONNX Runtime per candidate -> compare.

A source (parity.sources) yields cases lazily: an input set, its reference outputs (computed
once), and what must not be judged. Each candidate (an ONNX file under one provider and
optimisation level, parity.run.candidates) runs on the case with parity.run.runner.run_onnx and is
compared with parity.judge.compare.compare_outputs; one `ValidationRun` is assembled at the end. The
dashboard and the CLI call `run_validation` with a `RunConfig`; so does `parity.validate()`, the
public function (which is why this module is not named `validate`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from parity.analyses.interface import AnalysisContext, CaseHook, Preparation
from parity.analyses.order import wanted_analyses
from parity.errors import InputError, OnnxLoadError, OnnxRunError, ParityError
from parity.judge.compare import compare_outputs
from parity.limits.budget import MemoryBudget
from parity.limits.deadline import Deadline
from parity.load.calibration import merged
from parity.load.index_limits import merged as merged_limits
from parity.messages import with_notes
from parity.results import (
    CandidateInfo,
    CandidateRun,
    InputCase,
    OutputComparison,
    OutputSet,
    RunKind,
    Status,
    SuggestedTolerances,
    ValidationRun,
)
from parity.run.candidates import (
    Candidate,
    CandidateSpec,
    SignatureFit,
    expand_specs,
    fit_signature,
    load_candidate,
    shared_loaders,
)
from parity.run.config import Loaders, RunConfig, check_config, default_loaders
from parity.run.config_json import config_json
from parity.run.early_check import check_names
from parity.run.ort_errors import is_set_failure, ort_error_line
from parity.run.progress import ProgressCallback, ProgressEvent, ProgressReporter, environment
from parity.signature import OnnxSignature
from parity.sources import Case, Source
from parity.tolerances import Tolerances

__all__ = [
    "Candidate",
    "check_suggestion",
    "Loaders",
    "ProgressCallback",
    "ProgressEvent",
    "RunConfig",
    "compare_case",
    "default_loaders",
    "open_source",
    "run_validation",
]


def open_source(
    config: RunConfig,
    loaders: Loaders,
    report: ProgressReporter,
    *,
    reference: Candidate | None = None,
    deadline: Deadline | None = None,
) -> Source:
    """The source for this kind of run (the config is checked first). An ONNX-against-ONNX
    run's source needs its loaded `reference` (the first file at the first provider/level)."""
    check_config(config)
    if config.kind is RunKind.HF_GENERATE:
        from parity.hf.seq2seq_source import Seq2SeqSource, is_seq2seq
        from parity.hf.source import HfSource

        if config.data is not None:  # a data set through the folder's own processor
            from parity.hf.data_source import HfDataSource

            return HfDataSource(config, report)
        return Seq2SeqSource(config, report) if is_seq2seq(config) else HfSource(config, report)
    if config.kind is RunKind.REFERENCE:
        from parity.sources.stored import StoredSource

        return StoredSource(config, report)
    if config.kind is RunKind.ONNX:
        from parity.sources.onnx_reference import OnnxReferenceSource

        assert reference is not None
        return OnnxReferenceSource(config, reference, report, deadline)
    if config.data is not None and config.data.engine == "ray":
        from parity.sources.data_ray import RayDataSource

        return RayDataSource(config, loaders, report)
    if config.data is not None:
        from parity.sources.data import DataSource

        return DataSource(config, loaders, report)
    from parity.sources.torch_inputs import TorchSource

    return TorchSource(config, loaders, report)


def run_validation(
    config: RunConfig,
    *,
    progress: ProgressCallback | None = None,
    loaders: Loaders | None = None,
) -> ValidationRun:
    """Run the reference once per case and every candidate on it; compare every output.

    Candidates are every ONNX file x provider x optimisation level of the config (an
    ONNX-against-ONNX run's first is its reference). Raises a `ParityError` subclass when
    the run cannot be made, including when no candidate could run; a candidate that alone
    cannot run is reported with verdict "error" beside the others. A model whose numbers
    disagree is not an error, it is a run whose verdict is "fail". Temp folders the run
    made (an hf: export without --export-path) are removed when it returns or raises.
    """
    check_config(config)  # before the Deadline: a timeout out of range is a usage error
    if config.layers:  # batch after batch of big arrays: what each frees must go back
        from parity.limits.heap import map_big_blocks

        map_big_blocks()
    deadline = Deadline(config.timeout)
    with deadline.active():  # ONNX Runtime's session setups are bounded by it too
        return _run_validation(config, progress, loaders, deadline)


def _check_hf(config: RunConfig) -> None:
    """An hf: run's options, before the run: its --task is one hf: validates (UsageError
    listing them); its export path (a flag, a typed path) is an output like the reports:
    writable, a regular file or nothing, never one of the run's inputs."""
    if config.hf is None:
        return
    if config.hf.task is not None:
        from parity.hf.heads import task_named

        task_named(config.hf.task)
    given = config.hf.export_path
    if not given:
        return
    from parity.files.outputs import Input, Output, check_run_files

    inputs = [Input("--model", config.model or "")]
    inputs += [Input("--inputs", f) for f in config.input_files]
    check_run_files([Output("ONNX export", given, "--export-path")], inputs)


def _run_validation(
    config: RunConfig,
    progress: ProgressCallback | None,
    loaders: Loaders | None,
    deadline: Deadline,
) -> ValidationRun:
    t_start = time.perf_counter()
    check_config(config)
    check_names(config)  # every name a setting gives, before torch and the model load
    _check_hf(config)
    loaders = shared_loaders(loaders or default_loaders())  # imports torch
    report = ProgressReporter(progress)
    reference = None
    specs = expand_specs(config.onnx_files, config.providers, config.ort_opt_levels)
    t0 = time.perf_counter()
    if config.kind is RunKind.ONNX:
        reference = load_candidate(specs.pop(0), loaders, report)  # its failure: the run's
    source = open_source(config, loaders, report, reference=reference, deadline=deadline)
    with ExitStack() as cleanup:

        def workdir() -> Path:
            path = Path(tempfile.mkdtemp(prefix="parity-"))
            cleanup.callback(shutil.rmtree, path, ignore_errors=True)
            return path

        if not specs:  # no --onnx: a demo's or the source's own export
            default = source.default_onnx(workdir)
            source.timings.setdefault("export", time.perf_counter() - t0)  # not load_onnx's
            t0 = time.perf_counter()
            specs = expand_specs([default], config.providers, config.ort_opt_levels)
        slots = [_load_slot(i, spec, loaders, report, source) for i, spec in enumerate(specs)]
        _raise_if_none_loaded(slots)
        _check_tolerance_names(config, slots, reference)
        source.timings["load_onnx"] = time.perf_counter() - t0
        deadline.check()
        analyses = wanted_analyses(config)
        loaded = {s.index: s.candidate for s in slots if s.candidate is not None}
        prepare = Preparation(config, source, loaded)
        hooks = [h for h in (analysis.before(prepare) for analysis in analyses) if h is not None]
        del prepare, loaded  # the slots alone hold the candidates: their sessions can be let go
        run = _run_cases(config, source, slots, report, t_start, deadline, hooks)
        held = [s.candidate for s in slots]  # what the analyses see, sessions let go with slots'
        context = AnalysisContext(
            config=config,
            source=source,
            reference=reference,
            candidates=held,
            lead=lambda: slots[0].candidate,
            lead_without_sessions=lambda: _sessions_released(slots, held),
            loaders=loaders,
            deadline=deadline,
            budget=MemoryBudget.of(config.max_memory),
            report=report,
            progress=progress,
            rerun=lambda fresh: run_validation(fresh, progress=progress, loaders=loaders),
        )
        for analysis in analyses:
            deadline.check()
            t0 = time.perf_counter()
            run = analysis.apply(run, context)
            if analysis.timed:
                run = replace(run, timings={**run.timings, analysis.name: time.perf_counter() - t0})
        deadline.check()
    return run


@dataclass
class _Slot:
    """One candidate while the loop runs (mutable, private): what it produced so far."""

    index: int
    spec: CandidateSpec
    candidate: Candidate | None = None
    error: ParityError | None = None
    fit: SignatureFit | None = None
    outputs: list[OutputSet] = field(default_factory=list)
    comparisons: list[OutputComparison] = field(default_factory=list)
    seconds: float = 0.0
    pairing: dict[str, None] = field(default_factory=dict)  # how outputs were paired, once

    def fail(self, error: ParityError) -> None:
        """The candidate cannot run: its partial results go, its error stays."""
        self.error = error
        self.comparisons.clear()

    def record(self) -> CandidateRun:
        """What it produced, as the run keeps it."""
        return CandidateRun(self.info(), tuple(self.comparisons), tuple(self.outputs))

    def info(self) -> CandidateInfo:
        model = self.candidate.model if self.candidate is not None else None
        notes = (
            *(self.candidate.notes if self.candidate is not None else ()),
            *(self.fit.notes if self.fit is not None else ()),
            *self.pairing,
        )
        return CandidateInfo(
            index=self.index,
            onnx=str(self.spec.onnx),
            provider=self.spec.provider,
            # the level it ran at: a lower one where ONNX Runtime crashed at the asked one
            ort_opt_level=self.candidate.opt_level if self.candidate else self.spec.opt_level,
            onnx_sha256=getattr(model, "sha256", None),
            error=None if self.error is None else self.error.message,
            error_kind=None if self.error is None else self.error.kind,
            notes=notes,
            seconds=self.seconds,
        )


_CANDIDATE_ERRORS = (OnnxLoadError, OnnxRunError, InputError)  # the candidate's own fault


def _load_slot(
    index: int, spec: CandidateSpec, loaders: Loaders, report: ProgressReporter, source: Source
) -> _Slot:
    slot = _Slot(index, spec)
    try:  # a source that splits an export into files (encoder-decoder) says which
        slot.candidate = load_candidate(spec, loaders, report, parts_of=source.onnx_parts)
    except _CANDIDATE_ERRORS as exc:
        slot.fail(exc)
    return slot


def _raise_if_none_loaded(slots: list[_Slot]) -> None:
    """Nothing to compare: the run cannot be made, and says why as a single run would."""
    if all(slot.error is not None for slot in slots):
        error = slots[0].error
        assert error is not None
        raise error


def _check_tolerance_names(
    config: RunConfig, slots: list[_Slot], reference: Candidate | None
) -> None:
    """A --tol NAME must be an output of the reference or of some candidate."""
    loaded = [s.candidate for s in slots if s.candidate is not None]
    names: dict[str, None] = {}
    for candidate in ([reference] if reference is not None else []) + loaded:
        for part in candidate.parts.values() or (candidate,):
            names.update(dict.fromkeys(part.signature.output_names))
    config.tolerances.check_outputs(tuple(names))


def _sessions_released(slots: list[_Slot], held: list[Candidate | None]) -> Candidate | None:
    """The first candidate without its ONNX Runtime session, every session let go (the
    slots' and those the analyses see, `held`, which keep their files and signatures):
    --layers opens its own session with extra outputs, and a model's weights held twice
    (a 2.5 GB LLM's) would be more than the layers memory bound allows."""
    for slot in slots:
        slot.candidate = None
    held[:] = [None if c is None else _without_session(c) for c in held]
    return held[0] if held else None


def _without_session(candidate: Candidate) -> Candidate:
    parts = {k: replace(p, session=None) for k, p in candidate.parts.items()}
    return replace(candidate, session=None, parts=parts)


def _source_cases(source: Source, signature: OnnxSignature, first: Candidate) -> Iterator[Case]:
    """The source's cases; a source that splits an export into files (an encoder-decoder
    folder) also gets each part's signature, and each case names the part it runs on."""
    if not first.parts:
        return source.cases(signature)
    signatures = {part: c.signature for part, c in first.parts.items()}
    return source.cases(signature, parts=signatures)


def _run_cases(
    config: RunConfig,
    source: Source,
    slots: list[_Slot],
    report: ProgressReporter,
    t_start: float,
    deadline: Deadline,
    hooks: Sequence[CaseHook] = (),
) -> ValidationRun:
    """The loop alone: each case of the source through every candidate, compared (each
    analysis hook sees the judged case), then the run assembled."""
    from parity.run.runner import run_onnx

    timings: dict[str, float] = {}
    first = next(s.candidate for s in slots if s.candidate is not None)
    signature = source.reference_signature or first.signature
    # generated inputs stay within every candidate's calibrated range (a quantized file)
    signature = replace(
        signature,
        calibrated=merged(s.candidate.signature.calibrated for s in slots if s.candidate),
        index_limits=merged_limits(
            s.candidate.signature.index_limits for s in slots if s.candidate
        ),
    )
    for slot in slots:
        if slot.candidate is not None:
            slot.fit = fit_signature(signature, slot.candidate.signature)
            if slot.fit.error is not None:
                slot.fail(InputError(slot.fit.error))
    cases: list[Case] = []
    t_onnx = t_compare = 0.0
    many = len(slots) > 1
    keep = source.keeps_arrays
    for case in _source_cases(source, signature, first):
        deadline.check()  # torch cannot be interrupted: checked between cases
        cases.append(case if keep else _let_go(case))
        name = case.input_set.label or f"input set {case.input_set.index}"
        fraction = _fraction(len(cases), source.n_cases)
        for slot in slots:
            if slot.error is not None or slot.candidate is None or slot.fit is None:
                slot.outputs.append(OutputSet(arrays={}))
                continue
            cand = slot.candidate
            where = f" ({cand.path}, {cand.provider}, {cand.opt_level})" if many else ""
            report("onnx", f"ONNX Runtime on {name}{where}", fraction)
            t0 = time.perf_counter()
            part = cand.for_case(case.part)
            fit = slot.fit if part is cand else SignatureFit()  # a part runs its own feeds
            try:
                raw = case.computed or run_onnx(
                    part.live_session(),
                    fit.feeds(case.input_set),
                    signature=part.signature,
                    deadline=deadline,
                )
            except OnnxRunError as exc:
                if not is_set_failure(str(exc.detail or exc.message)):
                    raise  # out of memory: the machine's limit, not the file's
                # the file ran and broke on this input set: that set's failure, not the run's
                slot.outputs.append(OutputSet(arrays={}))
                rows = error_rows(case, part.signature.output_names, exc, config.tolerances)
                slot.comparisons.extend(replace(c, candidate=slot.index) for c in rows)
                continue
            except _CANDIDATE_ERRORS as exc:
                if not many:
                    raise  # one candidate: the run could not be made, as it always was
                slot.fail(exc)
                slot.outputs.append(OutputSet(arrays={}))
                continue
            finally:
                elapsed = time.perf_counter() - t0 + (case.computed.seconds if case.computed else 0)
                slot.seconds += elapsed
                t_onnx += elapsed
            t0 = time.perf_counter()
            shown, judged = compare_case(case, fit.outputs(raw), config.tolerances)
            if case.reference.pairing:
                slot.pairing[case.reference.pairing] = None
            for hook in hooks:
                judged = hook(case, slot.index, shown, judged)
            t_compare += time.perf_counter() - t0
            slot.outputs.append(shown if keep else OutputSet(arrays={}))
            slot.comparisons.extend(replace(c, candidate=slot.index) for c in judged)
    deadline.check()
    _raise_if_none_loaded(slots)
    lead = next(s for s in slots if s.candidate is not None)
    if lead.error is None:  # causal LMs: ONNX Runtime generates alone
        assert lead.candidate is not None
        source.free_run(lead.candidate, config.tolerances, deadline)
    report("done", "done", 1.0)
    timings.update(source.timings)
    timings["onnxruntime"] = t_onnx
    timings["compare"] = t_compare
    assert lead.candidate is not None
    provenance = replace(
        source.provenance(),
        onnx_sha256=lead.candidate.model.sha256,
        opset=lead.candidate.signature.opset,
        producer=lead.candidate.signature.producer,
        ort_opt_level=lead.candidate.opt_level,
        config=config_json(config),
    )
    comparisons = [c for slot in slots for c in slot.comparisons]
    n_sets = len(cases)
    for slot in slots:  # a candidate that failed part-way shows no outputs at all
        if slot.error is not None:
            slot.outputs = [OutputSet(arrays={}) for _ in range(n_sets)]
    generation = source.generation(comparisons, {**timings, "total": time.perf_counter() - t_start})
    providers = ", ".join(dict.fromkeys(s.spec.provider for s in slots))
    return ValidationRun(
        model=source.model,
        onnx=lead.candidate.path if not many else str(slots[0].spec.onnx),
        signature=signature,
        tolerances=config.tolerances,
        environment=environment(providers, also=source.environment_modules),
        cases=tuple(InputCase(c.input_set, c.reference, dict(c.exclude)) for c in cases),
        candidates=tuple(slot.record() for slot in slots),
        timings=timings,
        provenance=provenance,
        generation=generation,
        judge=config.judge,
    )


def _let_go(case: Case) -> Case:
    """The case as a run that keeps no arrays holds it: its index and label only."""
    return replace(
        case,
        input_set=replace(case.input_set, feeds={}),
        reference=replace(case.reference, arrays={}),
        computed=None,
    )


def _fraction(done: int, total: int | None) -> float | None:
    if not total:
        return None
    return 0.1 + 0.85 * min(done / total, 1.0)


def compare_case(
    case: Case, onnx: OutputSet, tolerances: Tolerances
) -> tuple[OutputSet, list[OutputComparison]]:
    """Compare one candidate's outputs with the case's reference: ONNX order first, then
    reference-only outputs; outputs the case ignores are left out. Returns the candidate's
    outputs as compared (crops applied)."""
    ref = case.reference.arrays
    shown: dict[str, np.ndarray] = {}
    comparisons: list[OutputComparison] = []
    compared = [n for n in onnx.arrays if n not in case.ignore]
    for name in compared + [n for n in ref if n not in onnx.arrays]:
        array, note = _cropped(case, name, onnx.arrays.get(name))
        if array is not None:
            shown[name] = array
        comparison = compare_outputs(
            ref.get(name),
            array,
            name=name,
            input_set=case.input_set.index,
            tolerance=tolerances.for_output(name),
            exclude=case.exclude.get(name),
        )
        comparisons.append(_with_notes(comparison, note, case.exclude_reason))
    return replace(onnx, arrays=shown), comparisons


def error_rows(
    case: Case, onnx_names: tuple[str, ...], exc: OnnxRunError, tolerances: Tolerances
) -> list[OutputComparison]:
    """One `Status.ERROR` row per output of a set ONNX Runtime raised on: every ONNX output
    the case judges, then reference-only ones, each with ORT's first line (node and op)."""
    ref = case.reference.arrays
    names = [n for n in onnx_names if n not in case.ignore]
    names += [n for n in ref if n not in names and n not in case.ignore]
    message = f"ONNX Runtime raised: {ort_error_line(exc.detail or exc.message)}"
    rows = []
    for name in names:
        array = ref.get(name)
        rows.append(
            OutputComparison(
                input_set=case.input_set.index,
                name=name,
                status=Status.ERROR,
                tolerance=tolerances.for_output(name),
                ref_shape=None if array is None else tuple(int(d) for d in array.shape),
                onnx_shape=None,
                ref_dtype=None if array is None else str(array.dtype),
                onnx_dtype=None,
                n_elements=0 if array is None else int(array.size),
                message=message,
            )
        )
    return rows


def _cropped(case: Case, name: str, array: np.ndarray | None) -> tuple[np.ndarray | None, str]:
    crop = case.crop.get(name)
    if crop is None or array is None or array.ndim != len(crop.index):
        return array, ""
    cropped = array[crop.index]
    if cropped.shape == array.shape:
        return array, ""
    return cropped, f"ONNX {name} {list(array.shape)} compared at {crop.reason}"


def _with_notes(comparison: OutputComparison, note: str, reason: str) -> OutputComparison:
    excluded = ""
    if comparison.n_excluded:
        worst = comparison.excluded_max_abs
        where = "nan/inf" if worst is None else f"{worst:.3g}"
        excluded = f"{comparison.n_excluded} element(s) excluded ({reason or 'not judged'}), "
        excluded += f"max abs diff {where}"
    extra = tuple(text for text in (note, excluded) if text)
    if not extra:
        return comparison
    notes = (*comparison.notes, *extra)
    return replace(comparison, notes=notes, message=with_notes(comparison.message, extra))


def check_suggestion(
    run: ValidationRun,
    config: RunConfig | None,
    *,
    basis: str | None = None,
    margin: float | None = None,
    loaders: Loaders | None = None,
    progress: ProgressCallback | None = None,
) -> SuggestedTolerances:
    """The suggest analysis on a run already made (the Tolerances page's button, at the
    basis and margin the user picked): fitted on its sets, checked on fresh ones made by this
    pipeline. `config` None (a reopened run): nothing can be checked, every output says so."""
    from parity.analyses.fresh_check import suggest_checked
    from parity.judge.suggest import DEFAULT_MARGIN

    def rerun(fresh: RunConfig) -> ValidationRun:
        return run_validation(fresh, progress=progress, loaders=loaders)

    return suggest_checked(
        run, config, rerun=rerun, basis=basis, margin=DEFAULT_MARGIN if margin is None else margin
    )
