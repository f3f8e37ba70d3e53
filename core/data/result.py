"""What a data run concludes (the JSON report's top-level `data`): frozen values, no parity
imports at load, so parity.results can hold them (the run's result "data", registered there:
parity.results.answers); their JSON is parity.data.codec's, arrays and all."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TASKS = ("classification", "embedding", "regression")
TEXT_KEPT = 2000  # characters of a worst sample's text the run keeps


@dataclass(frozen=True)
class Skipped:
    """A sample that could not be read or preprocessed: its id and why (`data.skipped[]`)."""

    id: str
    reason: str


@dataclass(frozen=True)
class Flip:
    """One sample whose answer changed (`flips[]`): classification: torch's and the file's
    classes; embedding: each side's nearest neighbour (a sample number). `torch_margin`:
    torch's lead of its answer over the runner-up; `near_tie` by the rule of
    parity.data.answers."""

    sample: int
    id: str
    torch: int
    onnx: int
    torch_margin: float
    near_tie: bool = False


@dataclass(frozen=True)
class Accuracy:
    """With labels: both accuracies, onnx - torch, its paired 95% interval (bootstrap over
    samples), McNemar's exact p-value, and whether the difference is within noise."""

    torch: float
    onnx: float
    difference: float
    interval: tuple[float, float]
    p_value: float
    within_noise: bool
    n: int


@dataclass(frozen=True)
class WorstSample:
    """One of the worst samples of an output, with its arrays (inputs and both outputs)
    where the run kept them: what a reopened run shows."""

    sample: int
    id: str
    error: float  # the task's per-sample measure (parity.data.answers.MEASURES)
    inputs: Mapping[str, np.ndarray] = field(default_factory=dict)
    torch: np.ndarray | None = None
    onnx: np.ndarray | None = None
    text: str = ""  # the sample's text, where a tokenizer read it (cut at TEXT_KEPT)


@dataclass(frozen=True)
class AgreementSuggestion:
    """--suggest on a data run: the --min-agreement criterion proposed for one output
    (`value`; None: withheld, `reason` says why), fitted on every other sample and checked
    on the samples between them before it is shown (parity.data.suggest)."""

    value: float | None
    reason: str
    fitted_on: int = 0
    checked_on: int = 0
    checked_agreement: float | None = None  # the agreement on the samples it was checked on


@dataclass(frozen=True)
class DataOutput:
    """One output judged on the data (`data.outputs[]`): `agree` samples of `samples` give
    the same answer (`agreement` their fraction); `min_agreement` the criterion asked for
    (None: none, `passed` None)."""

    name: str
    task: str  # TASKS
    task_inferred: bool
    samples: int
    agree: int
    agreement: float
    flips: tuple[Flip, ...]
    n_flips: int  # all of them, where `flips` was cut at MAX_FLIPS
    accuracy: Accuracy | None = None
    top_k: int = 0  # classification: k of the top-k overlap
    top_k_overlap: float | None = None
    typical_error: float | None = None  # the median per-sample error (the near-tie scale)
    cosine_mean: float | None = None  # embedding
    cosine_min: float | None = None
    relative_error_max: float | None = None  # regression: per-sample max |d| / spread
    relative_error_median: float | None = None
    neighbours_on: int = 0  # embedding: samples the nearest-neighbour check covered
    min_agreement: float | None = None
    worst: tuple[WorstSample, ...] = ()
    histogram: tuple[tuple[float, ...], tuple[int, ...]] = ((), ())  # per-sample error bins
    suggestion: AgreementSuggestion | None = None  # --suggest: a checked --min-agreement

    @property
    def passed(self) -> bool | None:
        if self.min_agreement is None:
            return None
        return self.agreement >= self.min_agreement


@dataclass(frozen=True)
class DataResult:
    """The data set as judged: where it came from, how many samples, what was skipped, and
    each output (the lead candidate's)."""

    source: str
    format: str
    samples: int
    skipped: tuple[Skipped, ...]
    outputs: tuple[DataOutput, ...]
    labels: str | None = None
    batch_size: int = 0
    notes: tuple[str, ...] = ()
    processor: str = ""  # the model's own processor the samples went through ("": none)

    def output(self, name: str) -> DataOutput | None:
        return next((o for o in self.outputs if o.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """The report's `data` (parity.data.codec; parity.results.by_name.OwnJson)."""
        from parity.data.codec import data_to_json

        return data_to_json(self)

    def saved_json(self, put: Callable[[str, Any, str], str], prefix: str) -> dict[str, Any]:
        """A saved run's `data`: the report's, with the worst samples' arrays as members."""
        from parity.data.codec import data_to_json
        from parity.files.json_output import plain

        return plain(data_to_json(self, put))

    @classmethod
    def from_saved_json(cls, raw: Any, get: Callable[[Any, str], Any], at: str) -> DataResult:
        """What `saved_json` wrote, its arrays from the members."""
        from parity.data.codec import data_from_json

        found = data_from_json(raw, get, at)
        assert found is not None  # raw is not null: the codec reads only those
        return found

    @property
    def criteria(self) -> dict[str, bool]:
        """Outputs judged on agreement (--min-agreement): name -> passed."""
        return {o.name: bool(o.passed) for o in self.outputs if o.passed is not None}
