"""The words of a comparison's verdict: numpy.testing's mismatch wording, used by the
comparison and by re-judging alike."""

from __future__ import annotations

from typing import Protocol

__all__ = ["failure_message", "mismatch_message", "with_notes"]


class _Stats(Protocol):  # parity.results.ErrorStats; typed here so this module stays a leaf
    # read-only, as a frozen dataclass's fields are (a plain attribute would ask settable)
    @property
    def max_abs(self) -> float | None: ...
    @property
    def max_rel(self) -> float | None: ...
    @property
    def n_nan_mismatch(self) -> int: ...
    @property
    def n_inf_mismatch(self) -> int: ...


def mismatch_message(n_mismatch: int, n_elements: int) -> str:
    pct = 100.0 * n_mismatch / n_elements if n_elements else 0.0
    return f"Mismatched elements: {n_mismatch} / {n_elements} ({pct:.3g}%)"


def failure_message(n_mismatch: int, n_elements: int, stats: _Stats | None) -> str:
    """numpy.testing's wording, plus the non-finite counts when there are any."""
    lines = [mismatch_message(n_mismatch, n_elements)]
    if stats is not None:
        if stats.max_abs is not None:
            lines.append(f"Max absolute difference: {stats.max_abs:.6g}")
        if stats.max_rel is not None:
            lines.append(f"Max relative difference: {stats.max_rel:.6g}")
        if stats.n_nan_mismatch or stats.n_inf_mismatch:
            lines.append(
                f"Non-finite mismatches: {stats.n_nan_mismatch} NaN, {stats.n_inf_mismatch} Inf"
            )
    return "\n".join(lines)


def with_notes(verdict: str, notes: tuple[str, ...] | list[str]) -> str:
    """A comparison's message: the verdict's words, then its notes (a crop, excluded
    elements), '; '-separated. Re-judging rewrites the verdict and keeps the notes."""
    return "; ".join(t for t in (verdict, *notes) if t)
