"""What layer-level localisation produced: one LayerValue per (matched value, input set).

These frozen types are the contract between the engine (parity.layers) and everything that
shows it (terminal, JSON report, HTML, the Layers page, Model Explorer node data). The JSON
form is the report's ``"layers"`` block: strict JSON, null for non-finite numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

import parity.files.strict_json as sj
from parity.files.array_members import ArrayGet, ArrayPut
from parity.files.derived_json import Form, decode, encode, register
from parity.files.json_output import finite_or_none
from parity.results.by_name import analysis_result

FINDINGS = (
    "quantized",  # per quantized tensor and input set: SQNR before/after its Q/DQ pair
    "exclude_from_quantization",  # node names for quantize_static(nodes_to_exclude=...)
    "exclusion_check",  # the search that chose it: SQNR before/after, gain, tried (qdq_search)
    "keep_float32",  # reference node names to keep out of a float16 conversion
    "keep_float32_check",  # that suggestion, re-converted and re-validated
)


class LayerStatus(StrEnum):
    """How one compared value is judged (see parity.layers.criterion for the rule)."""

    PASS = "pass"  # error at or below the noise threshold
    DIVERGES = "diverges"  # error above threshold AND a jump over what flows into it: born here
    CARRIED = "carried"  # error above threshold, but no bigger than its inputs': inherited
    NONFINITE = "nonfinite"  # NaN/Inf on one side only, where its inputs had none: born here
    # the two sides' shapes differ: the matching failed there, not the export (never born)
    SHAPE_MISMATCH = "shape_mismatch"
    NOT_COMPARED = "not_compared"  # matched by name but not comparable (dtype, no value)
    # no torch value stands for it (a fusion took its meaning, or the confirmation found the
    # match wrong): listed with its reason, never a divergence
    NOT_COMPARABLE = "not_comparable"

    @property
    def born(self) -> bool:
        """A status that can be a first divergence. A shape mismatch is not: two values of
        different shapes are a pairing that failed, not an error the export made."""
        return self in (LayerStatus.DIVERGES, LayerStatus.NONFINITE)


@dataclass(frozen=True)
class LayerValue:
    """One intermediate value compared on one input set.

    `error_ratio` is the value's error relative to its scale (dimensionless, see
    parity.layers.criterion); `jump` is that ratio over the largest ratio among the matched
    values feeding it; `inputs` are the `order`s of those values.
    """

    order: int  # ONNX graph (topological) order of the value's producer
    onnx_value: str
    onnx_node: str
    onnx_op: str
    torch_module: str | None  # named_modules() path, e.g. "encoder.layer.3.intermediate.dense"
    torch_node: str | None  # FX node name where there is one
    input_set: int
    shape: tuple[int, ...]
    max_abs: float | None
    max_rel: float | None
    scale: float | None
    error_ratio: float | None
    jump: float | None
    cosine: float | None
    status: str
    inputs: tuple[int, ...] = ()
    sqnr_db: float | None = None  # 10 log10(sum ref^2 / sum err^2); ONNX against ONNX
    dtype: str = ""  # the candidate's dtype of it: its threshold is that dtype's ("": float32)
    feeds: str | None = None
    ops: tuple[str, ...] = ()
    reason: str | None = None  # why it is not comparable (status "not_comparable")
    covers: tuple[str, ...] = ()  # a fused node's output: the torch modules it stands for
    # a flagged value: the unmatched nodes feeding it by op, and whether its own node only
    # moves data (parity.layers.movers: then the error is born among those nodes)
    feeding: tuple[tuple[str, int], ...] = ()
    moves_data: bool = False

    def to_json(self) -> dict[str, Any]:
        """Its JSON in the report's "layers" block (strict: null for non-finite numbers),
        derived from its fields (parity.files.derived_json; its form: _VALUE_FORM)."""
        data: dict[str, Any] = encode(self, exact=False)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], at: str = "layers.values[]") -> LayerValue:
        """What `to_json` wrote, every field checked (FieldError naming it by `at`)."""
        value: LayerValue = decode(cls, data, at)
        return value


def _feeding(raw: Any, at: str) -> tuple[tuple[str, int], ...]:
    return tuple((op, sj.integer(n, f"{at}.{op}")) for op, n in sj.obj(raw, at).items())


_VALUE_FORM = Form(
    # the report's names: "input_of" (the value it feeds), "not_comparable" (why not)
    keys={"feeds": "input_of", "reason": "not_comparable"},
    encoders={
        "dtype": lambda v, exact: v or None,  # "": float32, written null
        "feeding": lambda v, exact: {op: int(n) for op, n in v},
    },
    decoders={"feeding": _feeding},
    # a report written before a figure existed lacks it: not measured
    absent={
        **dict.fromkeys(("torch_module", "torch_node", "max_abs", "max_rel", "scale")),
        **dict.fromkeys(("error_ratio", "jump", "cosine")),
        "shape": (),
    },
)
register(LayerValue, _VALUE_FORM)


class Outcome(StrEnum):
    """What re-running a flagged value's node alone on the reference's inputs said."""

    BORN = "born"  # the error reappears from exact inputs: it is made here
    CARRIED = "carried"  # the node alone agrees: the error was passed on, not made
    UNCONFIRMED = "unconfirmed"  # could not be run alone (inputs not all matched, ...)
    # every value after it agrees with torch again: the pairing, not the export, is wrong
    MATCHING_ERROR = "matching_error"


@dataclass(frozen=True)
class Confirmation:
    """One value the criterion flagged, re-run alone (parity.layers.birth).

    `max_abs` / `error_ratio` are the node's error alone, fed with the reference's values of
    its inputs; `nodes` how many ONNX nodes that took; `reason` why it could not be run."""

    order: int
    input_set: int
    onnx_value: str
    onnx_node: str
    onnx_op: str
    torch_module: str | None
    outcome: str
    max_abs: float | None = None
    error_ratio: float | None = None
    nodes: int = 0
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "input_set": self.input_set,
            "onnx_value": self.onnx_value,
            "onnx_node": self.onnx_node,
            "onnx_op": self.onnx_op,
            "torch_module": self.torch_module,
            "outcome": str(self.outcome),
            "alone": self.alone_json(),
            "nodes": self.nodes,
            "reason": self.reason,
        }

    def alone_json(self) -> dict[str, Any] | None:
        if self.outcome in (Outcome.UNCONFIRMED, Outcome.MATCHING_ERROR):
            return None
        return {
            "max_abs": finite_or_none(self.max_abs),
            "error_ratio": finite_or_none(self.error_ratio),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Confirmation:
        alone = data.get("alone") or {}
        return cls(
            order=int(data["order"]),
            input_set=int(data["input_set"]),
            onnx_value=str(data["onnx_value"]),
            onnx_node=str(data.get("onnx_node", "")),
            onnx_op=str(data.get("onnx_op", "")),
            torch_module=_opt_str(data.get("torch_module")),
            outcome=str(data["outcome"]),
            max_abs=_opt_float(alone.get("max_abs")),
            error_ratio=_opt_float(alone.get("error_ratio")),
            nodes=int(data.get("nodes") or 0),
            reason=_opt_str(data.get("reason")),
        )


@dataclass(frozen=True)
class KeptValue:
    """Both sides' arrays of one value, kept so it can be inspected like an output."""

    order: int
    input_set: int
    onnx_value: str
    ref: np.ndarray
    onnx: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.ref.nbytes + self.onnx.nbytes)


