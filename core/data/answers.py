"""What changes per output, by what it is, accumulated batch by batch (a few numbers per
sample, the arrays of the worst few).

Tasks: set with --task NAME=TASK (or --data-task), else given by the model's config (an hf:
classification head's id2label), else inferred: a name with "logit", "class", "prob"
or "score" and (batch, C) values, or any (batch, C) float output with 2 <= C <= 1000, is a
classification; a name with "embed", "pool", "feature", "sentence" or "vector" an embedding;
anything else a regression.

- classification: the top-1 class of each side; `agree` the samples whose class is the same;
  the top-k overlap (k = min(5, C - 1)); every changed sample (a flip) with both classes and
  torch's margin (its top logit minus its second). A flip is a near tie when torch's margin
  is at most twice the output's typical error, the median over the data set of each sample's
  largest |onnx - torch|: the file's ordinary error alone can swap the two classes.
  Otherwise it is a real change. Where every change goes to one class (parity.data.words.
  one_class: a shift, likely a bug), the typical error is the bug's, not noise: none is a
  near tie.
- embedding: the cosine similarity of each sample's vectors; each sample's nearest
  neighbour (cosine) among the first NEIGHBOUR_SAMPLES samples, on each side; `agree` the
  samples whose neighbour is the same; a flip names both neighbours (sample numbers) and
  torch's margin (its first neighbour's cosine minus its second's).
- regression: each sample's largest |onnx - torch| relative to the output's spread (the
  standard deviation of torch's values over the data set); `agree` the samples within
  REGRESSION_AGREE of the spread.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from parity.data.batches import Batch
from parity.data.result import TEXT_KEPT, DataOutput, Flip, WorstSample
from parity.data.stats import paired_accuracy
from parity.data.words import one_class
from parity.errors import UsageError

MAX_FLIPS = 10_000  # flips listed per output (all are counted)
WORST_KEPT = 8  # samples kept with their arrays per output
NEIGHBOUR_SAMPLES = 2048  # embeddings kept for the nearest-neighbour check
REGRESSION_AGREE = 0.01  # a regression sample agrees within 1% of the output's spread
NEAR_TIE_FACTOR = 2.0
MAX_CLASSES = 1000
_CLASS_WORDS = ("logit", "class", "prob", "score")
_EMBED_WORDS = ("embed", "pool", "feature", "sentence", "vector")


def infer_task(name: str, shape: tuple[int, ...], dtype: np.dtype) -> str:
    """The task an output's name and shape say (the rule in this module's docstring)."""
    lower = name.lower()
    two_d = len(shape) == 2 and dtype.kind == "f"
    if any(w in lower for w in _CLASS_WORDS) and two_d and shape[1] >= 2:
        return "classification"
    if any(w in lower for w in _EMBED_WORDS) and dtype.kind == "f" and len(shape) >= 2:
        return "embedding"
    if two_d and 2 <= shape[1] <= MAX_CLASSES:
        return "classification"
    return "regression"


@dataclass
class _Worst:
    """The WORST_KEPT samples with the largest measure so far (a min-heap)."""

    heap: list[tuple[float, int, WorstSample]] = field(default_factory=list)

    def offer(
        self,
        rank: np.ndarray,
        measure: np.ndarray,
        batch: Batch,
        ref: np.ndarray,
        onnx: np.ndarray,
    ) -> None:
        """Keep the rows of largest `rank` (their `measure` is what is said)."""
        n = min(WORST_KEPT, rank.size)
        for row in np.argsort(-rank, kind="stable")[:n]:
            value = float(rank[row])
            if len(self.heap) >= WORST_KEPT and value <= self.heap[0][0]:
                break
            sample = WorstSample(
                sample=int(batch.samples[row]),
                id=batch.ids[row],
                error=float(measure[row]),
                inputs=batch.inputs_of(int(row)),
                torch=np.array(ref[row]),
                onnx=np.array(onnx[row]),
                text=batch.texts[row][:TEXT_KEPT] if batch.texts else "",
            )
            item = (value, -sample.sample, sample)
            if len(self.heap) < WORST_KEPT:
                heapq.heappush(self.heap, item)
            else:
                heapq.heapreplace(self.heap, item)

    def samples(self) -> tuple[WorstSample, ...]:
        return tuple(s for _, _, s in sorted(self.heap, key=lambda t: (-t[0], -t[1])))


class OutputAnswers:
    """One output's per-sample summaries, fed batch by batch (`add`), judged by `result`."""

    def __init__(
        self,
        name: str,
        task: str,
        inferred: bool,
        min_agreement: float | None,
        *,
        suggest: bool = False,
    ):
        self.name = name
        self.suggest = suggest  # --suggest: a checked --min-agreement (parity.data.suggest)
        self._agrees: np.ndarray | None = None  # each sample's answer the same, once judged
        self.task = task
        self.inferred = inferred
        self.min_agreement = min_agreement
        self._errors: list[np.ndarray] = []  # per-sample largest |onnx - torch|
        self._samples: list[np.ndarray] = []
        self._labels: list[np.ndarray] | None = []
        self._ids: dict[int, str] = {}  # ids of flipped samples (and kept neighbours)
        self._classes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # torch, onnx, margin
        self._overlap = 0.0
        self.top_k = 0
        self._cosines: list[np.ndarray] = []
        self._vectors: list[tuple[np.ndarray, np.ndarray]] = []
        self._kept_vectors = 0
        self._sum = self._sumsq = 0.0
        self._count = 0
        self._worst = _Worst()

    def add(self, batch: Batch, ref: np.ndarray, onnx: np.ndarray) -> None:
        n = batch.n_real
        ref = np.asarray(ref)[:n]
        onnx = np.asarray(onnx)[:n]
        r, o = _flat(ref, onnx, n)
        error = _sample_errors(r, o)
        self._errors.append(error)
        self._samples.append(batch.samples)
        if self._labels is not None:
            if batch.labels is None:
                self._labels = None
            else:
                self._labels.append(batch.labels)
        if self.task == "classification":
            self._add_classes(batch, r, o)
        elif self.task == "embedding":
            self._add_vectors(batch, r, o)
        else:
            finite = r[np.isfinite(r)]
            self._sum += float(finite.sum())
            self._sumsq += float((finite**2).sum())
            self._count += int(finite.size)
        rank = _rank(self.task, r, o, error)
        self._worst.offer(rank, rank if self.task == "embedding" else error, batch, ref, onnx)

    def _add_classes(self, batch: Batch, r: np.ndarray, o: np.ndarray) -> None:
        t_cls = np.argmax(r, axis=1)
        o_cls = np.argmax(o, axis=1)
        top2 = np.sort(r, axis=1)[:, -2:] if r.shape[1] >= 2 else np.zeros((r.shape[0], 2))
        margin = top2[:, 1] - top2[:, 0]
        self._classes.append((t_cls, o_cls, margin))
        k = max(1, min(5, r.shape[1] - 1))
        self.top_k = k
        t_top = np.argpartition(-r, k - 1, axis=1)[:, :k]
        o_top = np.argpartition(-o, k - 1, axis=1)[:, :k]
        same = (t_top[:, :, None] == o_top[:, None, :]).any(axis=2).sum(axis=1)
        self._overlap += float(same.sum()) / k
        for row in np.flatnonzero(t_cls != o_cls):
            self._ids[int(batch.samples[row])] = batch.ids[row]

    def _add_vectors(self, batch: Batch, r: np.ndarray, o: np.ndarray) -> None:
        rn = np.linalg.norm(r, axis=1)
        on = np.linalg.norm(o, axis=1)
        cos = _cosine(r, o)
        self._cosines.append(cos)
        room = NEIGHBOUR_SAMPLES - self._kept_vectors
        if room > 0:
            take = slice(0, min(room, r.shape[0]))
            self._vectors.append(
                (
                    (r[take] / np.maximum(rn[take, None], 1e-30)).astype(np.float32),
                    (o[take] / np.maximum(on[take, None], 1e-30)).astype(np.float32),
                )
            )
            for row in range(take.stop):
                self._ids[int(batch.samples[row])] = batch.ids[row]
            self._kept_vectors += take.stop

    def result(self) -> DataOutput:
        """What changes for this output (with --suggest, the criterion proposed for it)."""
        made = self._result()
        if not self.suggest:
            return made
        from parity.data.suggest import suggest_agreement

        return replace(made, suggestion=suggest_agreement(made, self._agrees))

    def _result(self) -> DataOutput:
        errors = np.concatenate(self._errors) if self._errors else np.zeros(0)
        samples = np.concatenate(self._samples) if self._samples else np.zeros(0, np.int64)
        n = int(errors.size)
        finite = errors[np.isfinite(errors)]
        typical = float(np.median(finite)) if finite.size else None
        base: dict[str, Any] = {
            "name": self.name,
            "task": self.task,
            "task_inferred": self.inferred,
            "min_agreement": self.min_agreement,
            "typical_error": typical,
            "worst": self._worst.samples(),
            "histogram": _histogram(errors),
        }
        if self.task == "classification":
            return self._classification(base, samples, typical)
        if self.task == "embedding":
            return self._embedding(base, samples)
        mean = self._sum / max(self._count, 1)
        spread = float(np.sqrt(max(self._sumsq / max(self._count, 1) - mean**2, 0.0)))
        relative = errors / spread if spread > 0 else np.where(errors > 0, np.inf, 0.0)
        agree = int(np.count_nonzero(relative <= REGRESSION_AGREE))
        worst = tuple(
            replace(w, error=w.error / spread if spread > 0 else w.error)
            for w in base.pop("worst")
        )  # fmt: skip
        return DataOutput(
            **base,
            worst=worst,
            samples=n,
            agree=agree,
            agreement=agree / n if n else 1.0,
            flips=(),
            n_flips=0,
            relative_error_max=_finite(relative.max()) if n else None,
            relative_error_median=_finite(np.median(relative)) if n else None,
        )

    def _classification(self, base: dict, samples: np.ndarray, typical: float | None) -> DataOutput:
        t_cls, o_cls, margin = (np.concatenate([c[i] for c in self._classes]) for i in range(3))
        n = int(t_cls.size)
        changed = np.flatnonzero(t_cls != o_cls)
        self._agrees = t_cls == o_cls
        tie = NEAR_TIE_FACTOR * (typical or 0.0)
        flips = tuple(
            Flip(
                sample=int(samples[k]),
                id=self._ids.get(int(samples[k]), str(int(samples[k]))),
                torch=int(t_cls[k]),
                onnx=int(o_cls[k]),
                torch_margin=float(margin[k]),
                near_tie=bool(margin[k] <= tie),
            )
            for k in changed[:MAX_FLIPS]
        )
        if one_class(flips) is not None:  # a shift: the typical error measures the bug
            flips = tuple(replace(f, near_tie=False) for f in flips)
        accuracy = None
        if self._labels:
            labels = np.concatenate(self._labels)
            accuracy = paired_accuracy(t_cls == labels, o_cls == labels)
        agree = n - int(changed.size)
        return DataOutput(
            **base,
            samples=n,
            agree=agree,
            agreement=agree / n if n else 1.0,
            flips=flips,
            n_flips=int(changed.size),
            accuracy=accuracy,
            top_k=self.top_k,
            top_k_overlap=self._overlap / n if n else None,
        )

    def _embedding(self, base: dict[str, Any], samples: np.ndarray) -> DataOutput:
        cos = np.concatenate(self._cosines) if self._cosines else np.zeros(0)
        flips: list[Flip] = []
        m = self._kept_vectors
        agree = m
        if m >= 3:
            r = np.concatenate([v[0] for v in self._vectors])
            o = np.concatenate([v[1] for v in self._vectors])
            sim_r = r @ r.T
            sim_o = o @ o.T
            np.fill_diagonal(sim_r, -np.inf)
            np.fill_diagonal(sim_o, -np.inf)
            nn_r = sim_r.argmax(axis=1)
            nn_o = sim_o.argmax(axis=1)
            top2 = np.sort(sim_r, axis=1)[:, -2:]
            margin = top2[:, 1] - top2[:, 0]
            changed = np.flatnonzero(nn_r != nn_o)
            self._agrees = nn_r == nn_o
            agree = m - int(changed.size)
            tie = NEAR_TIE_FACTOR * float(np.median(1.0 - cos[:m])) if m else 0.0
            for k in changed[:MAX_FLIPS]:
                sample = int(samples[k])
                flips.append(
                    Flip(
                        sample=sample,
                        id=self._ids.get(sample, str(sample)),
                        torch=int(samples[nn_r[k]]),
                        onnx=int(samples[nn_o[k]]),
                        torch_margin=float(margin[k]),
                        near_tie=bool(margin[k] <= tie),
                    )
                )
        return DataOutput(
            **base,
            samples=int(cos.size),
            agree=agree,
            agreement=agree / m if m else 1.0,
            flips=tuple(flips),
            n_flips=m - agree,
            cosine_mean=_finite(cos.mean()) if cos.size else None,
            cosine_min=_finite(cos.min()) if cos.size else None,
            neighbours_on=m,
        )


