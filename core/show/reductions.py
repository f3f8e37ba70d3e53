"""Views of one output's disagreement, small enough to draw: slices, pooling, bins, samples.

Everything here is pure numpy and works on bounded chunks, so a 4096x4096 output (or a
much larger one) gives every view in well under a second or two and never sends raw
tensors anywhere: the dashboard and the HTML report draw only what these functions return.

Error conventions (the pass rule's, see parity.tolerances): error = onnx - ref in float64.
Equal values, NaN on both sides, and equal-signed Inf on both sides count as zero error.
A NaN or Inf on one side only is a mismatch at any tolerance: it is given an infinite
|error| (+inf, or -inf for a signed error pointing down) so it always ranks as the worst
and is never hidden by pooling. Relative error is |error| / |ref|, undefined (NaN) where
ref == 0 (the same elements `max_rel` leaves out).

Exclusion masks (`exclude`, bool broadcastable to the output, True = not judged, e.g.
padding an attention mask never attends) make every view show what the verdict judged:
excluded elements are blank (NaN) in error slices, and left out of histograms, worst
elements and samples, which count them apart (`n_excluded`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from parity.judge.chunks import flat_chunks
from parity.judge.ratio import element_errors
from parity.text import axis_text, number_pair_text
from parity.tolerances import Tolerance

ErrorKind = Literal["signed", "abs", "rel"]
ValueKind = Literal["signed", "abs", "rel", "ratio", "fails", "ref", "onnx"]
JUDGED_KINDS = ("ratio", "fails")
"""Views that need a tolerance: error ÷ allowed error (parity.judge.ratio), and the same for the
failing elements only (passing ones blank)."""
ERROR_KINDS: tuple[ErrorKind, ...] = ("signed", "abs", "rel")

DEFAULT_MAX_CELLS = 256
"""Largest side of a drawn heatmap: 256x256 cells, each sent as four float32 (its colour, and
its value, reference and ONNX value for the hover), is ~1.4 MB of figure JSON."""
PANEL_MAX_CELLS = 160
"""Largest side of each of the three side-by-side panels (~230 px wide each at 1280 px): the
three together stay near the size of one heatmap."""

CHUNK_ELEMENTS = 1 << 20
"""Elements handled at once by the chunked passes (bounded extra memory, ~8 MB/array)."""


# --------------------------------------------------------------------------- element errors


def error_values(ref: np.ndarray, onnx: np.ndarray, kind: ValueKind = "abs") -> np.ndarray:
    """The per-element error of two same-shape arrays as float64 (conventions: module doc)."""
    r = np.asarray(ref, dtype=np.float64)
    o = np.asarray(onnx, dtype=np.float64)
    if kind == "ref":
        return r.copy()
    if kind == "onnx":
        return o.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        d = o - r
        equal = (r == o) | (np.isnan(r) & np.isnan(o))
        d[equal] = 0.0
        bad = ~np.isfinite(d)
        if bad.any():
            # one side non-finite: keep the sign where it means something, else +inf
            d[bad] = np.where(np.isneginf(d[bad]), -np.inf, np.inf)
        if kind == "signed":
            return d
        a = np.abs(d)
        if kind == "abs":
            return a
        if kind == "rel":
            out = np.full_like(a, np.nan)
            nz = r != 0
            np.divide(a, np.abs(r), out=out, where=nz)
            out[nz & ~np.isfinite(r)] = np.where(a[nz & ~np.isfinite(r)] == 0, 0.0, np.inf)
            return out
    raise ValueError(
        f"unknown error kind {kind!r}; expected one of {ERROR_KINDS + ('ref', 'onnx')}"
    )


# --------------------------------------------------------------------------- slices


@dataclass(frozen=True)
class SliceSpec:
    """Which 2-D slice of an N-d array to show.

    `index` holds one index per axis of the (at least 2-d, see `as_2d_shape`) array; the
    entries at `row_axis` and `col_axis` are ignored.
    """

    row_axis: int
    col_axis: int
    index: tuple[int, ...]

    def describe(self, shape: Sequence[int]) -> str:
        """Numpy-style text of the slice, e.g. ``[3, :, :, 0]`` (rows = axis 1, cols = axis 2)."""
        parts = [
            ":" if ax in (self.row_axis, self.col_axis) else str(i)
            for ax, i in enumerate(self.index)
        ]
        return "[" + ", ".join(parts) + "]"


def as_2d_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Shape with leading 1-axes added so a scalar or a vector can be shown as a 2-D slice."""
    shape = tuple(int(d) for d in shape)
    return (1,) * max(0, 2 - len(shape)) + shape


