"""One row per (input set, output): what every table shows of a comparison, built once.

The terminal table, the JSON report, the HTML report and the dashboard's Overview and
Tolerances pages all render these rows, in :data:`COLUMNS` order, so a column means the same
thing (and reads the same) wherever it appears. Numbers stay numbers here; text comes from
parity.text, status words from parity.labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from parity.labels import StatusStyle, badness_of, status_label
from parity.results import OutputComparison, Status, ValidationRun
from parity.text import number_text, percent_text, shape_text

__all__ = [
    "COLUMNS",
    "Column",
    "ComparisonRow",
    "comparison_rows",
    "merge",
    "output_rows",
    "row_badness",
    "worst_row",
]


@dataclass(frozen=True)
class Column:
    """A table column: its key (a ComparisonRow.cell key), its header, and the short header
    a terminal's narrow table uses."""

    key: str
    header: str
    short: str = ""

    @property
    def short_header(self) -> str:
        return self.short or self.header


COLUMNS: tuple[Column, ...] = (
    Column("set", "set"),
    Column("output", "output"),
    Column("status", "status"),
    Column("shape", "shape ref / onnx", "shape"),
    Column("dtype", "dtype ref / onnx", "dtype"),
    Column("max_abs", "max abs"),
    Column("max_rel", "max rel"),
    Column("mismatch", "mismatched"),
    Column("nonfinite", "NaN / Inf", "nan/inf"),
    Column("tolerance", "atol / rtol"),
    Column("min_atol", "min atol to pass", "min atol"),
    Column("message", "message"),
)
"""The one column order: where a table leaves a column out, the rest keep this order."""

_NUMBERS = {  # column key -> the ComparisonRow field a dataframe shows as a number
    "set": "input_set",
    "max_abs": "max_abs",
    "max_rel": "max_rel",
    "mismatch": "mismatch_fraction",
    "nonfinite": "n_nonfinite",
    "min_atol": "min_atol_to_pass",
}


# the JSON report's ``outputs[]`` keys of a row, in the contract's order (docs/cli.md): every
# field but `n_judged`, `can_rejudge` (not in the report) and `intended` (the report's own
# top-level `intended` list says it); the report adds "where" and "noise" after them
REPORT_KEYS = (
    "candidate", "input_set", "name", "status", "ref_shape", "onnx_shape", "ref_dtype",
    "onnx_dtype", "n_elements", "n_excluded", "max_abs", "max_rel", "mean_abs", "rms", "p99_abs",
    "n_mismatch", "mismatch_fraction", "n_nan_mismatch", "n_inf_mismatch", "worst_index",
    "ref_at_worst", "onnx_at_worst", "cosine", "snr_db", "atol", "rtol", "min_atol_to_pass",
    "message",
)  # fmt: skip


