"""What defines a run (`RunConfig`), where its heavy objects come from (`Loaders`), and
which settings apply to which kind of run: the one place a flag that does not apply is
refused, so nothing is silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parity.errors import UsageError
from parity.load.specs import demo_name, is_hf_spec
from parity.results import RunKind
from parity.tolerances import Tolerances

if TYPE_CHECKING:  # annotation only: parity.hf stands on parity.run
    from parity.hf.options import HfOptions


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; the CLI's flags and the Run page's widgets map onto it."""

    model: str | None
    onnx: str | Sequence[str] | None  # several files: candidates side by side
    weights: str | None = None
    dims: Mapping[str, int] = field(default_factory=dict)
    n_input_sets: int = 1
    seed: int = 0
    int_ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # generated float inputs drawn uniformly in [low, high]: per input, or every float input
    float_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    float_range: tuple[float, float] | None = None
    input_files: tuple[str, ...] = ()
    feeds: tuple[Mapping[str, Any], ...] = ()  # input sets given as arrays (the Python API)
    provider: str | Sequence[str] = "CPUExecutionProvider"  # several: one candidate each
    ort_opt_level: str | Sequence[str] = "all"  # several: one candidate each
    tolerances: Tolerances = field(default_factory=Tolerances)
    reference_file: str | None = None
    hf: HfOptions | None = None  # prompts, steps, export path of an "hf:DIR" model
    layers: bool = False  # also compare intermediate values (parity.layers)
    layers_memory_mb: int = 1024  # ONNX Runtime's extra outputs per batch (parity.layers)
    layers_confirm: bool = True  # re-run flagged nodes alone (parity.layers.birth)
    noise_floor: bool = False  # also run the torch model in float64 (parity.judge.noise)
    timeout: float | None = None  # seconds for the whole run (parity.run.deadline); None: no limit
    max_memory: int | None = (
        None  # bytes of inputs/feeds/reference a run may hold (parity.run.budget)
    )

    @property
    def n_given_sets(self) -> int:
        """Input sets the user gave (files, then arrays); 0: sets are generated."""
        return len(self.input_files) + len(self.feeds)

    @property
    def kind(self) -> RunKind:
        if self.model is None:
            return RunKind.REFERENCE if self.reference_file is not None else RunKind.ONNX
        return RunKind.HF_GENERATE if is_hf_spec(self.model) else RunKind.TORCH

    @property
    def onnx_files(self) -> tuple[str, ...]:
        return _texts(self.onnx)

    @property
    def providers(self) -> tuple[str, ...]:
        return _texts(self.provider)

    @property
    def ort_opt_levels(self) -> tuple[str, ...]:
        return _texts(self.ort_opt_level)

    @property
    def n_candidates(self) -> int:
        """Files x providers x levels (a demo's or an hf: export counts as one file); an
        ONNX-against-ONNX run's first combination is its reference, not a candidate."""
        n = max(len(self.onnx_files), 1) * len(self.providers) * len(self.ort_opt_levels)
        return n - 1 if self.kind is RunKind.ONNX else n


