"""Typed results that pass between the core's steps, the CLI, the dashboard and reports.

Data flows one way: InputSet -> (torch, ONNX Runtime) OutputSet -> OutputComparison ->
ValidationRun. Re-judging at other tolerances never touches raw tensors: every
OutputComparison carries an ErrorProfile (parity.judge.error_profile) that answers for any (atol,
rtol).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from enum import StrEnum
from functools import cached_property
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from parity.data.result import DataResult
from parity.judge.error_profile import ErrorProfile
from parity.messages import failure_message, with_notes
from parity.signature import OnnxSignature
from parity.text import html_text
from parity.tolerances import Tolerance, Tolerances, TolerancesLike, tolerances_of
from parity.verdict import Judge, Verdict, judge_of

if TYPE_CHECKING:  # annotation only: parity.layers stands on this module
    from parity.layers.result import LayersResult


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    MISSING = "missing"
    ERROR = "error"  # ONNX Runtime raised on this input set: `message` holds its first line

    @property
    def passed(self) -> bool:
        return self is Status.PASS


@dataclass(frozen=True)
class InputSet:
    """One set of feeds, keyed by ONNX input name. `label` says where it came from."""

    index: int
    feeds: Mapping[str, np.ndarray]
    label: str = ""

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(int(d) for d in a.shape) for name, a in self.feeds.items()}

    def describe(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"shape": [int(d) for d in a.shape], "dtype": str(a.dtype)}
            for name, a in self.feeds.items()
        }


@dataclass(frozen=True)
class OutputSet:
    """Outputs of one side (torch or ONNX) for one input set, in the ONNX output order."""

    arrays: Mapping[str, np.ndarray]
    seconds: float = 0.0
    notes: tuple[str, ...] = ()  # e.g. "output 'y': bfloat16 compared as float32"
    # the reference side: ONNX outputs paired with torch outputs of another name, in one
    # line (parity.run.runner.pair_outputs); the run's candidates say it
    pairing: str = ""


@dataclass(frozen=True)
class InputCase:
    """One input set of a run with what belongs to it: the reference outputs it gave (None:
    the run kept no outputs) and its outputs' exclusion masks (True: the element is not
    judged, e.g. padding an attention mask excludes), broadcastable to each output."""

    input_set: InputSet
    reference: OutputSet | None = None
    exclusions: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.input_set.index


@dataclass(frozen=True)
class ErrorStats:
    """Element-wise statistics of one output (float64 arithmetic, NaN/Inf handled apart).

    Values are None where undefined (e.g. max_rel when every ref element is 0, cosine of
    a zero vector, statistics of an empty tensor).
    """

    max_abs: float | None
    worst_index: tuple[int, ...] | None
    ref_at_worst: float | None
    onnx_at_worst: float | None
    max_rel: float | None
    mean_abs: float | None
    rms: float | None
    p99_abs: float | None
    n_nan_mismatch: int
    n_inf_mismatch: int
    cosine: float | None
    snr_db: float | None


NOISE_PRECISIONS = ("float32", "float16", "bfloat16", "int8")  # `outputs[].noise.precision`


@dataclass(frozen=True)
class PrecisionRun:
    """The reference run once more at a 16-bit precision (``--noise-floor`` on a float16 /
    bfloat16 candidate): its outputs by ONNX name (None: not run, `note` says why), and how
    it was emulated where torch could not run at that precision ("" where it did)."""

    arrays: Mapping[str, np.ndarray] | None
    emulated: str = ""
    note: str = ""


@dataclass(frozen=True)
class Noise:
    """An output's rounding noise at the candidate's precision, measured against the reference
    run in float64 (parity.judge.noise_floor): `onnx_error` = max |onnx - torch64|; `torch_error` =
    the floor: max |torch - torch64| with torch run at `precision` (float32, float16,
    bfloat16; `emulated` says how where torch could not run at it), or for int8 the
    quantization noise sqrt(n) x scale/2 + clipped (`scale` the compared value's quantization
    scale, `tensors` = n the activations quantized upstream, `clipped` the most float64 lies
    outside the range its DequantizeLinear can give); `ratio` = onnx_error / torch_error
    (None where torch_error is 0)."""

    torch_error: float
    onnx_error: float
    ratio: float | None
    precision: str = "float32"
    scale: float | None = None
    tensors: int = 0
    clipped: float = 0.0  # int8: how far float64 lies outside the output's range, at most
    emulated: str = ""


@dataclass(frozen=True)
class OutputComparison:
    """The verdict and statistics for one (input set, output)."""

    input_set: int
    name: str
    status: Status
    tolerance: Tolerance
    ref_shape: tuple[int, ...] | None
    onnx_shape: tuple[int, ...] | None
    ref_dtype: str | None
    onnx_dtype: str | None
    n_elements: int
    stats: ErrorStats | None = None
    profile: ErrorProfile | None = None
    n_mismatch: int | None = None
    message: str = ""
    n_excluded: int = 0  # elements not judged (an exclusion mask), counted apart
    excluded_max_abs: float | None = None  # largest finite |onnx - ref| among them
    candidate: int = 0  # which candidate (ValidationRun.candidates) this row judges
    notes: tuple[str, ...] = ()  # in `message` after the verdict; kept when re-judged
    noise: Noise | None = None  # --noise-floor: against a float64 reference run

    @property
    def n_judged(self) -> int:
        """Elements the verdict covers: all but the excluded ones."""
        return self.n_elements - self.n_excluded

    @property
    def mismatch_fraction(self) -> float | None:
        if self.n_mismatch is None:
            return None
        return self.n_mismatch / self.n_judged if self.n_judged else 0.0

    @property
    def min_atol_to_pass(self) -> float | None:
        """Smallest atol that passes at this comparison's rtol (None: no atol can)."""
        if self.profile is None:
            return None
        return self.profile.min_atol(self.tolerance.rtol)

    @property
    def narrowed(self) -> bool:
        """Only the float width differs: ONNX gives a 16-bit float where the reference is
        float32 (a file converted to float16 with float16 outputs, keep_io_types=False).
        That is the file's own precision: its values are judged as a FAIL row's are."""
        return (
            self.status is Status.DTYPE_MISMATCH
            and self.profile is not None
            and self.ref_dtype in ("float32", "float64")
            and self.onnx_dtype in ("float16", "bfloat16")
        )

    @property
    def can_rejudge(self) -> bool:
        """A tolerance can change its verdict: judged element by element, with a profile
        (shape, dtype and missing failures, and string outputs, stay what they are)."""
        return self.profile is not None and self.status in (Status.PASS, Status.FAIL)

    @property
    def passes_only_loosened(self) -> bool:
        """It passes at its tolerance and fails at the default one (a tolerance loosened for
        it lets it through: what a bug that tolerance hides looks like)."""
        default = Tolerance()
        if self.status is not Status.PASS or not self.can_rejudge or self.tolerance == default:
            return False
        return not self.rejudge(default).status.passed

    def rejudge(self, tolerance: Tolerance) -> OutputComparison:
        """The same comparison judged at another tolerance, from the profile alone."""
        if not self.can_rejudge or self.profile is None:  # can_rejudge: a profile is kept
            return replace(self, tolerance=tolerance)
        passed = self.profile.passes(tolerance)
        n_mismatch = self.profile.n_mismatch(tolerance)
        return replace(
            self,
            tolerance=tolerance,
            n_mismatch=n_mismatch,
            status=Status.PASS if passed else Status.FAIL,
            message=with_notes(
                "" if passed else failure_message(n_mismatch, self.n_judged, self.stats),
                self.notes,
            ),
        )


