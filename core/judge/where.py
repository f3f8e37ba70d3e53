"""Where an output's mismatches are: a per-axis profile and one sentence computed from it.

For every axis of the output and every index along it, the profile holds how many judged
elements mismatch at the tolerance (and so the mismatch fraction) and the largest error there
(|error| and error ÷ allowed, parity.judge.ratio). From it each axis gets the indices where the
mismatches *concentrate* (the rule below, also in docs/cli.md), and the output a summary such
as ``all 248 mismatches lie at indices {0, 31} of axis 2 (height) or at indices {0, 31} of
axis 3 (width), in all 2 entries of axis 0 (batch)``.

The concentration rule, per axis (``f_i`` = mismatches / judged elements at index ``i``):
sort the indices by ``f_i``, largest first; the mismatches concentrate on the first ``j`` of
them for the smallest ``j`` with ``j <= n / 2`` (at most half the axis' ``n`` indices) such
that every other index ``k`` has ``f_k + 1 / t <= f_j / 4``, ``t`` being the mean number of
judged elements per index: the chosen indices stand out at least four times over every other
one, and the one extra mismatch per index keeps a few scattered mismatches from ever looking
concentrated. No such ``j``: the mismatches are spread along that axis (``concentrated`` is
empty). Axes of size 1 never concentrate.

Bounded memory, like parity.judge.compare_pass: one chunked pass over the output (pieces of about
``CHUNK_ELEMENTS``, read in place, so a memory-mapped saved run is never loaded whole), a
second one only to count how many mismatches the concentrated indices of several axes hold
together. The profile keeps four numbers per index; an axis longer than ``MAX_PROFILE_LEN`` is
profiled in equal bins of consecutive indices. Excluded elements (an exclusion mask) are
neither judged nor counted, as in the verdict.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from parity.judge.chunks import CHUNK_ELEMENTS, pieces
from parity.judge.noise_floor import is_rounding
from parity.judge.ratio import element_errors
from parity.results import OutputComparison, Status, ValidationRun
from parity.tolerances import Tolerance

__all__ = [
    "CHUNK_ELEMENTS",
    "CONTRAST",
    "MAX_PROFILE_LEN",
    "AxisProfile",
    "WhereProfile",
    "concentrated_entries",
    "peak_indices",
    "where_of",
    "where_profile",
]

MAX_PROFILE_LEN = 1 << 18  # entries per axis: 262,144 (a 256k vocabulary stays per token)
CONTRAST = 4.0  # concentrated indices stand out at least this many times over the rest
MAX_LISTED = 1024  # at most this many indices are called concentrated along one axis
TOO_FEW = 2 * int(CONTRAST)  # fewer mismatches than this, sharing no index: nothing to tell


@dataclass(frozen=True, eq=False)
class AxisProfile:
    """One axis: per entry (an index, or a bin of ``bin`` consecutive indices) the judged
    and mismatching element counts and the largest errors; and where mismatches concentrate."""

    axis: int
    name: str | None  # the ONNX dim name ("batch", "height"), None when fixed or unnamed
    size: int
    bin: int
    n_mismatch: np.ndarray  # int64 per entry
    n_judged: np.ndarray  # int64 per entry
    max_abs: np.ndarray  # float64 per entry (inf: a one-sided NaN/Inf; nan: nothing judged)
    max_ratio: np.ndarray  # float64 per entry: largest error ÷ allowed error
    concentrated: tuple[int, ...]  # indices along the axis (every index of a chosen bin)

    @property
    def fraction(self) -> np.ndarray:
        """Mismatch fraction per entry (nan where nothing is judged)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.n_judged > 0, self.n_mismatch / self.n_judged, np.nan)

    @property
    def label(self) -> str:
        """``axis 2 (height)``, or ``axis 1`` when the ONNX gives the dim no name."""
        return f"axis {self.axis}" + (f" ({self.name})" if self.name else "")


