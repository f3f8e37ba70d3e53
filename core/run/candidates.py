"""Candidates: the ways a run executes the ONNX side (file x provider x optimisation level).

The reference (torch, stored outputs, or a reference ONNX file) runs once per input set; each
candidate runs on the same case and is compared with it. This module expands a config into
candidate specs, loads them (a file shared by several candidates is read and checked once),
and fits a reference's input set to a candidate whose signature differs from the reference's:
the one place that decides what "differs" means and what is adapted rather than refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from parity.results import InputSet, OutputSet
from parity.run.config import Loaders
from parity.run.progress import ProgressReporter
from parity.signature import OnnxSignature

if TYPE_CHECKING:
    from parity.load.onnx_model import OnnxModel
    from parity.load.sessions import OrtSession

__all__ = [
    "Candidate",
    "CandidateSpec",
    "SignatureFit",
    "expand_specs",
    "fit_signature",
    "load_candidate",
    "shared_loaders",
]

_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


@dataclass(frozen=True)
class CandidateSpec:
    """One combination the user asked for, before anything is loaded."""

    onnx: str
    provider: str
    opt_level: str


@dataclass(frozen=True)
class Candidate:
    """One way to run the ONNX side: a loaded file, its session, provider and opt level."""

    path: str
    model: OnnxModel
    session: OrtSession | None  # None: let go (parity.pipeline, before --layers opens its own)
    provider: str
    opt_level: str
    parts: Mapping[str, Candidate] = field(default_factory=dict)  # an export's files, by part
    notes: tuple[str, ...] = ()  # what loading accepted; what the provider really computed

    @property
    def signature(self) -> OnnxSignature:
        return self.model.signature

    def live_session(self) -> OrtSession:
        """The session, to run: the pipeline lets it go only once the cases ran."""
        if self.session is None:
            raise RuntimeError(f"{self.path}: its ONNX Runtime session was let go")
        return self.session

    def for_case(self, part: str) -> Candidate:
        """The file that runs a case of this `part` of a multi-file export ("": self)."""
        return self.parts[part] if part else self


def expand_specs(
    files: Iterable[str], providers: Iterable[str], levels: Iterable[str]
) -> list[CandidateSpec]:
    """Every file x provider x level, file-major (a file's variants sit side by side)."""
    providers, levels = tuple(providers), tuple(levels)
    return [CandidateSpec(f, p, lv) for f in files for p in providers for lv in levels]


def shared_loaders(loaders: Loaders) -> Loaders:
    """The same loaders, reading each ONNX file once per run however many candidates use it
    (the dashboard's loaders are cached already; the CLI's are not)."""
    loaded: dict[str, OnnxModel] = {}

    def load_onnx(path: str) -> OnnxModel:
        key = str(path)
        if key not in loaded:
            loaded[key] = loaders.load_onnx(path)
        return loaded[key]

    return replace(loaders, load_onnx=load_onnx)


def load_candidate(
    spec: CandidateSpec,
    loaders: Loaders,
    report: ProgressReporter,
    *,
    parts_of: Callable[[str], Mapping[str, str]] | None = None,
) -> Candidate:
    """Read the file (once per run, see shared_loaders) and start its session. `parts_of`
    splits an export into its files by part (an encoder-decoder folder): every part is
    loaded, the first stands for the candidate, and each case names the part it runs on."""
    files = parts_of(spec.onnx) if parts_of is not None else {"": spec.onnx}
    parts: dict[str, Candidate] = {}
    for part, file in files.items():
        report("load", f"loading ONNX {file} ({spec.provider}, {spec.opt_level})", 0.02)
        model = loaders.load_onnx(file)
        level, crash = _opening_level(model, spec)
        session = loaders.make_session(model, provider=spec.provider, opt_level=level)
        notes = (*getattr(model, "notes", ()), *_precision_notes(file, spec.provider))
        notes = (crash, *notes) if crash else notes
        parts[part] = Candidate(str(file), model, session, spec.provider, level, notes=notes)
    main = next(iter(parts.values()))
    return main if len(parts) == 1 else replace(main, path=str(spec.onnx), parts=parts)


def _opening_level(model: OnnxModel, spec: CandidateSpec) -> tuple[str, str | None]:
    """The level the session is opened at: the asked one, or where ONNX Runtime crashes
    natively there, the highest that opens and the crash in words; OnnxLoadError (exit 2,
    one line) when none opens (parity.load.sessions.opening_level)."""
    from parity.errors import OnnxLoadError
    from parity.load.sessions import ORT_OPT_LEVELS, opening_level

    path = getattr(model, "path", None)
    if path is None or spec.opt_level not in ORT_OPT_LEVELS:
        return spec.opt_level, None
    level, crash = opening_level(path, provider=spec.provider, opt_level=spec.opt_level)
    if crash is not None and level == spec.opt_level:
        raise OnnxLoadError(crash)
    return level, crash


def _precision_notes(file: str, provider: str) -> tuple[str, ...]:
    """A 16-bit file's nodes the provider ran in float32 (parity.load.provider_precision)."""
    from parity.load.provider_precision import provider_precision

    found = provider_precision(file, provider)
    return () if found is None else (found.note,)


@dataclass(frozen=True)
class SignatureFit:
    """How a candidate's signature meets the reference's (the signature cases are made for).

    `error`: the candidate cannot take the reference's inputs (an input missing or extra, a
    rank or a non-float dtype that differs). `input_casts` / `output_casts`: float inputs
    fed in the candidate's own precision, float outputs compared in the reference's
    (an fp16 export against its fp32 original). `notes` say both in words.
    """

    error: str | None = None
    input_casts: dict[str, str] | None = None
    output_casts: dict[str, str] | None = None
    notes: tuple[str, ...] = ()

    def feeds(self, input_set: InputSet) -> InputSet:
        if not self.input_casts:
            return input_set
        feeds = {
            name: _cast(array, self.input_casts[name]) if name in self.input_casts else array
            for name, array in input_set.feeds.items()
        }
        return replace(input_set, feeds=feeds)

    def outputs(self, outputs: OutputSet) -> OutputSet:
        if not self.output_casts:
            return outputs
        arrays = {
            name: _cast(array, self.output_casts[name]) if name in self.output_casts else array
            for name, array in outputs.arrays.items()
        }
        return replace(outputs, arrays=arrays)


def fit_signature(reference: OnnxSignature, candidate: OnnxSignature) -> SignatureFit:
    """Compare the two signatures input by input and output by output (see SignatureFit)."""
    ref_in = {t.name: t for t in reference.inputs}
    cand_in = {t.name: t for t in candidate.inputs}
    missing = [n for n in cand_in if n not in ref_in]
    extra = [n for n in ref_in if n not in cand_in]
    if missing or extra:
        parts = [f"input {n!r} not in the reference's inputs" for n in missing]
        parts += [f"the reference's input {n!r} not among its inputs" for n in extra]
        return SignatureFit(error=_differs(parts))
    input_casts: dict[str, str] = {}
    for name, spec in cand_in.items():
        ref = ref_in[name]
        if spec.rank != ref.rank:
            return SignatureFit(
                error=_differs([f"input {name!r} has rank {spec.rank}, the reference's {ref.rank}"])
            )
        if spec.dtype != ref.dtype:
            if not (spec.dtype in _FLOATS and ref.dtype in _FLOATS):
                return SignatureFit(
                    error=_differs([f"input {name!r} is {spec.dtype}, the reference's {ref.dtype}"])
                )
            input_casts[name] = spec.dtype
    ref_out = {t.name: t for t in reference.outputs}
    output_casts = {
        t.name: ref_out[t.name].dtype
        for t in candidate.outputs
        if t.name in ref_out
        and t.dtype != ref_out[t.name].dtype
        and t.dtype in _FLOATS
        and ref_out[t.name].dtype in _FLOATS
    }
    notes = [
        f"inputs {_pairs(input_casts, ref_in)} fed in its own precision (cast from the reference's)"
    ] * bool(input_casts)
    notes += [
        f"outputs {_pairs({n: d for n, d in _own(candidate, output_casts)}, ref_out)} compared "
        "in the reference's precision"
    ] * bool(output_casts)
    return SignatureFit(
        input_casts=input_casts or None, output_casts=output_casts or None, notes=tuple(notes)
    )


def _own(candidate: OnnxSignature, casts: dict[str, str]) -> list[tuple[str, str]]:
    return [(t.name, t.dtype) for t in candidate.outputs if t.name in casts]


def _pairs(own: dict[str, str], reference: dict[str, Any]) -> str:
    return ", ".join(f"{n!r} {d} (reference {reference[n].dtype})" for n, d in own.items())


def _differs(parts: list[str]) -> str:
    return "signature differs from the reference's: " + "; ".join(parts)


def _cast(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes

        return np.asarray(array).astype(ml_dtypes.bfloat16)
    return np.asarray(array).astype(dtype)