@dataclass(frozen=True)
class ComparisonRow:
    """What a table shows of one comparison (``input_set`` None: merged over every set).

    Statistics are None where undefined or not computed (shape, dtype or missing failures).
    """

    input_set: int | None
    name: str
    status: Status
    ref_shape: tuple[int, ...] | None
    onnx_shape: tuple[int, ...] | None
    ref_dtype: str | None
    onnx_dtype: str | None
    n_elements: int
    n_excluded: int
    n_judged: int
    n_mismatch: int | None
    mismatch_fraction: float | None
    max_abs: float | None
    max_rel: float | None
    mean_abs: float | None
    rms: float | None
    p99_abs: float | None
    n_nan_mismatch: int | None
    n_inf_mismatch: int | None
    worst_index: tuple[int, ...] | None
    ref_at_worst: float | None
    onnx_at_worst: float | None
    cosine: float | None
    snr_db: float | None
    atol: float
    rtol: float
    min_atol_to_pass: float | None
    can_rejudge: bool
    message: str
    candidate: int = 0  # which candidate of the run (ValidationRun.candidates)
    # the cause's label where the output fails by what the file was meant to do
    # (parity.show.cause_labels: "float16 rounding"), else ""
    intended: str = ""
    # it passes only at a tolerance looser than the default while a finding calls it a bug
    # (parity.show.cause_labels.hidden_bugs): red, never a green pass
    hidden_bug: bool = False

    @classmethod
    def from_comparison(
        cls, c: OutputComparison, intended: str = "", hidden_bug: bool = False
    ) -> ComparisonRow:
        s = c.stats
        return cls(
            input_set=c.input_set,
            name=c.name,
            status=c.status,
            ref_shape=c.ref_shape,
            onnx_shape=c.onnx_shape,
            ref_dtype=c.ref_dtype,
            onnx_dtype=c.onnx_dtype,
            n_elements=c.n_elements,
            n_excluded=c.n_excluded,
            n_judged=c.n_judged,
            n_mismatch=c.n_mismatch,
            mismatch_fraction=c.mismatch_fraction,
            max_abs=_float(s.max_abs) if s else None,
            max_rel=_float(s.max_rel) if s else None,
            mean_abs=_float(s.mean_abs) if s else None,
            rms=_float(s.rms) if s else None,
            p99_abs=_float(s.p99_abs) if s else None,
            n_nan_mismatch=s.n_nan_mismatch if s else None,
            n_inf_mismatch=s.n_inf_mismatch if s else None,
            worst_index=tuple(s.worst_index) if s and s.worst_index is not None else None,
            ref_at_worst=_float(s.ref_at_worst) if s else None,
            onnx_at_worst=_float(s.onnx_at_worst) if s else None,
            cosine=_float(s.cosine) if s else None,
            snr_db=_float(s.snr_db) if s else None,
            atol=c.tolerance.atol,
            rtol=c.tolerance.rtol,
            min_atol_to_pass=c.min_atol_to_pass,
            can_rejudge=c.can_rejudge,
            message=c.message,
            candidate=c.candidate,
            intended=intended,
            hidden_bug=hidden_bug,
        )

    # ------------------------------------------------------------------ derived values

    @property
    def shape_ok(self) -> bool:
        return self.ref_shape == self.onnx_shape

    @property
    def dtype_ok(self) -> bool:
        return self.ref_dtype == self.onnx_dtype

    @property
    def n_nonfinite(self) -> int | None:
        """One-sided NaN or Inf elements (None: not judged element by element)."""
        if self.n_nan_mismatch is None or self.n_inf_mismatch is None:
            return None
        return self.n_nan_mismatch + self.n_inf_mismatch

    # ------------------------------------------------------------------ cells as text

    def shape_text(self) -> str:
        """``(2, 3)``, or ``(2, 3) vs (2, 4)`` when the two sides differ."""
        if self.shape_ok:
            return shape_text(self.ref_shape)
        return f"{shape_text(self.ref_shape)} vs {shape_text(self.onnx_shape)}"

    def dtype_text(self) -> str:
        """``float32``, or ``float32 vs float16`` when the two sides differ."""
        if self.dtype_ok:
            return self.ref_dtype or "-"
        return f"{self.ref_dtype or '-'} vs {self.onnx_dtype or '-'}"

    def mismatch_text(self) -> str:
        """``3 / 1,000 (0.3%)``; '-' when not judged element by element."""
        if self.n_mismatch is None:
            return "-"
        return f"{self.n_mismatch:,} / {self.n_judged:,} ({percent_text(self.mismatch_fraction)})"

    def nonfinite_text(self) -> str:
        """``NaN / Inf`` one-sided counts, '-' when there are none (or nothing judged)."""
        if not self.n_nonfinite:
            return "-"
        return f"{self.n_nan_mismatch} / {self.n_inf_mismatch}"

    def tolerance_text(self) -> str:
        return f"{number_text(self.atol)} / {number_text(self.rtol)}"

    def cell(self, key: str, style: StatusStyle = "words") -> str:
        """The text of one :data:`COLUMNS` cell (the status in ``style``)."""
        match key:
            case "set":
                return "all" if self.input_set is None else str(self.input_set)
            case "output":
                return self.name
            case "status":
                if self.hidden_bug and self.status.passed and style != "terminal":
                    from parity.show.cause_labels import HIDDEN_BUG_MARKED as marked

                    return {"marked": marked, "mark": "✗"}.get(style, marked.removeprefix("✗ "))
                return status_label(self.status, style, self.intended)
            case "shape":
                return self.shape_text()
            case "dtype":
                return self.dtype_text()
            case "max_abs":
                return number_text(self.max_abs)
            case "max_rel":
                return number_text(self.max_rel)
            case "mismatch":
                return self.mismatch_text()
            case "nonfinite":
                return self.nonfinite_text()
            case "tolerance":
                return self.tolerance_text()
            case "min_atol":
                return number_text(self.min_atol_to_pass)
            case "message":
                return self.message
        raise KeyError(key)

    def value(self, key: str, style: StatusStyle = "marked") -> object:
        """One :data:`COLUMNS` cell for a dataframe: numbers stay numbers (they sort and take
        a number format) — the set index, max abs / rel, the mismatch *fraction*, the NaN/Inf
        count, min atol; the rest is :meth:`cell`'s text."""
        if key in _NUMBERS:
            return getattr(self, _NUMBERS[key])
        return self.cell(key, style)