def axis_titles(shape: Sequence[int], names: Sequence[str | None] | None = None) -> tuple[str, ...]:
    """A title per axis of ``as_2d_shape(shape)`` (parity.text.axis_text): the axis number and
    size, and its ONNX dim name when `names` (one per axis of `shape`) gives one; '' for the
    leading axes as_2d_shape adds."""
    shape = tuple(int(d) for d in shape)
    pad = len(as_2d_shape(shape)) - len(shape)
    names = tuple(names) if names is not None and len(names) == len(shape) else (None,) * len(shape)
    return ("",) * pad + tuple(
        axis_text(a, size, name) for a, (size, name) in enumerate(zip(shape, names, strict=True))
    )


def default_slice(shape: Sequence[int], *, at: Sequence[int] | None = None) -> SliceSpec:
    """The last two axes, through the element `at` (e.g. the worst element) when given."""
    full = as_2d_shape(shape)
    nd = len(full)
    index = [0] * nd
    if at is not None:
        at_full = (0,) * (nd - len(at)) + tuple(int(i) for i in at)
        index = [min(max(int(i), 0), max(d - 1, 0)) for i, d in zip(at_full, full, strict=True)]
    return SliceSpec(row_axis=nd - 2, col_axis=nd - 1, index=tuple(index))


def check_slice(spec: SliceSpec, shape: Sequence[int]) -> SliceSpec:
    """The spec made valid for `shape`: axes distinct and in range, indices clipped."""
    full = as_2d_shape(shape)
    nd = len(full)
    row, col = spec.row_axis % nd, spec.col_axis % nd
    if row == col:
        raise ValueError(f"row and column axis must differ, both are {row}")
    index = list(spec.index[:nd]) + [0] * max(0, nd - len(spec.index))
    index = [min(max(int(i), 0), max(d - 1, 0)) for i, d in zip(index, full, strict=True)]
    return SliceSpec(row_axis=row, col_axis=col, index=tuple(index))


def take_slice(array: np.ndarray, spec: SliceSpec) -> np.ndarray:
    """The 2-D slice (rows, cols) of `array` as a view where numpy allows it."""
    a = np.asarray(array)
    a = a.reshape(as_2d_shape(a.shape))
    spec = check_slice(spec, a.shape)
    key = tuple(
        slice(None) if ax in (spec.row_axis, spec.col_axis) else i
        for ax, i in enumerate(spec.index)
    )
    s = a[key]
    return s if spec.row_axis < spec.col_axis else s.T


# --------------------------------------------------------------------------- pooling


@dataclass(frozen=True)
class SliceView:
    """A 2-D slice reduced for drawing by block max pooling.

    values[i, j] is the element of largest magnitude (sign kept) in rows
    [i*row_factor, (i+1)*row_factor) and cols [j*col_factor, (j+1)*col_factor) of the
    slice; a factor of 1 means every element is drawn.
    """

    values: np.ndarray  # float64, shape (ceil(rows/row_factor), ceil(cols/col_factor))
    row_factor: int
    col_factor: int
    slice_shape: tuple[int, int]
    kind: ValueKind
    spec: SliceSpec
    n_nonfinite: int  # +-inf cells (one-sided NaN/Inf mismatches) among `values`
    n_excluded: int = 0  # elements of the slice not judged (blank in an error view)
    shape: tuple[int, ...] = ()  # the output's own shape (before as_2d_shape)
    ref_values: np.ndarray | None = None  # per cell: the reference at the element it shows
    onnx_values: np.ndarray | None = None  # per cell: the ONNX value at that element

    def axis_titles(self, names: Sequence[str | None] | None = None) -> tuple[str, str]:
        """(columns, rows) titles: ``height (axis 2, size 32)`` with the ONNX dim names
        (`names`, one per axis of the output), ``axis 2 (size 32)`` without; '' for an axis
        that as_2d_shape added to show a vector or a scalar."""
        titles = axis_titles(self.shape or self.spec.index, names)
        return titles[self.spec.col_axis], titles[self.spec.row_axis]

    @property
    def pooled(self) -> bool:
        return self.row_factor > 1 or self.col_factor > 1

    def pooling_text(self) -> str:
        text = "every element drawn"
        if self.pooled:
            text = (
                f"block max-pooled {self.row_factor}x{self.col_factor} "
                f"({self.slice_shape[0]}x{self.slice_shape[1]} -> "
                f"{self.values.shape[0]}x{self.values.shape[1]} cells)"
            )
        if self.n_excluded:
            text += f"; {self.n_excluded:,} excluded element(s) (not judged) left blank"
        return text