@dataclass(frozen=True, eq=False)
class WhereProfile:
    """Where one output's mismatches are, at one tolerance."""

    shape: tuple[int, ...]
    tolerance: Tolerance
    n_mismatch: int
    n_judged: int
    covered: int  # mismatches at a concentrated index of at least one axis
    axes: tuple[AxisProfile, ...]
    summary: str

    @property
    def pattern(self) -> tuple[object, ...]:
        """Per axis, where the mismatches are, comparable across input sets of other sizes:
        ``"edges"`` for an axis' first and last index, else its concentrated indices."""
        return tuple("edges" if _at_edges(a) else a.concentrated for a in self.axes)


# --------------------------------------------------------------------------- the rule


def concentrated_entries(n_mismatch: np.ndarray, n_judged: np.ndarray) -> list[int]:
    """Entries where the mismatches concentrate (the module's rule), ascending; [] if spread."""
    m = np.asarray(n_mismatch, dtype=np.float64)
    t = np.asarray(n_judged, dtype=np.float64)
    judged = np.flatnonzero(t > 0)
    n = judged.size
    if n < 2 or not m[judged].any():
        return []
    f = m[judged] / t[judged]
    order = np.lexsort((judged, -f))  # largest fraction first, then lower index
    g = (f + n / t[judged].sum())[order]  # f plus one mismatch at an index of average size
    rest_max = np.maximum.accumulate(g[::-1])[::-1]  # rest_max[j]: max g over order[j:]
    fs = f[order]
    for j in range(1, min(n // 2, MAX_LISTED) + 1):
        if fs[j - 1] <= 0:
            break
        if rest_max[j] * CONTRAST <= fs[j - 1]:
            return sorted(int(judged[i]) for i in order[:j])
    return []


# --------------------------------------------------------------------------- the pass


def where_profile(
    ref: np.ndarray,
    onnx: np.ndarray,
    tolerance: Tolerance,
    *,
    names: Sequence[str | None] | None = None,
    exclude: np.ndarray | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> WhereProfile:
    """The per-axis profile of two same-shape numeric arrays at `tolerance` (module doc)."""
    shape = tuple(int(d) for d in np.shape(ref))
    if shape != tuple(np.shape(onnx)):
        raise ValueError(f"shapes differ: {shape} vs {tuple(np.shape(onnx))}")
    names = tuple(names) if names is not None else (None,) * len(shape)
    if len(names) != len(shape):
        names = (None,) * len(shape)
    mask = None if exclude is None else np.broadcast_to(np.asarray(exclude, dtype=bool), shape)
    acc = [_AxisAcc(size) for size in shape]
    total_m = total_t = 0
    for key, s, lo in pieces(shape, chunk_elements):
        abs_err, ratio, fails = element_errors(ref[key], onnx[key], tolerance)
        judged = None if mask is None else ~mask[key]
        if judged is not None:
            fails = fails & judged
            abs_err = np.where(judged, abs_err, np.nan)
            ratio = np.where(judged, ratio, np.nan)
        total_m += int(np.count_nonzero(fails))
        total_t += int(fails.size if judged is None else np.count_nonzero(judged))
        for axis, a in enumerate(acc):
            if axis < s:  # one index of this axis in the whole piece
                a.add_scalar(key[axis], fails, judged, abs_err, ratio)
            else:
                a.add_vector(axis - s, lo if axis == s else 0, fails, judged, abs_err, ratio)
    axes = []
    for axis, a in enumerate(acc):
        entries = concentrated_entries(a.m, a.t) if a.size > 1 else []
        if not entries and a.size > 1 and total_m > 1:
            entries = _shared_entry(a.m, a.t)
        indices = _entry_indices(entries, a.bin, a.size)
        axes.append(
            AxisProfile(axis, names[axis], a.size, a.bin, a.m, a.t, a.max_abs, a.max_ratio, indices)
        )
    covered, in_block = _covered(ref, onnx, tolerance, mask, axes, total_m, chunk_elements)
    summary = _summary(tuple(axes), total_m, total_t, covered, in_block)
    return WhereProfile(shape, tolerance, total_m, total_t, covered, tuple(axes), summary)


class _AxisAcc:
    """Running per-entry counts and maxima of one axis."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.bin = max(1, math.ceil(size / MAX_PROFILE_LEN))
        n = math.ceil(size / self.bin) if size else 0
        self.m = np.zeros(n, dtype=np.int64)
        self.t = np.zeros(n, dtype=np.int64)
        self.max_abs = np.full(n, np.nan)
        self.max_ratio = np.full(n, np.nan)

    def add_scalar(self, index: int, fails, judged, abs_err, ratio) -> None:
        e = index // self.bin
        self.m[e] += int(np.count_nonzero(fails))
        self.t[e] += int(fails.size if judged is None else np.count_nonzero(judged))
        self.max_abs[e] = np.fmax(self.max_abs[e], _nanmax(abs_err, judged))
        self.max_ratio[e] = np.fmax(self.max_ratio[e], _nanmax(ratio, judged))

    def add_vector(self, piece_axis: int, start: int, fails, judged, abs_err, ratio) -> None:
        other = tuple(a for a in range(fails.ndim) if a != piece_axis)
        m = np.count_nonzero(fails, axis=other) if other else fails.astype(np.int64)
        if judged is None:
            per = fails.size // max(fails.shape[piece_axis], 1)
            t = np.full(fails.shape[piece_axis], per, dtype=np.int64)
        else:
            t = np.count_nonzero(judged, axis=other) if other else judged.astype(np.int64)
        amax, rmax = abs_err, ratio
        if other:
            reduce = np.max if judged is None else np.nanmax  # excluded elements are NaN
            with warnings.catch_warnings():  # an all-excluded index: NaN, as meant
                warnings.simplefilter("ignore", RuntimeWarning)
                amax, rmax = reduce(abs_err, axis=other), reduce(ratio, axis=other)
        index = np.arange(start, start + m.size)
        if self.bin == 1:
            sl = slice(start, start + m.size)
            self.m[sl] += m
            self.t[sl] += t
            self.max_abs[sl] = np.fmax(self.max_abs[sl], amax)
            self.max_ratio[sl] = np.fmax(self.max_ratio[sl], rmax)
            return
        e = index // self.bin
        np.add.at(self.m, e, m)
        np.add.at(self.t, e, t)
        np.fmax.at(self.max_abs, e, amax)
        np.fmax.at(self.max_ratio, e, rmax)


def _nanmax(a: np.ndarray, judged: np.ndarray | None) -> float:
    if judged is None:
        return float(np.max(a)) if a.size else math.nan
    return float(np.max(a[judged])) if judged.any() else math.nan


def _shared_entry(n_mismatch: np.ndarray, n_judged: np.ndarray) -> list[int]:
    """[j] when every mismatch lies at entry j of an axis where other entries were judged
    too: a fact, not a statistic, however few the mismatches are; else []."""
    hits = np.flatnonzero(n_mismatch)
    if hits.size == 1 and np.count_nonzero(n_judged) > 1:
        return [int(hits[0])]
    return []


def _entry_indices(entries: list[int], bin_size: int, size: int) -> tuple[int, ...]:
    if bin_size == 1:
        return tuple(entries)
    out: list[int] = []
    for e in entries:
        out.extend(range(e * bin_size, min(size, (e + 1) * bin_size)))
    return tuple(out)


def _covered(ref, onnx, tolerance, mask, axes, total_m, chunk) -> tuple[int, int]:
    """Mismatches at a concentrated index of at least one axis, and of every such axis."""
    chosen = [a for a in axes if a.concentrated]
    if not chosen or total_m == 0:
        return 0, 0
    if len(chosen) == 1:
        a = chosen[0]
        entries = sorted({i // a.bin for i in a.concentrated})
        n = int(a.n_mismatch[entries].sum())
        return n, n
    shape = tuple(a.size for a in axes)
    member = {}
    for a in chosen:
        flags = np.zeros(a.size, dtype=bool)
        flags[list(a.concentrated)] = True
        member[a.axis] = flags
    union = both = 0
    for key, s, _ in pieces(shape, chunk):
        _, _, fails = element_errors(ref[key], onnx[key], tolerance)
        if mask is not None:
            fails = fails & ~mask[key]
        anywhere = np.zeros(fails.shape, dtype=bool)
        every = np.ones(fails.shape, dtype=bool)
        for axis, flags in member.items():
            if axis < s:
                along = np.array(bool(flags[key[axis]]))
            else:
                view = [1] * fails.ndim
                part = flags[key[axis]] if axis == s else flags
                view[axis - s] = part.size
                along = part.reshape(view)
            anywhere = anywhere | along
            every = every & along
        union += int(np.count_nonzero(fails & anywhere))
        both += int(np.count_nonzero(fails & every))
    return union, both


# --------------------------------------------------------------------------- the words


def _indices_text(indices: Sequence[int]) -> str:
    """``index 3``, ``indices {0, 31}``, ``indices {0..9, 31}``; long lists shortened."""
    if len(indices) == 1:
        return f"index {indices[0]}"
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    parts = [str(a) if a == b else (f"{a}, {b}" if b == a + 1 else f"{a}..{b}") for a, b in runs]
    if len(parts) > 8:
        parts = [*parts[:6], "…", parts[-1]]
        return "indices {" + ", ".join(parts) + f"}} ({len(indices)} indices)"
    return "indices {" + ", ".join(parts) + "}"


def _summary(
    axes: tuple[AxisProfile, ...], n_mismatch: int, n_judged: int, covered: int, in_block: int
) -> str:
    if n_mismatch == 0:
        return "no element mismatches at this tolerance"
    if n_mismatch == 1:
        index = [int(np.argmax(a.n_mismatch)) * a.bin for a in axes]
        exact = all(a.bin == 1 for a in axes)
        return f"the one mismatch is at index {index}" if exact else "one element mismatches"
    count = f"{n_mismatch:,} mismatches"
    if n_mismatch == n_judged:
        return _peaks_text(axes, f"every judged element mismatches ({count})")
    chosen = [a for a in axes if a.concentrated]
    if not chosen:
        pct = 100.0 * n_mismatch / n_judged if n_judged else 0.0
        if n_mismatch < TOO_FEW:
            return (
                f"the {count} ({pct:.3g}% of the elements) are too few to tell whether they "
                "gather along any axis, and they share no index"
            )
        return _peaks_text(
            axes,
            f"the {count} ({pct:.3g}% of the elements) are spread over the output: "
            "no index along any axis gathers them",
        )
    share = f"all {count}"
    if covered != n_mismatch:
        share = f"{100.0 * covered / n_mismatch:.3g}% of the {count}"
    places = [f"{_indices_text(a.concentrated)} of {a.label}" for a in chosen]
    if len(chosen) > 1 and in_block == n_mismatch:  # where the axes' indices cross: a block
        text = f"all {count} lie where {' meet '.join(places)}"
    elif len(chosen) == 2 and all(_at_edges(a) for a in chosen):
        text = f"{share} lie {_border_text(chosen[0], chosen[1])}"
    else:
        places = [
            _edges_text(a) if _at_edges(a) else p for a, p in zip(chosen, places, strict=True)
        ]
        text = f"{share} lie at {' or at '.join(places)}"
    others = [a for a in axes if not a.concentrated and a.size > 1]
    everywhere = [a for a in others if bool(np.all(a.n_mismatch[a.n_judged > 0] > 0))]
    if everywhere and len(everywhere) == len(others) and len(others) > 1:
        text += ", in every entry of every other axis"
    elif everywhere:
        text += ", in every entry of " + " and ".join(a.label for a in everywhere)
    return _peaks_text(axes, text)


MAX_PEAKS = 8  # at most this many indices are named where the largest errors lie


def peak_indices(a: AxisProfile) -> tuple[int, ...]:
    """Indices of an axis whose largest error ÷ allowed stands out CONTRAST times over every
    other index's (where the worst elements are: the worst-elements table points there),
    at most MAX_PEAKS and half the axis; () when none stands out so."""
    r = np.nan_to_num(np.asarray(a.max_ratio, dtype=np.float64), nan=0.0, posinf=np.inf)
    n = r.size
    if a.size < 2 or n < 2 or not r.max() > 0 or not np.isfinite(r.max()):
        return ()
    order = np.argsort(-r, kind="stable")
    for j in range(1, min(n // 2, MAX_PEAKS) + 1):
        if r[order[j]] * CONTRAST <= r[order[j - 1]]:
            entries = sorted(int(e) for e in order[:j])
            return _entry_indices(entries, a.bin, a.size)
    return ()


def _peaks_text(axes: tuple[AxisProfile, ...], text: str) -> str:
    """`text`, then where the largest errors lie when an axis not named for its mismatch
    count has indices that stand out by error (a bias on channel 17 under a softmax: every
    channel mismatches a little, channel 17 most)."""
    for a in axes:
        peaks = peak_indices(a) if not a.concentrated else ()
        if peaks:
            return f"{text}; the largest errors lie at {_indices_text(peaks)} of {a.label}"
    return text


def _at_edges(a: AxisProfile) -> bool:
    """The concentrated indices are the axis' first and last (and the axis has a middle)."""
    return a.size > 2 and a.concentrated == (0, a.size - 1)


def _edges_text(a: AxisProfile) -> str:
    """``the edges of axis 2 (height), indices 0 and 31``."""
    return f"the edges of {a.label}, indices 0 and {a.size - 1}"


def _border_text(first: AxisProfile, second: AxisProfile) -> str:
    """Two axes at their edges: a border; an image's when the axes are named height and
    width. ``along the image's border (indices 0 and 31 of axis 2 (height) and of axis 3
    (width))``."""
    names = {str(first.name or "").lower(), str(second.name or "").lower()}
    what = "the image's border" if names == {"height", "width"} else "the border"
    if first.size == second.size:
        where = f"indices 0 and {first.size - 1} of {first.label} and of {second.label}"
    else:
        where = (
            f"indices 0 and {first.size - 1} of {first.label}, 0 and {second.size - 1} of "
            f"{second.label}"
        )
    return f"along {what} ({where})"


# --------------------------------------------------------------------------- from a run


def where_of(run: ValidationRun, c: OutputComparison) -> WhereProfile | None:
    """The profile of one failing comparison at its own tolerance, from the run's kept arrays
    (None when it passes, is not judged element by element, or its arrays were not kept)."""
    if c.status not in (Status.FAIL, Status.DTYPE_MISMATCH) or not c.n_mismatch:
        return None
    ref, onnx = run.arrays(c)
    if ref is None or onnx is None or ref.shape != onnx.shape or ref.size == 0:
        return None
    if ref.dtype.kind not in "biuf" or onnx.dtype.kind not in "biuf":
        return None
    names = run.dim_names(c.name, ref.ndim)
    profile = where_profile(
        ref, onnx, c.tolerance, names=names, exclude=run.exclusion(c.input_set, c.name)
    )
    noises = [
        x.noise
        for x in run.outputs
        if x.name == c.name and x.candidate == c.candidate and x.noise is not None
    ]
    located = profile.covered > 0 or "largest errors lie" in profile.summary
    if located and noises and all(is_rounding(n) for n in noises):  # rounding has no place
        p = noises[0].precision
        what = "int8 quantization noise" if p == "int8" else f"{p} rounding"
        return replace(profile, summary=ROUNDING_PLACE.format(what=what))
    return profile


ROUNDING_PLACE = (
    "no place to point at: the error is {what} (its noise floor says so), which "
    "lies wherever the values are largest"
)