def comparison_rows(run: ValidationRun) -> tuple[ComparisonRow, ...]:
    """One row per comparison, in the run's order (row k is ``run.outputs[k]``), a failure
    named by its cause where it is intended (parity.show.cause_labels)."""
    from parity.show.cause_labels import hidden_bugs, intended_outputs

    intended = intended_outputs(run)
    hidden = hidden_bugs(run)
    return tuple(
        ComparisonRow.from_comparison(
            c, intended.get((c.candidate, c.name), ""), (c.candidate, c.name) in hidden
        )
        for c in run.outputs
    )


def output_rows(run: ValidationRun) -> tuple[ComparisonRow, ...]:
    """One row per output, merged over its input sets (:func:`merge`), in output order."""
    rows = comparison_rows(run)
    return tuple(merge([r for r in rows if r.name == name]) for name in run.output_names)


def merge(rows: Sequence[ComparisonRow]) -> ComparisonRow:
    """One output over several input sets: its worst set's status, shapes, message and worst
    element; mismatches and elements summed; the largest errors; the atol that passes in
    every set (None unless every set can be re-judged)."""
    if not rows:
        raise ValueError("nothing to merge")
    worst = max(rows, key=row_badness)
    mins = [r.min_atol_to_pass for r in rows]
    fixable = all(r.can_rejudge for r in rows)
    judged = sum(r.n_judged for r in rows)
    mismatched = [r.n_mismatch for r in rows if r.n_mismatch is not None]
    n_mismatch = sum(mismatched) if mismatched else None
    return ComparisonRow(
        input_set=None,
        name=worst.name,
        status=worst.status,
        ref_shape=worst.ref_shape,
        onnx_shape=worst.onnx_shape,
        ref_dtype=worst.ref_dtype,
        onnx_dtype=worst.onnx_dtype,
        n_elements=sum(r.n_elements for r in rows),
        n_excluded=sum(r.n_excluded for r in rows),
        n_judged=judged,
        n_mismatch=n_mismatch,
        mismatch_fraction=None if n_mismatch is None else (n_mismatch / judged if judged else 0.0),
        max_abs=_largest(r.max_abs for r in rows),
        max_rel=_largest(r.max_rel for r in rows),
        mean_abs=None,  # not additive without the counts behind them
        rms=None,
        p99_abs=None,
        n_nan_mismatch=_total(r.n_nan_mismatch for r in rows),
        n_inf_mismatch=_total(r.n_inf_mismatch for r in rows),
        worst_index=worst.worst_index,
        ref_at_worst=worst.ref_at_worst,
        onnx_at_worst=worst.onnx_at_worst,
        cosine=None,
        snr_db=None,
        atol=worst.atol,
        rtol=worst.rtol,
        min_atol_to_pass=_largest(mins) if fixable and None not in mins else None,
        can_rejudge=fixable,
        message=worst.message,
        candidate=worst.candidate,
        intended=worst.intended,
        hidden_bug=any(r.hidden_bug for r in rows),
    )


def worst_row(rows: Iterable[ComparisonRow]) -> ComparisonRow | None:
    """The row to name first (failing before passing, then parity.labels.badness); the first
    of equals, as parity.labels.worst_first orders them."""
    return max(rows, key=row_badness, default=None)


def row_badness(r: ComparisonRow) -> tuple[bool, bool, float, float]:
    """parity.labels.badness of a row (a report's outputs[] entry decoded has no stats)."""
    return badness_of(r.status, r.mismatch_fraction, r.max_abs)


def _largest(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _total(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)