def _texts(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """One text or several, as a tuple of distinct texts in their order."""
    if value is None:
        return ()
    items = (value,) if isinstance(value, str) else tuple(value)
    return tuple(dict.fromkeys(str(v) for v in items))


@dataclass(frozen=True)
class Loaders:
    """Where a run gets its heavy objects. The dashboard passes versions cached by content
    identity, so a second run of the same files reuses the loaded model and ONNX session."""

    load_onnx: Callable[[str], Any]
    make_session: Callable[..., Any]  # (onnx_model, *, provider, opt_level)
    load_torch_model: Callable[..., Any]  # (spec, *, weights, max_memory)


def default_loaders() -> Loaders:
    from parity.load.onnx_model import load_onnx, make_session
    from parity.load.torch_model import load_torch_model

    return Loaders(load_onnx, make_session, load_torch_model)


def check_config(config: RunConfig) -> None:
    """UsageError (one line) for a config that cannot run or sets what its kind ignores."""
    if config.layers and config.layers_memory_mb < 1:
        raise UsageError(f"--layers-memory must be >= 1 MB, got {config.layers_memory_mb}")
    if config.n_input_sets < 1:
        raise UsageError(f"the number of input sets must be >= 1, got {config.n_input_sets}")
    if (demo := demo_name(config.model)) is not None:  # a typo, said before anything loads
        from parity.load.demos import get_demo

        get_demo(demo)
    _check_candidates(config)
    if config.model is not None and config.reference_file is not None:
        raise UsageError("give either --model or --reference, not both")
    if config.reference_file is not None and not config.n_given_sets:
        raise UsageError("--reference needs the feeds it was computed on (--inputs FEEDS.npz)")
    generated = _set_flags(
        ("--dim", bool(config.dims)),
        ("--input-sets", config.n_input_sets != 1),
        ("--int-range", bool(config.int_ranges)),
        ("--float-range", bool(config.float_ranges) or config.float_range is not None),
    )
    if config.kind is RunKind.HF_GENERATE:
        # Given inputs feed a one-forward model (each set one forward); the source refuses
        # them for a model that generates, which only loading the model tells.
        ignored = _set_flags(("--weights", config.weights is not None)) + generated
        if ignored:
            raise UsageError(
                f"{', '.join(ignored)} {_do(ignored)} not apply to an hf: model: its inputs are "
                "its prompts, generated pixels or audio, or --inputs files; its weights come "
                "from its directory"
            )
        return
    if config.hf is not None:
        raise UsageError(
            "--prompt, --max-new-tokens, --random-weights, --config-override, --task and "
            "--export-path apply only to --model hf:DIR"
        )
    if config.n_given_sets and generated:
        raise UsageError(
            f"{', '.join(generated)} {_do(generated)} not apply with --inputs: each file is "
            "one input set, at its own sizes"
        )
    if config.kind is RunKind.REFERENCE and config.weights is not None:
        raise UsageError("--weights does not apply to --reference (there is no torch model)")


def _check_candidates(config: RunConfig) -> None:
    """Providers ONNX Runtime has here, known levels, and something to compare."""
    from parity.load.onnx_model import ORT_OPT_LEVELS, available_providers

    if not config.providers or not config.ort_opt_levels:
        raise UsageError("give at least one --provider and one --ort-opt-level")
    available = available_providers()
    missing = [p for p in config.providers if p not in available]
    if missing:
        raise UsageError(
            f"ONNX Runtime provider {', '.join(map(repr, missing))} not available here; "
            f"available: {', '.join(available)}"
        )
    unknown = [level for level in config.ort_opt_levels if level not in ORT_OPT_LEVELS]
    if unknown:
        raise UsageError(
            f"unknown ORT optimisation level {', '.join(map(repr, unknown))}; choose from "
            f"{', '.join(ORT_OPT_LEVELS)}"
        )
    if config.kind is RunKind.ONNX:
        if not config.onnx_files:
            raise UsageError(
                "give a model (--model SPEC), stored reference outputs (--reference REF.npz "
                "with --inputs), or ONNX files to compare (--onnx REF.onnx --onnx OTHER.onnx)"
            )
        if config.n_candidates < 1:
            raise UsageError(
                "ONNX against ONNX needs a second candidate: another --onnx, or several "
                "--provider / --ort-opt-level values (the first file at the first provider "
                "and level is the reference)"
            )
        if config.weights is not None:
            raise UsageError("--weights does not apply to ONNX against ONNX (no torch model)")
    if config.n_candidates > 1 and config.layers and config.kind is not RunKind.ONNX:
        raise UsageError(
            "--layers compares one ONNX file against a torch model: give one --onnx, one "
            "--provider and one --ort-opt-level (ONNX against ONNX takes several)"
        )
    if config.noise_floor and config.kind in (RunKind.ONNX, RunKind.REFERENCE):
        raise UsageError("--noise-floor needs a torch model to run in float64 (--model SPEC)")
    if config.n_candidates > 1 and config.kind is RunKind.HF_GENERATE:
        raise UsageError(
            "an hf: model's generate() steps are validated against one ONNX file: give one "
            "--onnx, one --provider and one --ort-opt-level"
        )


def _set_flags(*flags: tuple[str, bool]) -> list[str]:
    return [name for name, given in flags if given]


def _do(flags: list[str]) -> str:
    return "does" if len(flags) == 1 else "do"