def set_passed(comparisons: Sequence[OutputComparison], input_set: int) -> bool:
    """Every output of one input set (an hf: step) was judged and passes."""
    mine = [c for c in comparisons if c.input_set == input_set]
    return bool(mine) and all(c.status.passed for c in mine)


class RunKind(StrEnum):
    """Where a run's reference outputs came from (its source)."""

    TORCH = "torch"  # a torch model on generated or given inputs
    REFERENCE = "reference"  # stored reference outputs (REF.npz) on given inputs
    HF_GENERATE = "hf_generate"  # the forward calls of an hf: model's generate()
    ONNX = "onnx"  # a reference ONNX file run by ONNX Runtime (ONNX against ONNX)


@dataclass(frozen=True)
class Provenance:
    """What a run was made from, beyond the model spec and ONNX path: the files and
    settings that decide its numbers, with content hashes computed while loading."""

    kind: RunKind = RunKind.TORCH
    onnx_sha256: str | None = None
    model_sha256: str | None = None
    opset: int | None = None
    producer: str | None = None
    ort_opt_level: str | None = None
    seed: int | None = None
    weights_file: str | None = None
    reference_file: str | None = None  # REF.npz, or the reference ONNX file (kind onnx)
    reference_provider: str | None = None  # kind onnx: how the reference file was run
    reference_opt_level: str | None = None
    inputs_by: str | None = None  # torch got the feeds by "name" or by "position"
    inputs_note: str | None = None  # why by position (parity.run.input_binding)
    # the settings the run was made with, as JSON (parity.run.config_json): to make it again
    config: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class CandidateInfo:
    """One way the ONNX side was run: a file under one provider at one optimisation level.

    `error` is set when the candidate could not be run at all (unreadable file, a session
    that would not start, inputs that do not fit its signature, ONNX Runtime raising): it
    then has no comparisons, and the run's verdict is ERROR. `notes` say what was adapted
    (feeds cast to its input dtypes, outputs compared in the reference's dtype).
    """

    index: int
    onnx: str
    provider: str
    ort_opt_level: str
    onnx_sha256: str | None = None
    error: str | None = None
    error_kind: str | None = None  # parity.errors kind ("onnx_load", "onnx_run", "inputs", ...)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0  # ONNX Runtime time over every input set

    @property
    def label(self) -> str:
        """``#1 model.onnx (CPU, all)``: how tables, menus and grids name a candidate."""
        provider = self.provider.removesuffix("ExecutionProvider")
        name = PurePath(self.onnx).name or self.onnx
        return f"#{self.index} {name} ({provider}, {self.ort_opt_level})"