def pool_factors(rows: int, cols: int, *, max_cells: int = DEFAULT_MAX_CELLS) -> tuple[int, int]:
    """Smallest integer block sizes that bring each side to at most `max_cells` cells."""
    return max(1, math.ceil(rows / max_cells)), max(1, math.ceil(cols / max_cells))


def block_max_pool(values: np.ndarray, row_factor: int, col_factor: int) -> np.ndarray:
    """Block pooling keeping, per block, the element of largest magnitude with its sign.

    NaN is ignored unless a whole block is NaN; the trailing partial blocks are pooled too.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"block_max_pool needs a 2-D array, got shape {v.shape}")
    if row_factor == 1 and col_factor == 1:
        return v.copy()
    rows, cols = v.shape
    nr, nc = math.ceil(rows / row_factor), math.ceil(cols / col_factor)
    out = np.empty((nr, nc), dtype=np.float64)
    band_blocks = max(1, CHUNK_ELEMENTS // max(1, row_factor * cols))
    for b0 in range(0, nr, band_blocks):
        b1 = min(nr, b0 + band_blocks)
        out[b0:b1] = _pool_band(v[b0 * row_factor : b1 * row_factor], row_factor, col_factor)
    return out


def _blocks(band: np.ndarray, rf: int, cf: int) -> np.ndarray:
    rows, cols = band.shape
    nr, nc = math.ceil(rows / rf), math.ceil(cols / cf)
    padded = np.full((nr * rf, nc * cf), np.nan)
    padded[:rows, :cols] = band
    return padded.reshape(nr, rf, nc, cf).transpose(0, 2, 1, 3).reshape(nr, nc, rf * cf)


def _pick(band: np.ndarray, rf: int, cf: int) -> np.ndarray:
    """Per block, the position (in the block) of its element of largest magnitude."""
    mag = np.abs(_blocks(band, rf, cf))
    mag[np.isnan(mag)] = -1.0
    return np.argmax(mag, axis=-1)


def _take(band: np.ndarray, rf: int, cf: int, pick: np.ndarray) -> np.ndarray:
    return np.take_along_axis(_blocks(band, rf, cf), pick[..., None], axis=-1)[..., 0]


def _pool_band(band: np.ndarray, rf: int, cf: int) -> np.ndarray:
    return _take(band, rf, cf, _pick(band, rf, cf))


def slice_view(
    ref: np.ndarray,
    onnx: np.ndarray,
    spec: SliceSpec,
    *,
    kind: ValueKind = "abs",
    max_cells: int = DEFAULT_MAX_CELLS,
    exclude: np.ndarray | None = None,
    tolerance: Tolerance | None = None,
) -> SliceView:
    """One slice of an error (or of ref / onnx values), pooled to at most max_cells a side.

    The error is computed band by band on the slice only, so the cost is the slice's
    size, not the output's, and extra memory stays bounded. Excluded elements are NaN in
    an error view (blank, and never the max of a pooled block that has judged elements).
    ``ratio`` and ``fails`` views need the `tolerance`; ``fails`` leaves every element that
    passes blank (NaN), so a pooled cell shows the worst failure in its block, if any.
    """
    if kind in JUDGED_KINDS and tolerance is None:
        raise ValueError(f"a {kind!r} view needs the tolerance")
    r2 = take_slice(ref, spec)
    o2 = take_slice(onnx, spec)
    if r2.shape != o2.shape:
        raise ValueError(f"reference slice {r2.shape} and ONNX slice {o2.shape} differ")
    x2 = None if exclude is None else take_slice(_full_mask(exclude, np.shape(ref)), spec)
    n_excluded = 0 if x2 is None else int(np.count_nonzero(x2))
    if not n_excluded or kind in ("ref", "onnx"):
        x2 = None
    spec = check_slice(spec, as_2d_shape(np.shape(ref)))
    rows, cols = r2.shape
    rf, cf = pool_factors(rows, cols, max_cells=max_cells)
    nr = math.ceil(rows / rf) if rows else 0
    out = np.empty((nr, math.ceil(cols / cf) if cols else 0), dtype=np.float64)
    ref_at, onnx_at = np.empty_like(out), np.empty_like(out)
    band_blocks = max(1, CHUNK_ELEMENTS // max(1, rf * cols))
    for b0 in range(0, nr, band_blocks):
        b1 = min(nr, b0 + band_blocks)
        rows_sl = slice(b0 * rf, b1 * rf)
        if kind in JUDGED_KINDS:
            assert tolerance is not None  # a judged view without one raised above
            _, err, fails = element_errors(r2[rows_sl], o2[rows_sl], tolerance)
            if kind == "fails":
                err[~fails] = np.nan
        else:
            err = error_values(r2[rows_sl], o2[rows_sl], kind)
        if x2 is not None:
            err[x2[rows_sl]] = np.nan
        r_band = np.asarray(r2[rows_sl], dtype=np.float64)
        o_band = np.asarray(o2[rows_sl], dtype=np.float64)
        if rf > 1 or cf > 1:  # each cell shows its block's worst element, with both values
            pick = _pick(err, rf, cf)
            out[b0:b1] = _take(err, rf, cf, pick)
            ref_at[b0:b1], onnx_at[b0:b1] = _take(r_band, rf, cf, pick), _take(o_band, rf, cf, pick)
        else:
            out[b0:b1], ref_at[b0:b1], onnx_at[b0:b1] = err, r_band, o_band
    return SliceView(
        values=out,
        row_factor=rf,
        col_factor=cf,
        slice_shape=(rows, cols),
        kind=kind,
        spec=spec,
        n_nonfinite=int(np.isinf(out).sum()),
        n_excluded=n_excluded,
        shape=tuple(int(d) for d in np.shape(ref)),
        ref_values=ref_at,
        onnx_values=onnx_at,
    )


def _full_mask(exclude: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The exclusion mask at the output's shape (a read-only broadcast view, no copy)."""
    return np.broadcast_to(np.asarray(exclude, dtype=bool), shape)


