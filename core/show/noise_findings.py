"""The noise floor's findings (--noise-floor, its result parity.results.noise on each row):
a failing output whose error against float64 is about what its precision makes is rounding
(named at that precision: float32, float16, bfloat16, int8), one far beyond it a bug; on every
candidate, an output that passes only at a tolerance looser than the default while its error
is far beyond rounding is a bug the tolerance hides. Registered as evidence (parity.show.finder)
after --layers': a birth it confirmed speaks for an output first, the ratio said beside it
(these words are the layers' too). Where some failing output is neither, its hint says what
--noise-floor would have told.
"""

from __future__ import annotations

from collections.abc import Iterable

from parity.judge.noise_floor import is_rounding, noise_rank, twin_off, twin_words
from parity.results import Finding, FindingKind, Noise, OutputComparison, ValidationRun
from parity.show.finder import asked_as, evidence, numeric_failures
from parity.text import number_text, tolerance_text
from parity.tolerances import Tolerance

__all__ = [
    "HIDDEN_BY_TOLERANCE",
    "beyond_rounding",
    "file_precision_word",
    "hidden_by_tolerance",
    "ratio_words",
    "rounding_name",
    "worst_noise",
]

HIDDEN_BY_TOLERANCE = "a bug the tolerance hides"  # the words of hidden_by_tolerance's finding

asked_as("noise_floor", "--noise-floor")


def judge_output(
    run: ValidationRun, candidate: int, name: str, rows: list[OutputComparison]
) -> Finding | None:
    """A failing output's rounding or bug, by its worst noise ratio (None: not measured)."""
    noise = worst_noise(rows)
    if noise is None:
        return None
    if is_rounding(noise):
        return Finding(FindingKind.ROUNDING, _rounding_text(name, noise), name, candidate)
    return Finding(FindingKind.BUG, _noise_bug_text(name, noise), name, candidate)


def hint(run: ValidationRun, found: list[Finding]) -> str | None:
    """Where some failing output is neither a bug nor rounding yet (and no birth was
    confirmed): whether the difference is rounding is what --noise-floor would tell."""
    numeric = set(numeric_failures(run))
    explained = {f.output for f in found if f.kind in _EXPLAINED}
    born = any(f.kind is FindingKind.BUG and f.output is None for f in found)
    if not numeric or born or numeric <= explained:
        return None
    word = file_precision_word(run)
    return f"whether the difference is {rounding_name(word)} (--noise-floor)"


_EXPLAINED = (
    FindingKind.BUG,
    FindingKind.ROUNDING,
    FindingKind.QUANTIZATION,
    FindingKind.APPROXIMATION,
)


def worst_noise(rows: Iterable[OutputComparison]) -> Noise | None:
    noises = [c.noise for c in rows if c.noise is not None]
    return max(noises, key=noise_rank) if noises else None


def _times(ratio: float) -> str:
    return f"{float(f'{ratio:.2g}'):,.0f}" if ratio >= 100 else f"{ratio:.2g}"


def ratio_words(noise: Noise) -> str:
    """ONNX's error against float64 beside the floor, as the noise measured it."""
    floor = (
        "the int8 quantization noise"
        if noise.precision == "int8"
        else (f"torch's own {noise.precision} error")
    )
    how = f" ({noise.emulated})" if noise.emulated and noise.precision == "float32" else ""
    if noise.ratio is None:
        return f"ONNX is {number_text(noise.onnx_error)} off float64 where {floor} is 0{how}"
    return f"ONNX's error against float64 is {_times(noise.ratio)}\u00d7 {floor}{how}"


def rounding_name(precision: str) -> str:
    return "int8 quantization noise" if precision == "int8" else f"{precision} rounding"


def _rounding_text(name: str, noise: Noise) -> str:
    kind = rounding_name(noise.precision)
    return (
        f"{name}: {kind}, not a bug; --suggest gives tolerances that hold: "
        f"{ratio_words(noise)}, about what the precision itself makes."
    )


def beyond_rounding(noise: Noise) -> str:
    """Why an error that is not rounding is not: its ratio far beyond the precision's
    rounding, or a 16-bit file's float32 twin off torch with the file's weights (then the
    ratio is said beside it, however small)."""
    rounding = rounding_name(noise.precision)
    if twin_off(noise):
        return f"{twin_words(noise)}, so not {rounding} ({ratio_words(noise)})"
    return f"{ratio_words(noise)}, far beyond {rounding}"


def _noise_bug_text(name: str, noise: Noise) -> str:
    return f"{name}: not rounding: {beyond_rounding(noise)}, which points to a bug in the export."


def hidden_by_tolerance(run: ValidationRun, candidate: int) -> list[Finding]:
    """An output that passes only because its tolerance is looser than the default, while
    its error is far beyond the file's rounding (the noise floor measured it): a bug the
    tolerance hides, said whatever the judge (under --judge cause the run fails)."""
    default = Tolerance()
    out: list[Finding] = []
    said: set[str] = set()
    for c in run.outputs:
        if c.name in said or c.noise is None or is_rounding(c.noise):
            continue
        if not c.passes_only_loosened:
            continue  # it fails, or passes the default too: the tolerance hides nothing
        said.add(c.name)
        text = (
            f"{c.name}: {HIDDEN_BY_TOLERANCE}: it passes at {tolerance_text(c.tolerance)} "
            f"only; {beyond_rounding(c.noise)}, and at the default {tolerance_text(default)} "
            "it fails."
        )
        out.append(Finding(FindingKind.BUG, text, c.name, candidate))
    return out


def file_precision_word(run: ValidationRun) -> str:
    """The precision the ONNX file computes at, as far as the run knows without reading the
    file again: the measured noise's, else the provider's 16-bit note, else int8 for a
    quantized file's layers, else float32."""
    for c in run.outputs:
        if c.noise is not None:
            return c.noise.precision
    from parity.load.provider_precision import precision_notes

    for info in run.infos:
        for note in precision_notes(info.notes):
            for word in ("bfloat16", "float16"):
                if f" {word} nodes" in note:
                    return word
    layers = run.layers
    if layers is not None and layers.findings.get("quantized"):
        return "int8"
    return "float32"


evidence("noise_floor", rank=20, judge=judge_output, every=hidden_by_tolerance, hint=hint)
