"""What a data run concludes (the JSON report's top-level `data`): frozen values that import
only parity.files below them, so parity.results can hold them (the run's result "data",
registered there: parity.results.answers), and their JSON, arrays and all (the result owns it,
as --layers' does)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import parity.files.strict_json as sj
from parity.files.array_members import ArrayGet, ArrayPut

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
        """The report's `data` (parity.results.by_name.OwnJson)."""
        return data_to_json(self)

    def saved_json(self, put: ArrayPut, prefix: str) -> dict[str, Any]:
        """A saved run's `data`: the report's, with the worst samples' arrays as members."""
        from parity.files.json_output import plain

        return plain(data_to_json(self, put))

    @classmethod
    def from_saved_json(cls, raw: Any, get: ArrayGet, at: str) -> DataResult:
        """What `saved_json` wrote, its arrays from the members."""
        found = data_from_json(raw, get, at)
        assert found is not None  # raw is not null: the codec reads only those
        return found

    @property
    def criteria(self) -> dict[str, bool]:
        """Outputs judged on agreement (--min-agreement): name -> passed."""
        return {o.name: bool(o.passed) for o in self.outputs if o.passed is not None}


# --- `data` as JSON: the report's block (the contract CI reads) and a saved run's, which also
# keeps the worst samples' arrays (through the saved run's array members).


def _number(value: float | None) -> float | None:
    if value is None or not np.isfinite(value):
        return None
    return float(value)


def data_to_json(d: DataResult, put: ArrayPut | None = None) -> dict[str, Any]:
    """The report's `data` (with `put`: a saved run's, the worst samples' arrays stored)."""
    return {
        "source": d.source,
        "format": d.format,
        "samples": d.samples,
        "batch_size": d.batch_size,
        "labels": d.labels,
        "skipped": [{"id": s.id, "reason": s.reason} for s in d.skipped],
        "outputs": [_output_to_json(o, k, put) for k, o in enumerate(d.outputs)],
        "notes": list(d.notes),
        "processor": d.processor or None,
    }


def _output_to_json(o: DataOutput, k: int, put: ArrayPut | None) -> dict[str, Any]:
    a = o.accuracy
    return {
        "name": o.name,
        "task": o.task,
        "task_inferred": o.task_inferred,
        "samples": o.samples,
        "agree": o.agree,
        "agreement": o.agreement,
        "min_agreement": o.min_agreement,
        "passed": o.passed,
        "flips": [
            {
                "sample": f.sample,
                "id": f.id,
                "torch": f.torch,
                "onnx": f.onnx,
                "torch_margin": _number(f.torch_margin),
                "near_tie": f.near_tie,
            }
            for f in o.flips
        ],
        "n_flips": o.n_flips,
        "accuracy": None
        if a is None
        else {
            "torch": a.torch,
            "onnx": a.onnx,
            "difference": a.difference,
            "interval": list(a.interval),
            "p_value": a.p_value,
            "within_noise": a.within_noise,
            "n": a.n,
        },
        "top_k": o.top_k,
        "top_k_overlap": _number(o.top_k_overlap),
        "typical_error": _number(o.typical_error),
        "cosine_mean": _number(o.cosine_mean),
        "cosine_min": _number(o.cosine_min),
        "relative_error_max": _number(o.relative_error_max),
        "relative_error_median": _number(o.relative_error_median),
        "neighbours_on": o.neighbours_on,
        "worst": [_worst_to_json(w, f"data.{k}.worst.{j}", put) for j, w in enumerate(o.worst)],
        "histogram": {"edges": list(o.histogram[0]), "counts": list(o.histogram[1])},
        "suggestion": None if o.suggestion is None else _suggestion_to_json(o.suggestion),
    }


def _suggestion_to_json(g: AgreementSuggestion) -> dict[str, Any]:
    return {
        "min_agreement": g.value,
        "reason": g.reason,
        "fitted_on": g.fitted_on,
        "checked_on": g.checked_on,
        "checked_agreement": _number(g.checked_agreement),
    }


def _suggestion_from_json(raw: Any, at: str) -> AgreementSuggestion | None:
    if raw is None:
        return None
    g = sj.obj(raw, at)
    return AgreementSuggestion(
        value=_float(g.get("min_agreement"), f"{at}.min_agreement"),
        reason=sj.string(g.get("reason", ""), f"{at}.reason"),
        fitted_on=sj.integer(g.get("fitted_on", 0), f"{at}.fitted_on"),
        checked_on=sj.integer(g.get("checked_on", 0), f"{at}.checked_on"),
        checked_agreement=_float(g.get("checked_agreement"), f"{at}.checked_agreement"),
    )


def _worst_to_json(w: WorstSample, member: str, put: ArrayPut | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"sample": w.sample, "id": w.id, "error": _number(w.error)}
    if w.text:
        entry["text"] = w.text
    if put is not None:
        arrays = {f"input.{k}": v for k, v in w.inputs.items()}
        arrays.update({k: v for k, v in (("torch", w.torch), ("onnx", w.onnx)) if v is not None})
        entry["arrays"] = {
            key: put(f"{member}.{key}", np.asarray(value), f"sample {w.id} {key}")
            for key, value in arrays.items()
            if value is not None
        }
    return entry


