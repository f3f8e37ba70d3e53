"""What defines a run (`RunConfig`), where its heavy objects come from (`Loaders`), and
which settings apply to which kind of run: the one place a flag that does not apply is
refused, so nothing is silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import UsageError
from core.hf.options import HfOptions
from core.results import RunKind
from core.specs import is_hf_spec
from core.tolerances import Tolerances


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; the CLI's flags and the Run page's widgets map onto it."""

    model: str | None
    onnx: str | None
    weights: str | None = None
    dims: Mapping[str, int] = field(default_factory=dict)
    n_input_sets: int = 1
    seed: int = 0
    int_ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    input_files: tuple[str, ...] = ()
    feeds: tuple[Mapping[str, Any], ...] = ()  # input sets given as arrays (the Python API)
    provider: str = "CPUExecutionProvider"
    ort_opt_level: str = "all"
    tolerances: Tolerances = field(default_factory=Tolerances)
    reference_file: str | None = None
    hf: HfOptions | None = None  # prompts, steps, export path of an "hf:DIR" model
    layers: bool = False  # also compare intermediate values (core.layers)
    layers_memory_mb: int = 1024  # ONNX Runtime's extra outputs per batch (core.layers)
    timeout: float | None = None  # seconds for the whole run (core.deadline); None: no limit
    max_memory: int | None = None  # bytes of inputs/feeds/reference a run may hold (core.budget)

    @property
    def n_given_sets(self) -> int:
        """Input sets the user gave (files, then arrays); 0: sets are generated."""
        return len(self.input_files) + len(self.feeds)

    @property
    def kind(self) -> RunKind:
        if self.model is None:
            return RunKind.REFERENCE
        return RunKind.HF_GENERATE if is_hf_spec(self.model) else RunKind.TORCH


@dataclass(frozen=True)
class Loaders:
    """Where a run gets its heavy objects. The dashboard passes versions cached by content
    identity, so a second run of the same files reuses the loaded model and ONNX session."""

    load_onnx: Callable[[str], Any]
    make_session: Callable[..., Any]  # (onnx_model, *, provider, opt_level)
    load_torch_model: Callable[..., Any]  # (spec, *, weights)


def default_loaders() -> Loaders:
    from core.onnx_model import load_onnx, make_session
    from core.torch_model import load_torch_model

    return Loaders(load_onnx, make_session, load_torch_model)


def check_config(config: RunConfig) -> None:
    """UsageError (one line) for a config that cannot run or sets what its kind ignores."""
    if config.layers and config.layers_memory_mb < 1:
        raise UsageError(f"--layers-memory must be >= 1 MB, got {config.layers_memory_mb}")
    if config.n_input_sets < 1:
        raise UsageError(f"the number of input sets must be >= 1, got {config.n_input_sets}")
    if config.model is None and config.reference_file is None:
        raise UsageError(
            "give a model (--model SPEC) or stored reference outputs (--reference REF.npz "
            "with --inputs)"
        )
    if config.model is not None and config.reference_file is not None:
        raise UsageError("give either --model or --reference, not both")
    if config.reference_file is not None and not config.n_given_sets:
        raise UsageError("--reference needs the feeds it was computed on (--inputs FEEDS.npz)")
    generated = _set_flags(
        ("--dim", bool(config.dims)),
        ("--input-sets", config.n_input_sets != 1),
        ("--int-range", bool(config.int_ranges)),
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


def _set_flags(*flags: tuple[str, bool]) -> list[str]:
    return [name for name, given in flags if given]


def _do(flags: list[str]) -> str:
    return "does" if len(flags) == 1 else "do"