# --------------------------------------------------------------------------- histogram


@dataclass(frozen=True)
class ErrorHistogram:
    """|error| on log-spaced bins, plus what log bins cannot hold (zeros, non-finite)."""

    edges: np.ndarray  # float64, len(counts) + 1, log-spaced, > 0
    counts: np.ndarray  # int64 per bin
    n_zero: int  # elements with error exactly 0
    n_nonfinite: int  # one-sided NaN/Inf mismatches
    n_total: int  # elements counted (judged ones only)
    max_abs: float | None  # largest finite |error|; None when there is none
    n_excluded: int = 0  # elements not judged, left out of every count

    @property
    def cumulative(self) -> np.ndarray:
        """Fraction of all elements with |error| <= each bin's right edge."""
        if self.n_total == 0:
            return np.zeros(len(self.counts))
        return (self.n_zero + np.cumsum(self.counts)) / self.n_total

    @property
    def centers(self) -> np.ndarray:
        return np.sqrt(self.edges[:-1] * self.edges[1:])


def _judged_chunks(ref: np.ndarray, onnx: np.ndarray, exclude: np.ndarray | None, chunk: int):
    """(flat positions, ref, onnx) of the judged elements, chunk by chunk."""
    flat_exclude = None
    if exclude is not None:
        flat_exclude = _full_mask(exclude, np.shape(ref)).reshape(-1)
    for start, r, o in flat_chunks(ref, onnx, chunk):
        pos = np.arange(start, start + r.size)
        if flat_exclude is not None:
            keep = ~flat_exclude[start : start + r.size]
            pos, r, o = pos[keep], r[keep], o[keep]
        yield pos, r, o


def _count_excluded(exclude: np.ndarray | None, shape: tuple[int, ...]) -> int:
    return 0 if exclude is None else int(np.count_nonzero(_full_mask(exclude, shape)))


