"""Source: stored reference outputs (REF.npz, `--reference`) on the feeds they were made on."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from parity.errors import UsageError
from parity.limits.budget import MemoryBudget
from parity.load.specs import reference_spec
from parity.results import OutputComparison, Provenance, RunKind
from parity.run.config import RunConfig
from parity.run.progress import ProgressReporter
from parity.settings import Mention, Setting
from parity.signature import OnnxSignature
from parity.sources import NO_TORCH_MODEL, Case, Source, TorchSide
from parity.sources.torch_inputs import input_sets


class StoredSource(Source):
    """Each case: one --inputs file and the reference outputs stored for it."""

    environment_modules: tuple[str, ...] = ()

    def __init__(self, config: RunConfig, report: ProgressReporter) -> None:
        assert config.reference_file is not None
        self.reference_file: str = config.reference_file
        self.model = reference_spec(config.reference_file)
        self.n_cases: int | None = config.n_given_sets
        self.timings: dict[str, float] = {}
        self._config = config
        self._report = report

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        raise UsageError(("is required with ", Mention("reference_file")), setting=Setting("onnx"))

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:
        from parity.run.reference import load_reference_outputs

        self._report("reference", f"reading reference outputs {self.reference_file}", 0.08)
        sets = input_sets(self._config, signature)  # feeds' sizes checked before the reference's
        outputs = load_reference_outputs(
            self.reference_file,
            signature=signature,
            n_sets=self._config.n_given_sets,
            budget=MemoryBudget.of(self._config.max_memory),
        )
        for input_set, reference in zip(sets, outputs, strict=True):
            yield Case(input_set=input_set, reference=reference)

    def provenance(self) -> Provenance:
        return Provenance(kind=RunKind.REFERENCE, reference_file=self.reference_file)

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> None:
        return None

    def torch_side(self) -> TorchSide:
        return TorchSide(None, missing=NO_TORCH_MODEL)
