"""Sources: where a run's cases come from. The loop in parity.pipeline is the only consumer.

A source yields `Case`s lazily: an input set, the reference outputs for it, and what must
not be judged. Kinds today: generated or given inputs + a torch model (`torch_inputs`),
stored reference outputs (`stored`), a data set read in batches (`data`), the captured
generate() calls of an hf: model (`parity.hf.source`), a reference ONNX file
(`onnx_reference`; its `reference_signature` is the signature cases are made for, where
other sources take the first candidate's).
A new kind of run is a new Source; a new way to run the ONNX side is a new candidate in
the loop (parity.run.candidates). Neither is a new orchestrator. `--layers` is the same loop
with intermediate values compared: each source hands its torch side (`torch_side()`) to
parity.layers, or says why it has none.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from parity.results import (
    GenerationInfo,
    InputSet,
    OutputComparison,
    OutputSet,
    PrecisionRun,
    Provenance,
)
from parity.signature import OnnxSignature
from parity.tolerances import Tolerances

if TYPE_CHECKING:
    import torch

    from parity.limits.deadline import Deadline
    from parity.run.candidates import Candidate


@dataclass(frozen=True)
class Crop:
    """Compare a candidate's output at `index` only (e.g. the logits positions torch kept);
    `reason` is said in the comparison's message whenever the crop changes the shape."""

    index: tuple[slice, ...]
    reason: str


@dataclass(frozen=True)
class Case:
    """One input set with its reference outputs, computed once for every candidate.

    `exclude[name]`: bool mask broadcastable to output `name`, True where an element is not
    judged (`exclude_reason` says why, e.g. padding the attention mask never attends).
    `ignore[name]`: a candidate output that is not compared at all in this case, and why (a
    merged decoder's placeholder outputs on the branch that does not compute them).
    """

    input_set: InputSet
    reference: OutputSet
    exclude: Mapping[str, np.ndarray] = field(default_factory=dict)
    exclude_reason: str = ""
    crop: Mapping[str, Crop] = field(default_factory=dict)
    part: str = ""  # the file of a multi-file export that runs this case ("": the only file)
    ignore: Mapping[str, str] = field(default_factory=dict)  # candidate outputs not compared: why
    # --noise-floor: the reference run again in float64 (None: not run; `float64_note` why;
    # with float64 present, `float64_note` says how it was made where .double() alone failed)
    float64: Mapping[str, np.ndarray] | None = None
    float64_note: str = ""
    # ... and at a 16-bit candidate's precision, by precision (a source that can: see
    # TorchSource.measure_noise_at)
    at_precision: Mapping[str, PrecisionRun] = field(default_factory=dict)
    # the candidate's raw outputs, computed where the reference was (a data run on Ray: the
    # worker ran both sides); the loop compares them instead of running the file again
    computed: OutputSet | None = None