def error_histogram(
    ref: np.ndarray,
    onnx: np.ndarray,
    *,
    bins_per_decade: int = 10,
    max_bins: int = 120,
    chunk_elements: int = CHUNK_ELEMENTS,
    exclude: np.ndarray | None = None,
) -> ErrorHistogram:
    """Histogram of |onnx - ref| on log-spaced bins, in two chunked passes (judged only)."""
    if np.shape(ref) != np.shape(onnx):
        raise ValueError(f"shapes differ: {np.shape(ref)} vs {np.shape(onnx)}")
    n_excluded = _count_excluded(exclude, np.shape(ref))
    lo, hi = math.inf, 0.0
    n_zero = n_bad = n_total = 0
    for _, r, o in _judged_chunks(ref, onnx, exclude, chunk_elements):
        a = error_values(r, o, "abs")
        n_total += a.size
        finite = np.isfinite(a)
        n_bad += int(a.size - finite.sum())
        pos = a[finite & (a > 0)]
        n_zero += int((a == 0).sum())
        if pos.size:
            lo, hi = min(lo, float(pos.min())), max(hi, float(pos.max()))
    if hi == 0.0:
        edges = np.array([1e-12, 1e-11])
        return ErrorHistogram(
            edges, np.zeros(1, np.int64), n_zero, n_bad, n_total, None, n_excluded
        )
    e_lo = math.floor(math.log10(lo) * bins_per_decade) / bins_per_decade
    e_hi = math.ceil(math.log10(hi) * bins_per_decade) / bins_per_decade
    if e_hi <= e_lo:
        e_hi = e_lo + 1.0 / bins_per_decade
    n_bins = int(min(max_bins, max(1, round((e_hi - e_lo) * bins_per_decade))))
    counts = np.zeros(n_bins, dtype=np.int64)
    for _, r, o in _judged_chunks(ref, onnx, exclude, chunk_elements):
        a = error_values(r, o, "abs")
        pos = a[np.isfinite(a) & (a > 0)]
        if pos.size:
            c, _ = np.histogram(np.log10(pos), bins=n_bins, range=(e_lo, e_hi))
            counts += c
    edges = 10.0 ** np.linspace(e_lo, e_hi, n_bins + 1)
    return ErrorHistogram(edges, counts, n_zero, n_bad, n_total, hi, n_excluded)


# --------------------------------------------------------------------------- worst elements


@dataclass(frozen=True)
class WorstElement:
    index: tuple[int, ...]
    ref: float
    onnx: float
    abs_error: float  # inf for a one-sided NaN/Inf
    rel_error: float | None  # None where ref == 0


@dataclass(frozen=True)
class WorstElements:
    rows: tuple[WorstElement, ...]
    n_total: int  # elements ranked (judged ones only)
    n_excluded: int = 0  # elements not judged, never ranked

    def to_records(self) -> list[dict[str, object]]:
        """One plain dict per row, for a table (index as text like numpy prints it; ref and
        onnx as text with the digits it takes to tell them apart, parity.text)."""
        records: list[dict[str, object]] = []
        for w in self.rows:
            ref, onnx = number_pair_text(w.ref, w.onnx)
            records.append(
                {
                    "index": "[" + ", ".join(str(i) for i in w.index) + "]",
                    "ref": ref,
                    "onnx": onnx,
                    "abs error": w.abs_error,
                    "rel error": w.rel_error,
                }
            )
        return records