@dataclass(frozen=True)
class QuantizedWeight:
    """One weight-only quantized node of a file (parity.analyses.quantization): its weight
    against the torch parameter it was made from. `max_steps` is the largest |model weight
    - file weight| in steps of its block (a rounding stays within about one); `bad_blocks`
    the blocks beyond one step, `defect` what is wrong there ("" when nothing is)."""

    node: str
    op: str
    bits: int
    block_size: int
    shape: tuple[int, int]  # (K, N): the MatMul's B
    parameter: str | None  # the torch parameter(s) it stands for; None: not matched
    max_steps: float | None = None
    bad_blocks: int = 0
    n_blocks: int = 0
    defect: str = ""

    @property
    def status(self) -> str:
        """ "rounding" (within a step of the model's weight), "bug", or "unmatched"."""
        if self.parameter is None:
            return "unmatched"
        return "bug" if self.bad_blocks else "rounding"


@dataclass(frozen=True)
class QuantizedOutput:
    """One output split in two: the file against torch with the file's own dequantized
    weights (the export and its kernels) and that against torch (what quantizing costs)."""

    name: str
    export_max_abs: float | None  # file vs torch-with-its-weights, over every input set
    export_passed: bool | None  # ... at the run's tolerance (None: not compared)
    sqnr_db: float | None  # torch-with-its-weights against torch (None: exact or not run)
    quant_max_abs: float | None = None
    # where the file fails against it and rounds its activations: how far the reference
    # moves when each rounding is nudged by a thousandth of a step (a value that lies on a
    # rounding boundary can round either way in the file's kernels); None: not measured
    flip_max_abs: float | None = None