class TorchSideModel(Protocol):
    """What parity.layers reads of a torch model: a parity.load.torch_model.TorchModel, or an
    hf: run's model (parity.hf.layers_side.HfTorchModel)."""

    @property
    def module(self) -> torch.nn.Module: ...  # whose named_modules() are hooked
    @property
    def kind(self) -> str: ...  # "torchscript", "hf", ... (TorchModel.kind)
    @property
    def parameter_names(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class TorchSide:
    """What --layers needs from a source: the torch model and how to call it on one case.

    `model`: the torch model (see TorchSideModel); None when the source has no torch model
    (`missing` says why, in words). `call(input_set)` runs
    torch's forward on one case exactly as its reference outputs were made (an hf: run's
    captured generate() call, its KV cache included); None: parity.run.runner.run_torch.
    `scope_prefix`: the export wrapper's attribute that the dynamo exporter's module scopes
    carry before `model.module`'s own paths ("model." for Parity's hf: exports).
    `traceable`: torch.export of `model` may be tried for FX-name matching. `steps`: the
    cases are the steps of one generation, each confirmed to its own first divergence.
    `exclude(case index, shape)`: a bool mask broadcastable to an intermediate value of that
    shape, True where it is not judged (padding no query attends), or None.
    """

    model: TorchSideModel | None
    call: Callable[[InputSet], Any] | None = None
    scope_prefix: str = ""
    traceable: bool = True
    steps: bool = False
    exclude: Callable[[int, tuple[int, ...]], np.ndarray | None] | None = None
    missing: str = ""
    notes: tuple[str, ...] = ()


NO_TORCH_MODEL = (
    "stored reference outputs hold no intermediate values: localising needs the torch "
    "model (--model)"
)


def _cannot(source: object, what: str) -> NotImplementedError:
    """The error of a capability this kind of run lacks. Raised as `raise _cannot(...)`: a
    method whose body is `raise NotImplementedError(...)` reads as abstract to type checkers,
    and every source would have to define it."""
    return NotImplementedError(f"{type(source).__name__} {what}")


class Source(Protocol):
    """What the loop needs from a kind of run (see parity.pipeline.run_validation).

    Every source subclasses it: the capabilities only some kinds have (`reference_signature`,
    `onnx_parts`, `cases(parts=)`, `measure_noise_at`, `free_run`) are declared here with the
    default that means "this kind does not do that", so the loop calls them unconditionally.
    """

    model: str  # the run's model text (a spec, or "reference:FILE")
    n_cases: int | None  # for progress; None until known
    timings: dict[str, float]  # what the source spent (load_model, capture, export, ...)
    environment_modules: tuple[str, ...]  # modules whose versions the report lists

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        """The ONNX file when none was given (a demo's export, the source's own export), else
        UsageError. `workdir()` makes a temp folder that is removed when the run ends."""
        ...

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        """The cases, made lazily, for an ONNX file with this signature.

        A source whose export may be several files (an encoder-decoder folder) splits it with
        `onnx_parts` and is given `parts={part: signature}`; each case says its `part`. The
        loop passes parts only when `onnx_parts` gives more than one file (else None).
        """
        ...

    @property
    def reference_signature(self) -> OnnxSignature | None:
        """The signature cases are made for when it is not the first candidate's (a reference
        ONNX file's own); None: the first candidate's."""
        return None

    def onnx_parts(self, path: str) -> Mapping[str, str]:
        """The files of an export by part, the main file (whose signature is the run's) first;
        default: the one file."""
        return {"": path}

    # the frozen-at-export search and the static-axis check need torch at other sizes
    runs_other_sizes: bool = False
    # the run keeps each case's arrays (inputs, reference, ONNX outputs) for the pages; a data
    # set's batches (parity.sources.data) are judged while they pass, and let go
    keeps_arrays: bool = True

    def reference_at(self, input_set: InputSet, signature: OnnxSignature) -> OutputSet:
        """Torch's outputs on one more input set at any size (`runs_other_sizes`); default:
        this kind cannot (no torch model to run again)."""
        raise _cannot(self, "cannot run torch at other sizes")

    def float64_of(
        self, input_set: InputSet, signature: OnnxSignature
    ) -> tuple[Mapping[str, np.ndarray] | None, str]:
        """The reference again in float64 on one of the run's input sets, after the cases
        (the noise floor measured by default on a failing run): (arrays, how) or (None, why);
        default: this kind of run has no float64 reference."""
        return None, "noise floor not measured: this kind of run has no float64 reference"

    def reference_again(
        self, input_set: InputSet, signature: OnnxSignature
    ) -> dict[str, np.ndarray]:
        """Torch's outputs on one of this run's cases once more, by the model as it is now
        (parity.analyses.quantization puts a file's own weights in it), under the ONNX names;
        default: this kind has no torch model to run again."""
        raise _cannot(self, "has no torch model to run again")

    def tokens_again(self) -> np.ndarray | None:
        """A causal LM's greedy new tokens (batch, steps) made again by generate() with the
        model as it is now; None where the run generated nothing."""
        return None

    def measure_noise(self) -> None:
        """Run the reference again in float64 on every case (the noise floor's per-case
        route; parity.analyses.noise decides when); default: this kind cannot."""
        return None

    def measure_noise_at(self, precisions: Collection[str]) -> None:
        """--noise-floor with 16-bit candidates: also run the reference at these precisions
        ("float16", "bfloat16"), where the source can; default: it cannot (nothing to do)."""
        return None

    def free_run(
        self, candidate: Candidate, tolerances: Tolerances, deadline: Deadline | None = None
    ) -> None:
        """After the cases: let the candidate run on its own (a causal LM generating);
        default: nothing to run."""
        return None

    def provenance(self) -> Provenance:
        """Kind, hashes and files this source read (the loop adds the ONNX side)."""
        ...

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> GenerationInfo | None:
        """What an hf: run adds to the run (None for other sources)."""
        ...

    def torch_side(self) -> TorchSide:
        """The torch model and its per-case forward for --layers, asked after the cases ran
        (`TorchSide(None, missing=...)` where the source has none)."""
        ...