def _top_k(a: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest values of `a`, ties at the k-th value resolved to the lowest
    positions (argpartition alone picks among ties in an order that differs between CPUs)."""
    if a.size <= k:
        return np.arange(a.size)
    if k <= 0:
        return np.arange(0)
    kth = np.partition(a, a.size - k)[a.size - k]  # the k-th largest value
    above = np.flatnonzero(a > kth)
    tied = np.flatnonzero(a == kth)[: k - above.size]
    return np.concatenate([above, tied])


def worst_elements(
    ref: np.ndarray,
    onnx: np.ndarray,
    *,
    k: int = 20,
    chunk_elements: int = CHUNK_ELEMENTS,
    exclude: np.ndarray | None = None,
) -> WorstElements:
    """The k judged elements of largest |error|, worst first (ties: lower flat index first)."""
    shape = np.shape(ref)
    if shape != np.shape(onnx):
        raise ValueError(f"shapes differ: {shape} vs {np.shape(onnx)}")
    n_excluded = _count_excluded(exclude, shape)
    cand_idx: list[np.ndarray] = []
    cand_err: list[np.ndarray] = []
    n_total = 0
    for pos, r, o in _judged_chunks(ref, onnx, exclude, chunk_elements):
        a = error_values(r, o, "abs")
        n_total += a.size
        top = _top_k(a, k)
        cand_idx.append(pos[top])
        cand_err.append(a[top])
    if not cand_idx or k <= 0:
        return WorstElements((), n_total, n_excluded)
    idx = np.concatenate(cand_idx)
    err = np.concatenate(cand_err)
    order = np.lexsort((idx, -err))[:k]
    r_flat = np.asarray(ref).reshape(-1)
    o_flat = np.asarray(onnx).reshape(-1)
    rows = []
    for flat in idx[order]:
        rv, ov = float(r_flat[flat]), float(o_flat[flat])
        ae = float(error_values(np.array([rv]), np.array([ov]), "abs")[0])
        rows.append(
            WorstElement(
                index=tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else (),
                ref=rv,
                onnx=ov,
                abs_error=ae,
                rel_error=None if rv == 0 else (ae / abs(rv) if math.isfinite(rv) else None),
            )
        )
    return WorstElements(tuple(rows), n_total, n_excluded)


# --------------------------------------------------------------------------- scatter sample


@dataclass(frozen=True)
class ScatterSample:
    """(ref, onnx) pairs to plot: every element when small, else a seeded random sample
    that always includes the worst elements. Pairs with a non-finite value are left out
    (a plot cannot place them) and counted."""

    ref: np.ndarray
    onnx: np.ndarray
    n_total: int
    n_nonfinite: int

    @property
    def sampled(self) -> bool:
        return len(self.ref) + self.n_nonfinite < self.n_total


def sample_pairs(
    ref: np.ndarray,
    onnx: np.ndarray,
    *,
    max_points: int = 5000,
    seed: int = 0,
    include: Sequence[Sequence[int]] = (),
    exclude: np.ndarray | None = None,
) -> ScatterSample:
    """Deterministic sample of judged element pairs (same arrays and seed -> same points)."""
    r = np.asarray(ref).reshape(-1)
    o = np.asarray(onnx).reshape(-1)
    if r.shape != o.shape:
        raise ValueError(f"shapes differ: {np.shape(ref)} vs {np.shape(onnx)}")
    if exclude is not None and _count_excluded(exclude, np.shape(ref)):
        keep = ~_full_mask(exclude, np.shape(ref)).reshape(-1)
        flat_include = [int(np.ravel_multi_index(tuple(i), np.shape(ref))) for i in include]
        r, o = r[keep], o[keep]
        position = np.cumsum(keep) - 1  # flat index -> index among judged elements
        include = [(int(position[f]),) for f in flat_include if keep[f]]
        return sample_pairs(r, o, max_points=max_points, seed=seed, include=include)
    n = r.size
    if n <= max_points:
        pick = np.arange(n)
    else:
        rng = np.random.default_rng(seed)
        pick = rng.choice(n, size=max_points, replace=False)
        if include:
            extra = [int(np.ravel_multi_index(tuple(i), np.shape(ref))) for i in include]
            pick = np.concatenate([pick, np.asarray(extra, dtype=pick.dtype)])
        pick = np.unique(pick)
    rv = r[pick].astype(np.float64)
    ov = o[pick].astype(np.float64)
    ok = np.isfinite(rv) & np.isfinite(ov)
    n_bad = int((~ok).sum())
    n_bad_total = n_bad if n <= max_points else _count_nonfinite_pairs(ref, onnx)
    return ScatterSample(rv[ok], ov[ok], n, n_bad_total)


def _count_nonfinite_pairs(ref: np.ndarray, onnx: np.ndarray) -> int:
    n = 0
    for _, r, o in flat_chunks(ref, onnx, CHUNK_ELEMENTS):
        if np.issubdtype(r.dtype, np.floating) or np.issubdtype(o.dtype, np.floating):
            n += int((~(np.isfinite(r) & np.isfinite(o))).sum())
    return n
