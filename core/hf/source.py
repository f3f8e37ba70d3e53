"""Source: the forward calls an hf: model makes in greedy generate(), with an export step.

Load `hf:DIR` -> capture generate() (prefill + each decode step; an encoder's single
forward) -> when no ONNX file is given, export it (parity.hf.export) into the run's temp
folder or --export-path -> one Case per captured call: the call's feeds for this ONNX file,
torch's outputs under the ONNX names, the logits positions torch kept (a crop of the ONNX
logits) and the padding positions the attention mask excludes (not judged: exports
legitimately differ where nothing attends).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from parity.errors import ExportError, InputError, OnnxRunError, UsageError
from parity.hf.capture import Capture, CapturedCall, capture_forward, capture_generate
from parity.hf.feeds import (
    LOGITS,
    masked_positions,
    onnx_feeds,
    paired_outputs,
    reference_outputs,
)
from parity.hf.loading import LoadedHfModel, load_hf_model
from parity.hf.media import generated_inputs, is_media_model
from parity.hf.padded_batch import BatchRun
from parity.hf.summary import build_summary
from parity.limits.deadline import Deadline
from parity.results import (
    GenerationInfo,
    GenerationStep,
    InputSet,
    OutputComparison,
    OutputSet,
    PaddedBatch,
    PromptGeneration,
    Provenance,
    RunKind,
)
from parity.results.padded import SIDES, judge_padded
from parity.run.candidates import Candidate
from parity.run.config import RunConfig
from parity.run.hf_options import HfOptions, hf_directory
from parity.run.progress import ProgressReporter
from parity.settings import Setting
from parity.signature import OnnxSignature
from parity.sources import Case, Crop, Source, TorchSide
from parity.tolerances import Tolerance, Tolerances

PADDING = "padding, never attended"
NOT_EXPORTED = {"status": "not run (--onnx given)", "seconds": None}

_Loaded = TypeVar("_Loaded")
_Capture = TypeVar("_Capture", bound="_Captured")


class _Captured(Protocol):  # Capture and Seq2SeqCapture (frozen: read-only members)
    @property
    def seconds(self) -> float: ...
    @property
    def calls(self) -> Sequence[Any]: ...


class HfSourceBase(Source):
    """What the hf: sources share (causal LMs and one-forward models here, encoder-decoder
    models in parity.hf.seq2seq_source): the run's settings, loading the model and
    capturing its calls once with their timings, the provenance, and how one captured call
    becomes a Case. Each subclass keeps what differs: what it loads, captures and exports."""

    environment_modules: tuple[str, ...] = ("transformers",)

    def __init__(self, config: RunConfig, report: ProgressReporter) -> None:
        assert config.model is not None
        self.model: str = config.model
        self.n_cases: int | None = None
        self.timings: dict[str, float] = {}
        self.options: HfOptions = config.hf or HfOptions()
        self._seed = config.seed
        self._max_memory = config.max_memory
        self._report = report

    def _load_timed(self, load: Callable[[], _Loaded]) -> _Loaded:
        """`load()` (the model from its directory), said and timed as load_model."""
        self._report("load", f"loading {self.model}", 0.02)
        t0 = time.perf_counter()
        loaded = load()
        self.timings["load_model"] = time.perf_counter() - t0
        return loaded

    def _load_model(self, signature: OnnxSignature | None) -> LoadedHfModel:
        """The run's one-forward or causal model, loaded and timed (a given ONNX file's
        outputs help choose its class where its config does not say: parity.hf.heads)."""
        return self._load_timed(
            lambda: load_hf_model(
                hf_directory(self.model),
                random_weights=self.options.random_weights,
                config_overrides=self.options.config_overrides,
                seed=self._seed,
                task=self.options.task,
                onnx_outputs=output_ranks(signature),
                max_memory=self._max_memory,
            )
        )

    def _counted(self, capture: _Capture) -> _Capture:
        """A capture made: its time, and the number of cases it gives."""
        self.timings["capture"] = capture.seconds
        self.n_cases = len(capture.calls)
        return capture

    def provenance(self) -> Provenance:
        return Provenance(kind=RunKind.HF_GENERATE, seed=self._seed)


def call_case(
    input_set: InputSet,
    reference: Mapping[str, np.ndarray],
    seconds: float,
    padding: Callable[[str, tuple[int, ...]], np.ndarray | None],
    *,
    part: str = "",
    ignore: Mapping[str, str] | None = None,
) -> Case:
    """One captured call as a case: torch's outputs, the positions `padding(name, shape)`
    says no query attends left out, the logits cropped to the positions torch kept."""
    exclude: dict[str, np.ndarray] = {}
    for name, array in reference.items():
        where = padding(name, tuple(array.shape))
        if where is not None and where.any():
            exclude[name] = where
    crop = logits_crop(reference.get(LOGITS))
    return Case(
        input_set=input_set,
        reference=OutputSet(arrays=dict(reference), seconds=seconds),
        exclude=exclude,
        exclude_reason=PADDING,
        crop={LOGITS: crop} if crop is not None else {},
        part=part,
        ignore=dict(ignore or {}),
    )


class HfSource(HfSourceBase):
    """Each case: one captured forward call of generate() (or an encoder's forward)."""

    def __init__(self, config: RunConfig, report: ProgressReporter) -> None:
        super().__init__(config, report)
        self._input_files = config.input_files  # one forward each (one-forward models only)
        self._given = config.feeds  # input sets given as arrays (the Python API)
        self._loaded: LoadedHfModel | None = None
        self._capture: Capture | None = None
        self._export: dict[str, Any] = dict(NOT_EXPORTED)
        self._noise_floor = config.noise_floor  # every call in float64 (measure_noise)
        self._noise_at: tuple[str, ...] = ()  # 16-bit precisions torch is also run at
        self._prompts: tuple[PromptGeneration, ...] = ()  # free-running generation
        self._free_note = ""
        # one capture per prompt, where the file cannot take a left-padded batch (None: one)
        self._per_prompt: tuple[Capture, ...] | None = None
        self._batch: BatchRun | str | None = None  # those prompts as one batch, or why not
        self._batch_tolerance = Tolerance()  # the logits tolerance it is judged at
        self._batch_rule = ""  # how the file places a row's tokens (parity.results.padded)

    def _captured(self, signature: OnnxSignature | None = None) -> tuple[LoadedHfModel, Capture]:
        """Load the model and capture its calls, once. A given ONNX file's outputs help
        choose the model's class when its config does not say (parity.hf.heads)."""
        if self._loaded is None or self._capture is None:
            self._loaded = self._load_model(signature)
            if positions_from_mask(signature) and not self._loaded.encoder:
                self._per_prompt = self._each_prompt(self._loaded)
                capture = merged_capture(self._per_prompt)
            else:
                capture = _capture(
                    self._loaded,
                    self.options,
                    self._report,
                    forward_inputs=lambda loaded: _forward_inputs(
                        loaded,
                        self._input_files,
                        self._given,
                        seed=self._seed,
                        max_memory=self._max_memory,
                    ),
                )
            self._capture = self._counted(capture)
        return self._loaded, self._capture

    def _each_prompt(self, loaded: LoadedHfModel) -> tuple[Capture, ...]:
        """generate() on each prompt alone (a batch of one: nothing padded)."""
        n = self.options.max_new_tokens
        self._report("capture", f"generate(): {n} new token(s), one prompt at a time", 0.15)
        return tuple(
            capture_generate(loaded, prompts=(prompt,), max_new_tokens=n)
            for prompt in self.options.prompts
        )

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        """Parity's own export: to --export-path, else into the run's temp folder."""
        from parity.hf.export import export_decoder, export_encoder

        loaded, capture = self._captured()
        given = self.options.export_path
        path = Path(given) if given else workdir() / "model.onnx"
        self._report("export", f"exporting with torch.onnx.export(dynamo=True) to {path}", 0.25)
        exporter = export_encoder if loaded.encoder else export_decoder
        try:
            result = exporter(loaded.model, capture.calls, path)
        except ExportError as exc:
            self.timings["export"] = exc.seconds or 0.0
            self._export = {"status": "FAILED", "seconds": exc.seconds, "cause": exc.cause}
            summary = build_summary(*self._summary_input(), (), self.timings)
            raise exc.with_summary(summary) from exc.__cause__
        self.timings["export"] = result.seconds
        self._export = {
            "status": "OK",
            "seconds": result.seconds,
            "path": str(result.path),
            "dynamic": {
                "batch": result.dynamic.batch,
                "sequence_length": result.dynamic.sequence,
                "past_sequence_length": result.dynamic.past,
            },
        }
        return str(result.path)

    def measure_noise(self) -> None:
        self._noise_floor = True

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        loaded, capture = self._captured(signature)
        doubles: Sequence[CapturedCall | None] = [None] * len(capture.calls)
        note = ""
        if self._noise_floor:  # every call again in float64 (parity.hf.noise_floor_calls)
            from parity.hf.noise_floor_calls import float64_calls

            self._report("torch", "torch in float64 on every captured call", None)
            t0 = time.perf_counter()
            made, note = float64_calls(loaded.model, capture.calls, max_memory=self._max_memory)
            self.timings["float64"] = time.perf_counter() - t0
            doubles = made or doubles
        for call, double in zip(capture.calls, doubles, strict=True):
            case = _case(call, signature)
            if double is not None:
                case = dataclasses.replace(
                    case, float64=reference_outputs(double, signature.outputs)
                )
            if self._noise_floor and self._noise_at:
                case = self._with_low(case, loaded, call, signature)
            yield dataclasses.replace(case, float64_note=note) if note else case

    def measure_noise_at(self, precisions: Collection[str]) -> None:
        """--noise-floor with a 16-bit candidate: each call also made at that precision."""
        self._noise_at = tuple(sorted(set(precisions)))

    def _with_low(
        self, case: Case, loaded: LoadedHfModel, call: CapturedCall, signature: OnnxSignature
    ) -> Case:
        """The case with the call made again at each 16-bit precision, emulated as
        parity.run.noise_floor_runs does on the CPU (parity.hf.noise_floor_calls.call_at)."""
        from parity.hf.noise_floor_calls import call_at
        from parity.results import PrecisionRun

        runs = {}
        for precision in self._noise_at:
            self._report("torch", f"torch in {precision} on every captured call", None)
            t0 = time.perf_counter()
            made, how, why = call_at(loaded.model, call, precision)
            self.timings["float64"] = self.timings.get("float64", 0.0) + time.perf_counter() - t0
            arrays = None if made is None else reference_outputs(made, signature.outputs)
            runs[precision] = PrecisionRun(arrays, how, why)
        return dataclasses.replace(case, at_precision=runs)

    def reference_again(self, input_set: InputSet, signature: OnnxSignature) -> dict[str, Any]:
        """The captured call of this case made again by the model as it is now, its outputs
        under the ONNX names (parity.hf.noise_floor_calls.call_again, in float32)."""
        from parity.hf.noise_floor_calls import call_again

        loaded, capture = self._captured()
        call = next(c for c in capture.calls if c.index == input_set.index)
        again = call_again(loaded.model, call, float64=False)
        return reference_outputs(again, tuple(signature.output_names))

    def tokens_again(self) -> np.ndarray | None:
        """generate() again on the run's prompts (a causal LM): its greedy new tokens."""
        loaded, capture = self._captured()
        if loaded.encoder or capture.new_tokens is None:
            return None
        n = self.options.max_new_tokens
        prompts = (
            [(p,) for p in self.options.prompts] if self._per_prompt else [self.options.prompts]
        )
        made = [capture_generate(loaded, prompts=p, max_new_tokens=n).new_tokens for p in prompts]
        if any(t is None for t in made):
            return None
        return np.concatenate([np.asarray(t) for t in made], axis=0)

    def free_run(
        self, candidate: Candidate, tolerances: Tolerances, deadline: Deadline | None = None
    ) -> None:
        """After the cases: a file run one prompt at a time is run on them as one left-padded
        batch too (parity.hf.padded_batch); ONNX Runtime generates on its own
        (parity.hf.generation)."""
        if self._per_prompt is not None and len(self._per_prompt) > 1:
            self._padded(candidate, tolerances, deadline)
        if not self.options.generation:
            self._free_note = "free-running generation not run (--no-generation)"
            return
        from parity.hf.generation import generate_beside

        loaded, capture = self._captured()
        if loaded.encoder:
            return
        self._report("generation", "ONNX Runtime generates on its own", None)
        t0 = time.perf_counter()
        prompts: list[PromptGeneration] = []
        for part in self._per_prompt or (capture,):
            made, note = generate_beside(loaded, part, candidate, tolerances, deadline=deadline)
            prompts += made
            self._free_note = self._free_note or note
        self._prompts = tuple(prompts)
        self.timings["generation"] = time.perf_counter() - t0

    def _padded(
        self, candidate: Candidate, tolerances: Tolerances, deadline: Deadline | None
    ) -> None:
        """The prompts as one padded batch, as the file's runtime pads one (generate(): on the
        left; ONNX Runtime GenAI: on the right), the file on its own cache."""
        from parity.hf.generation import why_not
        from parity.hf.padded_batch import file_rule, run_batch

        loaded, _ = self._captured()
        assert self._per_prompt is not None
        if why_not(self._per_prompt[0], candidate.signature):  # no logits, no step per token
            return
        self._batch_rule = file_rule(candidate.model.op_types)
        batch = f"the prompts as one {SIDES[self._batch_rule]}-padded batch"
        self._report("generation", batch, None)
        t0 = time.perf_counter()
        self._batch_tolerance = tolerances.for_output(LOGITS)
        try:
            self._batch = run_batch(loaded, self._per_prompt, candidate, deadline=deadline)
        except (InputError, OnnxRunError) as exc:  # said, never a crash: the steps stand
            self._batch = f"{batch[0].upper()}{batch[1:]} were not run: {exc.message}"
        self.timings["padded_batch"] = time.perf_counter() - t0

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> GenerationInfo:
        _, capture = self._captured()
        padded = None
        if isinstance(self._batch, str):
            padded = PaddedBatch(prompts=(), steps=0, text=self._batch, rule=self._batch_rule)
        elif self._batch is not None and self._per_prompt is not None:
            steps = len(self._per_prompt[0].calls)  # each prompt's: run_batch zips them
            b, tolerance = self._batch, self._batch_tolerance
            padded = judge_padded(b.prompts, steps, b.rule, tolerance, comparisons)
        return GenerationInfo(
            summary=build_summary(*self._summary_input(), comparisons, timings),
            steps=tuple(generation_step(call) for call in capture.calls),
            prompts=self._prompts,
            free_run_note=self._free_note,
            padded_batch=padded,
        )

    def torch_side(self) -> TorchSide:
        """The model, replayed on each captured call (parity.hf.layers_side)."""
        from parity.hf.layers_side import hf_torch_side

        loaded, capture = self._captured()
        return hf_torch_side(loaded, capture.calls)

    def _summary_input(self) -> tuple[str, LoadedHfModel, HfOptions, Capture, dict[str, Any]]:
        loaded, capture = self._captured()
        return self.model, loaded, self.options, capture, self._export


def output_ranks(signature: OnnxSignature | None) -> dict[str, int] | None:
    """ONNX output name -> rank (None without an ONNX file)."""
    if signature is None:
        return None
    return {spec.name: spec.rank for spec in signature.outputs}


def positions_from_mask(signature: OnnxSignature | None) -> bool:
    """A decoder file with a KV cache and no `position_ids` input (Optimum's Gemma, ONNX
    Runtime GenAI's GroupQueryAttention): it places a left-padded row's tokens by its own
    rule, so torch's cache of that batch does not fit its steps; each prompt runs alone, and
    the batch is asked apart (parity.hf.padded_batch)."""
    if signature is None:
        return False
    names = signature.input_names
    return "position_ids" not in names and any(n.startswith("past_key_values") for n in names)


def merged_capture(parts: Sequence[Capture]) -> Capture:
    """One prompt's captures after another: their calls numbered on (each prompt's steps in
    turn), their new tokens stacked (every prompt makes the same number)."""
    calls, index = [], 0
    for part in parts:
        for call in part.calls:
            calls.append(dataclasses.replace(call, index=index))
            index += 1
    tokens = [p.new_tokens for p in parts]
    return Capture(
        calls=tuple(calls),
        prompts=tuple(p for part in parts for p in part.prompts),
        generated=tuple(g for part in parts for g in part.generated),
        seconds=sum(p.seconds for p in parts),
        new_tokens=None
        if any(t is None for t in tokens)
        else np.concatenate([np.asarray(t) for t in tokens], axis=0),
    )


def _capture(
    loaded: LoadedHfModel,
    options: HfOptions,
    report: ProgressReporter,
    *,
    forward_inputs: Callable[[LoadedHfModel], tuple[list[dict[str, np.ndarray]], str]],
) -> Capture:
    inputs, described = forward_inputs(loaded)
    if loaded.encoder:
        report("capture", f"forward() on {described or 'the prompts'}", 0.15)
        return capture_forward(loaded, prompts=options.prompts, inputs=inputs, described=described)
    report("capture", f"generate(): {options.max_new_tokens} new token(s)", 0.15)
    return capture_generate(loaded, prompts=options.prompts, max_new_tokens=options.max_new_tokens)


def _forward_inputs(
    loaded: LoadedHfModel,
    files: Sequence[str],
    given: Sequence[Mapping[str, Any]],
    *,
    seed: int,
    max_memory: int | None,
) -> tuple[list[dict[str, np.ndarray]], str]:
    """A one-forward model's input sets: --inputs files and given arrays (one forward
    each), else seeded pixels / audio features for an image or audio model; ([], "") means
    the prompts."""
    if files or given:
        if not loaded.encoder:
            raise UsageError(
                "does not apply to a model that generates: its inputs are the forward calls "
                "generate() makes",
                setting=Setting("input_files"),
            )
        from parity.limits.budget import MemoryBudget
        from parity.run.inputs import iter_feed_files

        sets = list(iter_feed_files(files, budget=MemoryBudget.of(max_memory)))
        sets += [{str(k): np.asarray(v) for k, v in feeds.items()} for feeds in given]
        names = [Path(f).name for f in files] + [f"inputs[{i}]" for i in range(len(given))]
        return sets, "given: " + ", ".join(names)
    if is_media_model(loaded.model):
        made = generated_inputs(loaded.model, loaded.processor, seed=seed)
        return [dict(made.feeds)], made.described
    return [], ""


def _case(call: CapturedCall, signature: OnnxSignature) -> Case:
    """One call: its feeds, torch's outputs, the logits crop and the padding excluded."""
    reference, pairing = paired_outputs(call, signature.outputs)
    case = call_case(
        InputSet(index=call.index, feeds=onnx_feeds(call, signature), label=call.label),
        reference,
        call.seconds,
        lambda name, shape: masked_positions(call, name, shape),
    )
    if not pairing:
        return case
    return dataclasses.replace(case, reference=dataclasses.replace(case.reference, pairing=pairing))


def logits_crop(logits: np.ndarray | None) -> Crop | None:
    """torch's generate() computes the logits of the last position(s) only
    (`logits_to_keep`); ONNX files give every position: compare the ones torch kept."""
    if logits is None or logits.ndim != 3 or logits.shape[1] == 0:
        return None
    kept = int(logits.shape[1])
    return Crop(
        index=(slice(None), slice(-kept, None), slice(None)),
        reason=f"the last {kept} position(s), the ones torch's generate() computed",
    )


def generation_step(call: CapturedCall) -> GenerationStep:
    return GenerationStep(
        index=call.index,
        step=call.step,
        phase=call.phase,
        label=call.label,
        batch=call.batch,
        sequence_length=call.sequence_length,
        past_length=call.past_length,
    )