@dataclass(frozen=True)
class QuantizedTokens:
    """A causal LM's tokens with the file's weights: over every step's judged positions,
    torch's top-1 against torch-with-its-weights' and the mean KL divergence of their
    next-token distributions; greedy generate() with the file's weights against torch's new
    tokens, and ONNX Runtime's own new tokens against it."""

    top1_agreement: float | None
    kl_mean: float | None
    greedy_agree: int = 0
    greedy_total: int = 0
    first_change: int | None = None  # the first new token (0-based) where greedy differs
    onnx_agree: int | None = None  # ONNX Runtime's free-running tokens vs the file's weights'


@dataclass(frozen=True)
class QuantizationResult:
    """What a file's quantized weights are and cost (parity.analyses.quantization)."""

    weights: tuple[QuantizedWeight, ...]
    outputs: tuple[QuantizedOutput, ...] = ()
    tokens: QuantizedTokens | None = None
    notes: tuple[str, ...] = ()
    # how the file rounds its activations at run time too ("" none; "uint8 per tensor":
    # dynamic quantization; "int8 per block": MatMulNBits at accuracy_level 4 on the CPU)
    activations: str = ""
    activations_simulated: bool = True  # the reference rounds them too (torch does)
    reference: str = "torch"  # what the weights were put into: "torch", "the reference file"
    # static quantization: the file's own graph with its activation rounding taken out is
    # what was compared with the reference (parity.analyses.static_quant)
    float_twin: bool = False
    # where the float twin starts to differ from torch with the file's weights (--layers on
    # it: "the Add node /Add (confirmed alone)"); "" when not looked for or not found
    located: str = ""
    # quantized ops of the file the reference does not compute as the file does (QAttention,
    # QEmbedLayerNormalization): a difference left is then not judged
    unsimulated: tuple[str, ...] = ()

    @property
    def width(self) -> str:
        """The bit widths in words: "int4", "int4 and int8"."""
        bits = sorted({w.bits for w in self.weights})
        return " and ".join(f"int{b}" for b in bits) or "quantized"

    @property
    def bugs(self) -> tuple[QuantizedWeight, ...]:
        return tuple(w for w in self.weights if w.status == "bug")

    @property
    def faithful(self) -> bool | None:
        """The file computes what its quantized weights say (every output within the run's
        tolerance of torch with them); None when not compared."""
        judged = [o.export_passed for o in self.outputs if o.export_passed is not None]
        return all(judged) if judged else None


@dataclass(frozen=True)
class ApproximatedOutput:
    """One output under the file's intended approximations (parity.analyses.approximation):
    what they cost against torch, and the file against torch computing them too."""

    name: str
    cost_max_abs: float | None  # torch with the approximations against torch, over every set
    export_max_abs: float | None  # the file (16-bit: its float32 twin) against that torch
    export_passed: bool | None  # ... at the run's tolerance (None: not compared)
    weights_max_abs: float | None = None  # 16-bit: its rounded weights' own cost
    arithmetic_max_abs: float | None = None  # 16-bit: the file against its float32 twin
    # what export_passed was judged by: "the run's tolerance", or where that fails and the
    # output's float32 floor was measured, "float32 rounding" (10x torch's own float32 error)
    export_within: str = "the run's tolerance"