def _flat(ref: np.ndarray, onnx: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `n` rows of both sides, one float64 row per sample."""
    r = np.asarray(ref)[:n].reshape(n, -1).astype(np.float64)
    o = np.asarray(onnx)[:n].reshape(n, -1).astype(np.float64)
    return r, o


def _sample_errors(r: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Each sample's largest |onnx - torch| (NaN on one side: as far off as can be)."""
    diff = np.abs(o - r)
    diff[np.isnan(diff)] = np.inf
    return diff.max(axis=1) if r.shape[1] else np.zeros(r.shape[0])


def _cosine(r: np.ndarray, o: np.ndarray) -> np.ndarray:
    rn = np.linalg.norm(r, axis=1)
    on = np.linalg.norm(o, axis=1)
    cos = (r * o).sum(axis=1) / np.maximum(rn * on, 1e-30)
    return np.where((rn == 0) & (on == 0), 1.0, cos)


def _rank(task: str, r: np.ndarray, o: np.ndarray, error: np.ndarray) -> np.ndarray:
    """What orders a batch's samples worst first: a changed class before any kept one (then
    the error), an embedding's 1 - cosine, anything else its error."""
    if task == "classification":
        flipped = (np.argmax(r, axis=1) != np.argmax(o, axis=1)).astype(np.float64)
        return error + flipped * (1.0 + float(np.nanmax(error, initial=0.0)))
    if task == "embedding":
        return 1.0 - _cosine(r, o)
    return error


def rows_worth_keeping(
    tasks: Mapping[str, str], ref: Mapping[str, np.ndarray], onnx: Mapping[str, np.ndarray], n: int
) -> list[int]:
    """The rows of a batch of `n` real samples that may be among an output's WORST_KEPT
    (its inputs kept): the batch's own worst rows by `_rank`, per output of `tasks`."""
    rows: set[int] = set()
    for name, task in tasks.items():
        if name not in ref or name not in onnx or ref[name].shape != onnx[name].shape:
            continue
        r, o = _flat(ref[name], onnx[name], n)
        rank = _rank(task, r, o, _sample_errors(r, o))
        rows.update(int(k) for k in np.argsort(-rank, kind="stable")[:WORST_KEPT])
    return sorted(rows)


def _finite(value: float) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None


def _histogram(errors: np.ndarray) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Per-sample errors in 24 log-spaced bins (zeros in the first, inf in the last)."""
    positive = errors[(errors > 0) & np.isfinite(errors)]
    if not positive.size:
        return (), ()
    low, high = float(positive.min()), float(positive.max())
    if high <= low:
        high = low * 2
    edges = np.geomspace(low, high, 25)
    clipped = np.clip(np.where(np.isfinite(errors), errors, high), low, high)
    counts, _ = np.histogram(clipped, bins=edges)
    return tuple(float(e) for e in edges), tuple(int(c) for c in counts)


def answers_for(
    names_shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    tasks: Mapping[str, str],
    min_agreement: Mapping[str, float],
    *,
    known: Mapping[str, str] | None = None,
    suggest: bool = False,
) -> dict[str, OutputAnswers]:
    """One accumulator per output, its task given, else `known` (what the model's config
    says: an hf: head's id2label), else inferred from its first batch."""
    found = {}
    for name, (shape, dtype) in names_shapes.items():
        task = tasks.get(name)
        told = (known or {}).get(name)
        if task is None and told == "classification" and len(shape) == 2:
            found[name] = OutputAnswers(name, told, True, min_agreement.get(name), suggest=suggest)
            continue
        if task == "classification" and len(shape) != 2:
            raise UsageError(
                f"--task {name}=classification: output {name} has shape {list(shape)}; "
                "a classification is (batch, classes): give embedding or regression"
            )
        found[name] = OutputAnswers(
            name,
            task or infer_task(name, shape, dtype),
            task is None,
            min_agreement.get(name),
            suggest=suggest,
        )
    return found
