"""Source: a reference ONNX file run by ONNX Runtime (ONNX against ONNX, no torch model).

The first --onnx at the first provider and level is the reference; input sets are made from
its signature (or are the --inputs feeds) and it runs once per set, like torch would. An fp16
export against its fp32 original, an optimised graph against the unoptimised one, a new
export against last release's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from parity.errors import UsageError
from parity.limits.deadline import Deadline
from parity.load.specs import onnx_reference_spec
from parity.results import OutputComparison, Provenance, RunKind
from parity.run.candidates import Candidate
from parity.run.config import RunConfig
from parity.run.progress import ProgressReporter
from parity.settings import Mention
from parity.signature import OnnxSignature
from parity.sources import Case, Source, TorchSide
from parity.sources.torch_inputs import set_name, timed_input_sets


class OnnxReferenceSource(Source):
    """Each case: an input set, and the reference ONNX file run on it once."""

    environment_modules: tuple[str, ...] = ()

    def __init__(
        self,
        config: RunConfig,
        reference: Candidate,
        report: ProgressReporter,
        deadline: Deadline | None = None,
    ) -> None:
        self.model: str = onnx_reference_spec(reference.path)
        self.n_cases: int | None = config.n_given_sets or config.n_input_sets  # None: 1 or 2
        self.timings: dict[str, float] = {}
        self.reference = reference
        self._config = config
        self._report = report
        self._deadline = deadline

    @property
    def reference_signature(self) -> OnnxSignature:
        return self.reference.signature

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        raise UsageError(("ONNX against ONNX needs the files to compare (", Mention("onnx"), ")"))

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        """Cases for the reference's own signature (`signature` is the run's, the same, with
        the candidates' calibrated input ranges that generated inputs keep within)."""
        from parity.run.runner import run_onnx

        ref = self.reference
        self.timings["inputs"] = self.timings["reference_onnx"] = 0.0
        for input_set in timed_input_sets(self._config, signature, self.timings):
            self._report("reference", f"reference ONNX on {set_name(input_set)}", None)
            outputs = run_onnx(
                ref.live_session(), input_set, signature=ref.signature, deadline=self._deadline
            )
            self.timings["reference_onnx"] += outputs.seconds
            yield Case(input_set=input_set, reference=outputs)

    def provenance(self) -> Provenance:
        return Provenance(
            kind=RunKind.ONNX,
            model_sha256=self.reference.model.sha256,
            seed=None if self._config.n_given_sets else self._config.seed,
            reference_file=self.reference.path,
            reference_provider=self.reference.provider,
            reference_opt_level=self.reference.opt_level,
        )

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> None:
        return None

    def torch_side(self) -> TorchSide:
        """None: ONNX against ONNX compares intermediates ONNX-side
        (parity.layers.onnx_reference_run)."""
        return TorchSide(None, missing="the reference is an ONNX file: no torch model")
