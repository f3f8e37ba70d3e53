"""The memory budget: what a file or a flag asks to allocate is estimated and refused first.

A fixed dim of 100000x100000, `--dim batch=10**12`, a small `.npz` whose member header
claims 8 GiB or `--input-sets 10000` would otherwise end as a MemoryError deep in numpy,
or take the machine. Estimates use Python ints (no overflow) from shapes and dtypes only:
`.npy` headers inside an `.npz` are read without reading (or inflating) their data.
"""

from __future__ import annotations

import math
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from parity.errors import BudgetError, UsageError
from parity.settings import Mention, Part, Setting

DEFAULT_MAX_MEMORY = 4 << 30
"""4 GiB: arrays one run may hold before it is refused (raise it with --max-memory)."""

_LARGEST_SUGGESTION = 16 << 40  # past this no machine helps: only "proceed" is suggested
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'16G', '512M', '1.5GiB', '1000000' (bytes) -> bytes."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(
            "expected a size such as 512M, 16G or 1T", setting=Setting("max_memory", repr(text))
        )
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if not math.isfinite(value) or value < 1:
        raise UsageError(
            "expected a size of at least 1 byte", setting=Setting("max_memory", repr(text))
        )
    return int(value)


def format_size(n_bytes: int) -> str:
    """Human size in binary units: '37.3 GiB', '14.6 TiB', '512 B'."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def array_bytes(shape: Iterable[int], dtype: np.dtype | str) -> int:
    """Bytes of an array of `shape` (exact Python int, so 10**12 x 10**12 does not wrap)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def _parts(text: str | Sequence[Part]) -> tuple[Part, ...]:
    return (text,) if isinstance(text, str) else tuple(text)


@dataclass(frozen=True)
class MemoryBudget:
    """At most `limit` bytes of arrays that a file or a flag decides the size of."""

    limit: int = DEFAULT_MAX_MEMORY

    @classmethod
    def of(cls, max_memory: int | None) -> MemoryBudget:
        return cls() if max_memory is None else cls(int(max_memory))

    def check(
        self, n_bytes: int, what: str | Sequence[Part], *, proceed: str | Sequence[Part]
    ) -> None:
        """Refuse `what` (needing `n_bytes`) past the limit: one line, size and ways out."""
        if n_bytes > self.limit:
            raise_it: tuple[Part, ...] = (
                (", or raise the budget with ", Mention("max_memory", _suggest(n_bytes)))
                if n_bytes <= _LARGEST_SUGGESTION
                else ()
            )
            raise BudgetError(
                (
                    *_parts(what),
                    f" needs {format_size(n_bytes)}, over the "
                    f"{format_size(self.limit)} memory budget; ",
                    *_parts(proceed),
                    *raise_it,
                )
            )


def _suggest(n_bytes: int) -> str:
    gib = max(1, math.ceil(n_bytes * 1.25 / (1 << 30)))
    return f"{gib}G" if gib < 1024 else f"{math.ceil(gib / 1024)}T"


@dataclass(frozen=True)
class NpyHeader:
    """One `.npy` member of an `.npz`, described by its header alone."""

    key: str  # the name np.load gives it (member name without ".npy")
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def n_bytes(self) -> int:
        return array_bytes(self.shape, self.dtype)


def read_npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) of the .npy at ``fh``'s position, which is left at the
    data. numpy's own reader for versions 1.0 and 2.0, never pickle; ValueError otherwise."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    return tuple(int(d) for d in shape), bool(fortran), dtype


def npz_headers(path: str | Path | IO[bytes]) -> tuple[NpyHeader, ...]:
    """What `np.load` would allocate for every member, whatever its name, reading only each
    member's first bytes.

    np.load gives a member `x` as well as `x.npy` (and `x` wins when both are there), and a
    member that is not a .npy file as its bytes: a `.npy` member counts its header's shape
    and dtype, any other its size in the zip's directory (as uint8 bytes). Two members that
    np.load would give the same name are refused. A compressed member is inflated only as
    far as its header. Raises ValueError (header unreadable, names clash) or zipfile/OS
    errors; callers word them for their file.
    """
    headers = []
    seen: dict[str, str] = {}
    magic = np.lib.format.MAGIC_PREFIX
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            key = info.filename.removesuffix(".npy")
            if key in seen:
                raise ValueError(
                    f"members {seen[key]!r} and {info.filename!r} are both read as {key!r}"
                )
            seen[key] = info.filename
            shape: tuple[int, ...]
            with zf.open(info) as member:
                if member.read(len(magic)) != magic:  # np.load returns its bytes
                    shape, dtype = (info.file_size,), np.dtype("u1")
                else:
                    member.seek(0)
                    shape, _, dtype = read_npy_header(member)
            headers.append(NpyHeader(key=key, shape=tuple(shape), dtype=dtype))
    return tuple(headers)


def describe_largest(headers: Iterable[NpyHeader]) -> str:
    """'array 'x' float32 [100000, 100000]' for the largest member (for the one-line cause)."""
    largest = max(headers, key=lambda h: h.n_bytes, default=None)
    if largest is None:
        return ""
    return f"array {largest.key!r} {largest.dtype} {list(largest.shape)}"