@dataclass(frozen=True)
class ApproximationResult:
    """What a file approximates on purpose and what that costs (parity.analyses.approximation):
    `approximations` in words ("FastGelu, the tanh approximation of GELU (2 nodes)"),
    `precision` the file's 16-bit type where its weights are 16-bit ("" where not), `modules`
    the torch modules computed approximately (() where every call of the function was)."""

    approximations: tuple[str, ...] = ()
    precision: str = ""
    modules: tuple[str, ...] = ()
    outputs: tuple[ApproximatedOutput, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def faithful(self) -> bool | None:
        """The file computes what it means (every output within the run's tolerance of
        torch doing the same); None when not compared."""
        judged = [o.export_passed for o in self.outputs if o.export_passed is not None]
        return all(judged) if judged else None


@dataclass(frozen=True)
class CandidateRun:
    """One candidate's share of a run (`ValidationRun.candidates`): its info, its judged rows,
    its ONNX outputs and its layers. The run stores one per candidate, so no reader works
    out where a candidate's rows and output sets lie."""

    info: CandidateInfo
    outputs: tuple[OutputComparison, ...] = ()  # its (input set, output) rows
    # one OutputSet per input set, in `input_sets` order (empty ones for a candidate that could
    # not run); () when the run kept no outputs
    onnx_outputs: tuple[OutputSet, ...] = ()
    layers: LayersResult | None = None  # --layers: its intermediate values against the reference
    # its weight-only quantized ops judged for what they are (parity.analyses.quantization)
    quantization: QuantizationResult | None = None
    # its intended approximations (a tanh GELU, 16-bit weights) judged for what they are
    approximation: ApproximationResult | None = None

    @property
    def index(self) -> int:
        return self.info.index

    @property
    def label(self) -> str:
        return self.info.label

    @property
    def verdict(self) -> Verdict:
        """ERROR when it could not be run; PASS when it has rows and every one passes."""
        if self.info.error is not None:
            return Verdict.ERROR
        ok = bool(self.outputs) and all(c.status.passed for c in self.outputs)
        return Verdict.PASS if ok else Verdict.FAIL

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def failing(self) -> tuple[str, ...]:
        """Names of its outputs that fail in at least one input set (as `ValidationRun.failing`)."""
        return tuple(dict.fromkeys(c.name for c in self.outputs if not c.status.passed))

    def rejudge(self, tolerances: Tolerances) -> CandidateRun:
        """Its rows judged again at `tolerances` (from their profiles alone)."""
        rows = tuple(c.rejudge(tolerances.for_output(c.name)) for c in self.outputs)
        return replace(self, outputs=rows)


@dataclass(frozen=True)
class GenerationStep:
    """One captured forward call of an hf: run: which step, which phase, its sizes."""

    index: int  # the input set it became
    step: int
    phase: str  # "prefill" | "decode" | "forward"
    label: str
    batch: int
    sequence_length: int
    past_length: int


@dataclass(frozen=True)
class TokenDivergence:
    """Where ONNX Runtime's free-running tokens first part from torch's (parity.hf.generation).

    `position` counts new tokens from 0. `torch_margin` is torch's top-1 minus top-2 logit
    there; `logits_error` the max |onnx - torch| of that position's logits, both given the
    same prefix (every earlier token agreed). `near_tie`: the logits pass the run's tolerance
    (`logits_passed`) and the margin is within what their error can flip, so rounding chose
    the token, not a bug. Judged at the tolerances of the run that made it.
    """

    position: int
    torch_token: int
    onnx_token: int
    torch_margin: float
    logits_error: float
    near_tie: bool
    logits_passed: bool
    torch_piece: str = ""  # each token's text, decoded alone
    onnx_piece: str = ""


@dataclass(frozen=True)
class PromptGeneration:
    """One prompt generated freely by ONNX Runtime beside torch's greedy generate(): new
    tokens only, their texts, each token decoded alone (`*_pieces`), where they part."""

    prompt: str
    torch_tokens: tuple[int, ...]
    onnx_tokens: tuple[int, ...]
    torch_text: str
    onnx_text: str
    first_divergence: TokenDivergence | None = None
    torch_pieces: tuple[str, ...] = ()
    onnx_pieces: tuple[str, ...] = ()

    @property
    def match_ratio(self) -> float:
        """The fraction of new-token positions where both chose the same token."""
        n = max(len(self.torch_tokens), len(self.onnx_tokens))
        if n == 0:
            return 1.0
        same = sum(a == b for a, b in zip(self.torch_tokens, self.onnx_tokens, strict=False))
        return same / n


@dataclass(frozen=True)
class PaddedPrompt:
    """One prompt of the left-padded batch (parity.hf.padded_batch): its padding tokens; the
    max |onnx - torch| of its logits in the batch over every step, the file on its own cache
    (`batch_error`); whether they stay within the logits tolerance of what the file gives the
    prompt alone, fed the same tokens (`batch_passed`; `shift`: their max difference); the
    prompt alone as the step comparison judged it (`alone_error`: None when not compared)."""

    prompt: str
    padding: int
    batch_error: float
    batch_passed: bool
    alone_error: float | None = None
    alone_passed: bool = True
    shift: float = 0.0


@dataclass(frozen=True)
class PaddedBatch:
    """A decoder file with no position_ids, whose steps are compared one prompt at a time,
    run on the prompts as the one left-padded batch generate() makes (parity.hf.padded_batch):
    each prompt's logits over `steps` steps. `kind`: the finding it makes (limitation: only
    padded prompts differ while each alone matches; bug: a prompt with no padding differs
    too; None: the batch matches, or a prompt alone already fails the steps); `text`: the
    sentence every front shows. Judged at the tolerances of the run that made it."""

    prompts: tuple[PaddedPrompt, ...]
    steps: int
    text: str
    kind: FindingKind | None = None
    output: str = "logits"

    @property
    def fails(self) -> bool:
        """The batch fails the run: a finding says why (the step rows all pass)."""
        return self.kind is not None


@dataclass(frozen=True)
class GenerationInfo:
    """What an hf: run adds: its summary (plain JSON, the report's "summary") and steps;
    for a causal LM, each prompt generated freely by ONNX Runtime (`prompts`; () when not
    run, `free_run_note` says why); for a decoder file with no position_ids, the prompts as
    one left-padded batch (`padded_batch`; None when not run)."""

    summary: Mapping[str, Any]
    steps: tuple[GenerationStep, ...]
    prompts: tuple[PromptGeneration, ...] = ()
    free_run_note: str = ""
    padded_batch: PaddedBatch | None = None


FROZEN_KINDS = ("size", "branch")  # `frozen[].kind`


@dataclass(frozen=True)
class FrozenNode:
    """A node of the ONNX graph that holds a size (or a branch) tracing froze at the
    export's size (parity.frozen): the JSON report's top-level `frozen` list. `dims` maps each
    dim the constant equals to its value at the export's size ({"height": 64, "width": 48});
    `source` is the torch line the exporter recorded (``models.py:18``) or None; `confirmed`:
    the file passes at the recovered size and the graph with the constant recomputed agrees
    with torch at the failing size (a node is shown only once confirmed, unless said)."""

    node: str
    op: str
    kind: str  # FROZEN_KINDS
    constant: tuple[float, ...]
    dims: Mapping[str, int]
    source: str | None = None
    confirmed: bool = False
    text: str = ""  # the one sentence every front shows (parity.frozen's words)


@dataclass(frozen=True)
class StaticAxis:
    """An input axis the ONNX file fixes although the torch model runs at other sizes (the
    dynamo exporter made an LSTM's time axis static): the JSON report's `static_axes`.
    `text` is the one line every front shows (parity.run.frozen_search's words)."""

    input: str
    axis: int
    size: int  # the file's fixed size
    torch_size: int  # another size torch ran at
    text: str = ""


@dataclass(frozen=True)
class AnalysisNote:
    """What an analysis that was asked for did, or why it could not: the JSON report's
    `analyses[]`. No analysis is silently absent: one that could not run (`done` False) says
    why here, and the findings say it (parity.show.findings)."""

    analysis: str  # the analysis's name (parity.analyses): "noise_floor", "layers", "repro", ...
    text: str
    done: bool = True


class FindingKind(StrEnum):
    """What a finding says of a run (the JSON's `findings[].kind`): decided in
    parity.show.findings."""

    BUG = "bug"
    ROUNDING = "rounding"
    FROZEN = "frozen"
    NEAR_TIE = "near_tie"
    ERROR = "error"
    STATIC_AXIS = "static_axis"
    FROZEN_SEARCH = "frozen_search"  # what the frozen search cost when it confirmed nothing
    UNMEASURED = "unmeasured"
    DIVERGES = "diverges"
    QUANTIZATION = "quantization"  # what a file's quantized weights cost (not a bug)
    # what the file cannot do that the model does (a left-padded batch: parity.hf.padded_batch)
    LIMITATION = "limitation"
    STAGE = "stage"  # several files as pipeline stages: the first where the numbers break
    # what an approximation the deploy tool applied on purpose costs (FastGelu's tanh GELU, ...)
    APPROXIMATION = "approximation"
    ANSWERS = "answers"  # --data: what changes for the samples (parity.data.words)


FINDING_KINDS = tuple(k.value for k in FindingKind)


@dataclass(frozen=True)
class Finding:
    """One conclusion of a run (the JSON report's `findings[]`): made once, in
    parity.show.findings, and rendered as-is by the terminal, JSON, HTML, Overview and API.
    `output` / `candidate` are None where the finding is about the whole run."""

    kind: FindingKind
    text: str
    output: str | None = None
    candidate: int | None = None


SUGGESTION_BASES = ("rounding", "observed")  # `suggested_tolerances.basis`


@dataclass(frozen=True)
class SuggestedTolerances:
    """Per-output tolerances Parity suggests (parity.analyses.fresh_check): fitted on the run's
    input sets, then checked on fresh ones (other seed, other sizes, at least as many) before
    being shown. `basis`: "rounding" (k x the noise floor --noise-floor measured) or
    "observed" (margin x the smallest atol that passed: no rounding measurement behind it);
    `checked_on` describes every fresh set each tolerance passed on without being fitted to
    it; `withheld` says, per output, why none is suggested (a bug, not rounding, fails on
    fresh inputs, could not be checked). The JSON report's `suggested_tolerances`."""

    outputs: Mapping[str, Tolerance]
    basis: str  # SUGGESTION_BASES
    checked_on: tuple[str, ...] = ()
    withheld: Mapping[str, str] = field(default_factory=dict)
    default: Tolerance | None = None
    fitted_on: int = 0  # input sets it was fitted on
    k: float | None = None  # basis "rounding": atol = k x the floor

    def tolerances(self, base: Tolerances) -> Tolerances:
        """`base` with the suggested tolerances: what `--tolerances` reads back."""
        out = base if self.default is None else base.with_default(self.default)
        for name, tolerance in self.outputs.items():
            out = out.with_output(name, tolerance)
        return out


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
    # nodes holding a size or branch frozen at export (parity.frozen), confirmed ones first
    frozen: tuple[FrozenNode, ...] = ()
    # input axes the file fixes where the torch model takes other sizes (parity.run.frozen_search)
    static_axes: tuple[StaticAxis, ...] = ()
    # tolerances suggested and checked on fresh input sets (parity.analyses.fresh_check), if asked
    suggested_tolerances: SuggestedTolerances | None = None
    # what each analysis asked for did, or why it could not (parity.analyses)
    analyses: tuple[AnalysisNote, ...] = ()
    # how `verdict` is decided: the tolerance (default) or the cause (parity.show.cause)
    judge: Judge = Judge.TOLERANCE
    # --data: what changes per output on the user's samples (parity.analyses.answers)
    data: DataResult | None = None

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
                layers if k == 0 else None,
            )
            for k, info in enumerate(infos)
        )
        return cls(cases=cases, candidates=runs, **fields)

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
        return replace(
            self,
            candidates=tuple(
                replace(c, layers=layers[c.index]) if c.index in layers else c
                for c in self.candidates
            ),
        )

    def with_quantization(self, found: Mapping[int, QuantizationResult]) -> ValidationRun:
        """The run with each candidate's quantized weights judged, by its index."""
        return replace(
            self,
            candidates=tuple(
                replace(c, quantization=found[c.index]) if c.index in found else c
                for c in self.candidates
            ),
        )

    def with_approximation(self, found: Mapping[int, ApproximationResult]) -> ValidationRun:
        """The run with each candidate's intended approximations judged, by its index."""
        return replace(
            self,
            candidates=tuple(
                replace(c, approximation=found[c.index]) if c.index in found else c
                for c in self.candidates
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
        """Judge every output again at other tolerances; milliseconds, no tensors touched.

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
        return replace(
            self,
            judge=self.judge if judge is None else judge_of(judge),
            tolerances=tolerances,
            candidates=tuple(c.rejudge(tolerances) for c in self.candidates),
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