def data_from_json(raw: Any, get: ArrayGet | None = None, at: str = "data") -> DataResult | None:
    """What `data_to_json` wrote (None: absent, a run without --data or saved before)."""
    if raw is None:
        return None
    raw = sj.obj(raw, at)
    skipped = tuple(
        Skipped(sj.string(s.get("id"), f"{at}.skipped.id"), sj.string(s.get("reason"), at))
        for s in (sj.obj(x, f"{at}.skipped") for x in sj.array(raw.get("skipped") or [], at))
    )
    outputs = tuple(
        _output_from_json(sj.obj(o, f"{at}.outputs[{k}]"), get, f"{at}.outputs[{k}]")
        for k, o in enumerate(sj.array(raw.get("outputs") or [], f"{at}.outputs"))
    )
    return DataResult(
        source=sj.string(raw.get("source", ""), f"{at}.source"),
        format=sj.string(raw.get("format", ""), f"{at}.format"),
        samples=sj.integer(raw.get("samples", 0), f"{at}.samples"),
        skipped=skipped,
        outputs=outputs,
        labels=sj.optional(sj.string, raw.get("labels"), f"{at}.labels"),
        batch_size=sj.integer(raw.get("batch_size", 0), f"{at}.batch_size"),
        notes=tuple(sj.string(n, f"{at}.notes") for n in sj.array(raw.get("notes") or [], at)),
        processor=sj.optional(sj.string, raw.get("processor"), f"{at}.processor") or "",
    )


def _float(value: Any, at: str) -> float | None:
    return None if value is None else float(sj.number(value, at))


def _output_from_json(o: Mapping[str, Any], get: ArrayGet | None, at: str) -> DataOutput:
    flips = tuple(
        Flip(
            sample=sj.integer(f.get("sample"), f"{at}.flips.sample"),
            id=sj.string(f.get("id"), f"{at}.flips.id"),
            torch=sj.integer(f.get("torch"), f"{at}.flips.torch"),
            onnx=sj.integer(f.get("onnx"), f"{at}.flips.onnx"),
            torch_margin=_float(f.get("torch_margin"), f"{at}.flips.torch_margin") or 0.0,
            near_tie=bool(f.get("near_tie", False)),
        )
        for f in (sj.obj(x, f"{at}.flips") for x in sj.array(o.get("flips") or [], at))
    )
    a = o.get("accuracy")
    accuracy = None
    if a is not None:
        a = sj.obj(a, f"{at}.accuracy")
        low, high = sj.array(a.get("interval"), f"{at}.accuracy.interval")
        accuracy = Accuracy(
            torch=float(sj.number(a.get("torch"), f"{at}.accuracy.torch")),
            onnx=float(sj.number(a.get("onnx"), f"{at}.accuracy.onnx")),
            difference=float(sj.number(a.get("difference"), f"{at}.accuracy.difference")),
            interval=(float(low), float(high)),
            p_value=float(sj.number(a.get("p_value", 1.0), f"{at}.accuracy.p_value")),
            within_noise=bool(a.get("within_noise", True)),
            n=sj.integer(a.get("n", 0), f"{at}.accuracy.n"),
        )
    worst = tuple(
        _worst_from_json(sj.obj(w, f"{at}.worst"), get, f"{at}.worst[{j}]")
        for j, w in enumerate(sj.array(o.get("worst") or [], at))
    )
    hist = sj.obj(o.get("histogram") or {}, f"{at}.histogram")
    return DataOutput(
        name=sj.string(o.get("name"), f"{at}.name"),
        task=sj.string(o.get("task"), f"{at}.task"),
        task_inferred=bool(o.get("task_inferred", True)),
        samples=sj.integer(o.get("samples", 0), f"{at}.samples"),
        agree=sj.integer(o.get("agree", 0), f"{at}.agree"),
        agreement=float(sj.number(o.get("agreement", 1.0), f"{at}.agreement")),
        flips=flips,
        n_flips=sj.integer(o.get("n_flips", len(flips)), f"{at}.n_flips"),
        accuracy=accuracy,
        top_k=sj.integer(o.get("top_k", 0), f"{at}.top_k"),
        top_k_overlap=_float(o.get("top_k_overlap"), f"{at}.top_k_overlap"),
        typical_error=_float(o.get("typical_error"), f"{at}.typical_error"),
        cosine_mean=_float(o.get("cosine_mean"), f"{at}.cosine_mean"),
        cosine_min=_float(o.get("cosine_min"), f"{at}.cosine_min"),
        relative_error_max=_float(o.get("relative_error_max"), f"{at}.relative_error_max"),
        relative_error_median=_float(o.get("relative_error_median"), f"{at}.relative_error_median"),
        neighbours_on=sj.integer(o.get("neighbours_on", 0), f"{at}.neighbours_on"),
        min_agreement=_float(o.get("min_agreement"), f"{at}.min_agreement"),
        worst=worst,
        histogram=(
            tuple(float(e) for e in sj.array(hist.get("edges") or [], f"{at}.histogram")),
            tuple(int(c) for c in sj.array(hist.get("counts") or [], f"{at}.histogram")),
        ),
        suggestion=_suggestion_from_json(o.get("suggestion"), f"{at}.suggestion"),
    )


def _worst_from_json(w: Mapping[str, Any], get: ArrayGet | None, at: str) -> WorstSample:
    arrays: dict[str, np.ndarray] = {}
    if get is not None:
        for key, member in sj.obj(w.get("arrays") or {}, f"{at}.arrays").items():
            arrays[key] = get(member, f"{at}.arrays.{key}")
    return WorstSample(
        sample=sj.integer(w.get("sample"), f"{at}.sample"),
        id=sj.string(w.get("id"), f"{at}.id"),
        error=_float(w.get("error"), f"{at}.error") or 0.0,
        inputs={k[len("input.") :]: v for k, v in arrays.items() if k.startswith("input.")},
        torch=arrays.get("torch"),
        onnx=arrays.get("onnx"),
        text=sj.string(w.get("text", ""), f"{at}.text"),
    )