register(KeptValue, Form(skip=frozenset({"ref", "onnx"})))  # arrays: a saved run's members


@analysis_result("layers")
@dataclass(frozen=True)
class LayersResult:
    """Localisation of one run. `values` are in (order, input_set) order.

    `matching` says how values were paired (e.g. "fx names" or "module boundaries");
    `threshold` and `min_jump` are the criterion's numbers, for plots; `notes` say in words
    what was and was not compared (never an empty silence).
    """

    criterion: str
    matching: str
    matched: int
    unmatched_onnx: int
    unmatched_torch: int
    first_divergence: LayerValue | None
    values: tuple[LayerValue, ...]
    notes: tuple[str, ...] = ()
    threshold: float | None = None
    min_jump: float | None = None
    kept: tuple[KeptValue, ...] = field(default=(), compare=False)
    # what a lower-precision candidate should keep in higher precision, as plain JSON
    # (parity.layers.qdq, parity.layers.fp16): keys in FINDINGS, merged into to_json()
    findings: Mapping[str, Any] = field(default_factory=dict)
    # flagged values re-run alone, in (order, input_set) order (parity.layers.birth)
    confirmations: tuple[Confirmation, ...] = ()
    repro: Any = field(default=None, compare=False)  # parity.layers.birth.ReproCase

    def confirmation_of(self, v: LayerValue | None) -> Confirmation | None:
        if v is None:
            return None
        for c in self.confirmations:
            if (c.order, c.input_set, c.onnx_value) == (v.order, v.input_set, v.onnx_value):
                return c
        return None

    def with_outcome(self, outcome: str) -> tuple[Confirmation, ...]:
        return tuple(c for c in self.confirmations if c.outcome == outcome)

    @property
    def input_sets(self) -> tuple[int, ...]:
        return tuple(sorted({v.input_set for v in self.values}))

    def for_set(self, input_set: int) -> tuple[LayerValue, ...]:
        return tuple(v for v in self.values if v.input_set == input_set)

    def kept_value(self, order: int, input_set: int) -> KeptValue | None:
        for k in self.kept:
            if k.order == order and k.input_set == input_set:
                return k
        return None

    @property
    def firsts(self) -> tuple[LayerValue, ...]:
        """Each input set's first divergence (an hf: run's: each step's), in input-set order;
        sets where nothing diverges have none."""
        found: dict[int, LayerValue] = {}
        for v in self.values:
            if v.input_set not in found and LayerStatus(v.status).born:
                found[v.input_set] = v
        return tuple(found[s] for s in sorted(found))

    def after_first(self, n: int = 5) -> tuple[LayerValue, ...]:
        """The next `n` values after the first divergence on its input set (for the terminal)."""
        first = self.first_divergence
        if first is None:
            return ()
        later = [v for v in self.for_set(first.input_set) if v.order > first.order]
        return tuple(later[:n])

    def to_json(self) -> dict[str, Any]:
        """The report's "layers" block (strict JSON: null for non-finite numbers)."""
        first = self.first_divergence
        return {
            "criterion": self.criterion,
            "matching": self.matching,
            "matched": self.matched,
            "unmatched_onnx": self.unmatched_onnx,
            "unmatched_torch": self.unmatched_torch,
            "threshold": finite_or_none(self.threshold),
            "min_jump": finite_or_none(self.min_jump),
            "first_divergence": None if first is None else self._first_json(first),
            "first_divergence_by_input_set": [self._first_json(v) for v in self.firsts],
            "carried": [c.to_json() for c in self.with_outcome(Outcome.CARRIED)],
            "unconfirmed": [c.to_json() for c in self.with_outcome(Outcome.UNCONFIRMED)],
            "matching_errors": [c.to_json() for c in self.with_outcome(Outcome.MATCHING_ERROR)],
            "notes": list(self.notes),
            "values": [v.to_json() for v in self.values],
            **{k: v for k, v in self.findings.items() if k in FINDINGS},
        }

    def saved_json(self, put: ArrayPut, prefix: str) -> dict[str, Any]:
        """A saved run's layers (parity.results.by_name.OwnJson): the report's block and its
        kept arrays as members PREFIX/K/{ref,onnx}."""
        data = self.to_json()
        data["kept"] = [
            {
                "order": k.order,
                "input_set": k.input_set,
                "onnx_value": k.onnx_value,
                "ref": put(f"{prefix}/{i}/ref.npy", k.ref, f"layer value {k.onnx_value!r}"),
                "onnx": put(f"{prefix}/{i}/onnx.npy", k.onnx, f"layer value {k.onnx_value!r}"),
            }
            for i, k in enumerate(self.kept)
        ]
        return data

    @classmethod
    def from_saved_json(cls, raw: Any, get: ArrayGet, at: str) -> LayersResult:
        """A saved run's layers read back, its kept arrays from the members."""
        data = sj.obj(raw, at)
        kept = []
        for i, k in enumerate(sj.array(data.get("kept") or [], f"{at}.kept")):
            where = f"{at}.kept[{i}]"
            k = sj.obj(k, where)
            ref = get(sj.field(k, "ref", where), f"{where}.ref")
            onnx = get(sj.field(k, "onnx", where), f"{where}.onnx")
            kept.append(decode(KeptValue, k, where, ref=ref, onnx=onnx))
        return cls.from_json(data, kept=tuple(kept), at=at)

    def _first_json(self, first: LayerValue) -> dict[str, Any]:
        c = self.confirmation_of(first)
        return {
            **first.to_json(),
            "alone": None if c is None else c.alone_json(),
            "confirmation": None if c is None else str(c.outcome),
            "alone_nodes": None if c is None else c.nodes,
        }

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], kept: tuple[KeptValue, ...] = (), at: str = "layers"
    ) -> LayersResult:
        first = data.get("first_divergence")
        confirmations = [
            Confirmation.from_json(c)
            for key in ("carried", "unconfirmed", "matching_errors")
            for c in data.get(key) or ()
        ]
        if first is not None and first.get("confirmation") == Outcome.BORN:
            confirmations.append(
                Confirmation.from_json(
                    {**first, "outcome": Outcome.BORN, "nodes": first.get("alone_nodes")}
                )
            )
        confirmations.sort(key=lambda c: (c.order, c.input_set))
        return cls(
            criterion=str(data["criterion"]),
            matching=str(data.get("matching", "")),
            matched=int(data["matched"]),
            unmatched_onnx=int(data["unmatched_onnx"]),
            unmatched_torch=int(data["unmatched_torch"]),
            first_divergence=None
            if first is None
            else LayerValue.from_json(first, f"{at}.first_divergence"),
            values=tuple(
                LayerValue.from_json(v, f"{at}.values[{i}]")
                for i, v in enumerate(data.get("values") or ())
            ),
            notes=tuple(str(n) for n in data.get("notes") or ()),
            threshold=_opt_float(data.get("threshold")),
            min_jump=_opt_float(data.get("min_jump")),
            kept=kept,
            findings={k: data[k] for k in FINDINGS if k in data},
            confirmations=tuple(confirmations),
        )


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


def _opt_str(x: Any) -> str | None:
    return None if x is None else str(x)
