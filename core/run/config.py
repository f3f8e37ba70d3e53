"""What defines a run (`RunConfig`), where its heavy objects come from (`Loaders`), and
which settings apply to which kind of run: the one place a flag that does not apply is
refused, so nothing is silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from parity.data.options import DataOptions  # parity.data stands below parity.run
from parity.errors import UsageError
from parity.load.specs import demo_name, is_hf_spec
from parity.results import RunKind
from parity.run.hf_options import DEFAULT_MAX_NEW_TOKENS, DEFAULT_PROMPT, HfOptions
from parity.settings import Mention, Part, Setting
from parity.tolerances import Tolerances
from parity.verdict import Judge

if TYPE_CHECKING:
    from parity.load.onnx_model import OnnxModel
    from parity.load.sessions import OrtSession
    from parity.load.torch_model import TorchModel


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; the CLI's flags and the Run page's widgets map onto it."""

    model: str | None
    onnx: str | Sequence[str] | None  # several files: candidates side by side
    weights: str | None = None
    dims: Mapping[str, int] = field(default_factory=dict)
    # None: two sizes for a file with dynamic axes, one for a static file (parity.run.inputs)
    n_input_sets: int | None = None
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
    noise_floor: bool = False  # also run the torch model in float64 (parity.judge.noise_floor)
    suggest: bool = False  # tolerances fitted, then checked on fresh input sets (parity.analyses)
    # failing outputs and no analysis asked: the floor measured where the model has at most
    # DEFAULT_PARAMETERS (parity.analyses.noise); --no-noise-floor sets it False
    noise_floor_default: bool = True
    # a file's weight-only quantized ops (int4 MatMulNBits, ...) judged against torch with the
    # file's own dequantized weights (parity.analyses.quantization); acts only where found
    quantized_reference: bool = True
    # how the run's verdict is decided (parity.verdict.Judge): CAUSE also measures the noise
    # floor on every output (`measures_noise`), as the cause of a difference needs it
    judge: Judge = Judge.TOLERANCE
    # several --onnx files judged as pipeline stages, each against the one before
    # (parity.analyses.stages); without it only where the files after the first are
    # conversions (no exporter made them)
    stages: bool = False
    # --repro DIR: the first confirmed divergence as a standalone folder (needs layers);
    # `repro_command` is the command its README names (the CLI's argv, the API's call)
    repro: str | None = None
    repro_command: str = ""
    timeout: float | None = (
        None  # seconds for the whole run (parity.limits.deadline); None: no limit
    )
    max_memory: int | None = (
        None  # bytes of inputs/feeds/reference a run may hold (parity.limits.budget)
    )
    # --data: answers on the user's data set, read in batches (parity.sources.data)
    data: DataOptions | None = None

    @property
    def n_given_sets(self) -> int:
        """Input sets the user gave (files, then arrays); 0: sets are generated."""
        return len(self.input_files) + len(self.feeds)

    @property
    def measures_noise(self) -> bool:
        """The noise floor is measured on every case: asked (--noise-floor), or the verdict is
        by cause on a run with a torch model to run in float64."""
        by_cause = self.judge is Judge.CAUSE and self.kind in (RunKind.TORCH, RunKind.HF_GENERATE)
        return self.noise_floor or by_cause

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

    load_onnx: Callable[[str], OnnxModel]
    make_session: SessionMaker
    load_torch_model: TorchLoader


class SessionMaker(Protocol):
    """parity.load.onnx_model.make_session, or a cached version of it."""

    def __call__(self, model: OnnxModel, /, *, provider: str, opt_level: str) -> OrtSession: ...


class TorchLoader(Protocol):
    """parity.load.torch_model.load_torch_model as a run calls it, or a cached version."""

    def __call__(
        self, spec: str, /, *, weights: str | None = None, max_memory: int | None = None
    ) -> TorchModel: ...


def default_loaders() -> Loaders:
    from parity.load.onnx_model import load_onnx, make_session
    from parity.load.torch_model import load_torch_model

    return Loaders(load_onnx, make_session, load_torch_model)


def check_config(config: RunConfig) -> None:
    """UsageError (one line) for a config that cannot run or sets what its kind ignores."""
    problem = config_problem(config)
    if problem is not None:
        raise problem


def config_problem(config: RunConfig) -> UsageError | None:
    """Why `config` cannot run (the first reason, as the error `check_config` raises), or
    None: the CLI, the API and the Run page's button all ask this one function."""
    return next(_problems(config), None)


def _problems(config: RunConfig) -> Iterator[UsageError]:
    from parity.limits.deadline import MAX_SECONDS

    if config.timeout is not None and not 0 < config.timeout <= MAX_SECONDS:
        yield UsageError(
            f"expected a positive number of seconds up to {MAX_SECONDS:,.0f}, got {config.timeout}",
            setting=Setting("timeout"),
        )
    if config.max_memory is not None and (
        isinstance(config.max_memory, bool) or config.max_memory < 1
    ):
        yield UsageError(
            f"expected a size of at least 1 byte, got {config.max_memory}",
            setting=Setting("max_memory"),
        )
    if config.layers and config.layers_memory_mb < 1:
        yield UsageError(
            f"must be >= 1 MB, got {config.layers_memory_mb}", setting=Setting("layers_memory_mb")
        )
    if config.n_input_sets is not None and config.n_input_sets < 1:
        yield UsageError(f"the number of input sets must be >= 1, got {config.n_input_sets}")
    if (demo := demo_name(config.model)) is not None:  # a typo, said before anything loads
        from parity.load.demos import get_demo

        try:
            get_demo(demo)
        except UsageError as exc:
            yield exc
    yield from _candidate_problems(config)
    yield from _data_problems(config)
    if config.model is not None and config.reference_file is not None:
        yield UsageError(("give either ", Mention("model"), " or ", _REFERENCE_ALONE, ", not both"))
    if config.reference_file is not None and not config.n_given_sets:
        yield UsageError(
            ("needs the feeds it was computed on (", _FEEDS, ")"),
            setting=Setting("reference_file"),
        )
    generated = _set_flags(
        ("dims", bool(config.dims)),
        ("n_input_sets", config.n_input_sets not in (None, 1)),
        ("int_ranges", bool(config.int_ranges)),
        ("float_range", bool(config.float_ranges) or config.float_range is not None),
    )
    if config.kind is RunKind.HF_GENERATE:
        # Given inputs feed a one-forward model (each set one forward); the source refuses
        # them for a model that generates, which only loading the model tells.
        ignored = _set_flags(("weights", config.weights is not None)) + generated
        if ignored:
            yield UsageError(
                (
                    *_listed(ignored),
                    f" {_do(ignored)} not apply to an hf: model: its inputs are its prompts, "
                    "generated pixels or audio, or ",
                    Mention("input_files"),
                    " files; its weights come from its directory",
                )
            )
        return
    if config.hf is not None:
        hf_only = ["prompt", "max_new_tokens", "random_weights", "config_override", "task"]
        yield UsageError(
            (
                *_listed(hf_only),
                " and ",
                Mention("export_path"),
                " apply only to ",
                Mention("model", "hf:DIR", placeholder=True),
            )
        )
    if config.n_given_sets and generated:
        yield UsageError(
            (
                *_listed(generated),
                f" {_do(generated)} not apply with ",
                Mention("input_files"),
                ": each file is one input set, at its own sizes",
            )
        )
    if config.kind is RunKind.REFERENCE and config.weights is not None:
        yield UsageError(
            ("does not apply to ", _REFERENCE_ALONE, " (there is no torch model)"),
            setting=Setting("weights"),
        )


_MODEL = Mention("model", "SPEC", placeholder=True)
_REFERENCE = Mention("reference_file", "REF.npz", placeholder=True)
_REFERENCE_ALONE = Mention("reference_file")
_FEEDS = Mention("input_files", "FEEDS.npz", placeholder=True)
_ONE_OF_EACH = (
    "give one ",
    Mention("onnx"),
    ", one ",
    Mention("provider"),
    " and one ",
    Mention("ort_opt_level"),
)


def _candidate_problems(config: RunConfig) -> Iterator[UsageError]:
    """Providers ONNX Runtime has here, known levels, and something to compare."""
    from parity.load.onnx_model import ORT_OPT_LEVELS, available_providers

    if not config.providers or not config.ort_opt_levels:
        yield UsageError(
            ("give at least one ", Mention("provider"), " and one ", Mention("ort_opt_level"))
        )
        return
    available = available_providers()
    missing = [p for p in config.providers if p not in available]
    if missing:
        yield UsageError(
            f"ONNX Runtime provider {', '.join(map(repr, missing))} not available here; "
            f"available: {', '.join(available)}"
        )
    unknown = [level for level in config.ort_opt_levels if level not in ORT_OPT_LEVELS]
    if unknown:
        yield UsageError(
            f"unknown ORT optimisation level {', '.join(map(repr, unknown))}; choose from "
            f"{', '.join(ORT_OPT_LEVELS)}"
        )
    if config.kind is RunKind.ONNX:
        if not config.onnx_files:
            yield UsageError(
                (
                    "give a model (", _MODEL, "), stored reference outputs (", _REFERENCE,
                    " with ", Mention("input_files"), "), or ONNX files to compare (",
                    Mention("onnx", "REF.onnx", placeholder=True), " ",
                    Mention("onnx", "OTHER.onnx", placeholder=True), ")",
                )
            )  # fmt: skip
            return
        if config.n_candidates < 1:
            yield UsageError(
                (
                    "ONNX against ONNX needs a second candidate: another ", Mention("onnx"),
                    ", or several ", Mention("provider"), " / ", Mention("ort_opt_level"),
                    " values (the first file at the first provider and level is the reference)",
                )
            )  # fmt: skip
        if config.weights is not None:
            yield UsageError(
                "does not apply to ONNX against ONNX (no torch model)", setting=Setting("weights")
            )
    if config.n_candidates > 1 and config.layers and config.kind is not RunKind.ONNX:
        yield UsageError(
            ("compares one ONNX file against a torch model: ", *_ONE_OF_EACH,
             " (ONNX against ONNX takes several)"),
            setting=Setting("layers"),
        )  # fmt: skip
    if config.noise_floor and config.kind in (RunKind.ONNX, RunKind.REFERENCE):
        yield UsageError(
            ("needs a torch model to run in float64 (", _MODEL, ")"),
            setting=Setting("noise_floor"),
        )
    if config.n_candidates > 1 and config.kind is RunKind.HF_GENERATE:
        yield UsageError(
            ("an hf: model's generate() steps are validated against one ONNX file: ",
             *_ONE_OF_EACH),
        )  # fmt: skip


def _data_problems(config: RunConfig) -> Iterator[UsageError]:
    """--data needs a torch model and is its inputs; the analyses that run cases again do
    not apply (a data run keeps no batch's arrays)."""
    if config.data is None:
        return
    for text in config.data.problems():
        yield UsageError(text)
    if config.data.engine == "ray" and config.n_candidates > 1:
        yield UsageError(
            "--engine ray judges one ONNX file at one provider and level: give one of each"
        )
    if config.kind not in (RunKind.TORCH, RunKind.HF_GENERATE):
        yield UsageError(("needs a torch model (", _MODEL, ")"), setting=Setting("data"))
    if config.data.engine == "ray" and config.kind is not RunKind.TORCH:
        yield UsageError(
            ("--engine ray needs a torch model (", _MODEL, "; not hf: yet)"),
            setting=Setting("data"),
        )
    clash = _set_flags(
        ("input_files", bool(config.n_given_sets)),
        ("dims", bool(config.dims)),
        ("n_input_sets", config.n_input_sets is not None),
        ("float_range", bool(config.float_ranges) or config.float_range is not None),
        ("prompt", config.hf is not None and config.hf.prompts != (DEFAULT_PROMPT,)),
        (
            "max_new_tokens",
            config.hf is not None and config.hf.max_new_tokens != DEFAULT_MAX_NEW_TOKENS,
        ),
    )
    if clash:
        yield UsageError(
            (*_listed(clash), f" {_do(clash)} not apply with ", Mention("data"),
             ": its samples are the inputs"),
        )  # fmt: skip
    rerun = _set_flags(("layers", config.layers), ("noise_floor", config.noise_floor))
    if rerun:  # what they need: each case run again (parity.analyses.order), batches are let go
        yield UsageError(
            (*_listed(rerun), f" {_do(rerun)} not apply with ", Mention("data"),
             f": {'it needs' if len(rerun) == 1 else 'they need'} each case run again, and a "
             f"data run lets each batch go; run {'it' if len(rerun) == 1 else 'them'} with ",
             Mention("input_files"), " on the samples the data run names as its worst"),
        )  # fmt: skip


def _set_flags(*flags: tuple[str, bool]) -> list[str]:
    return [name for name, given in flags if given]


def _listed(names: list[str]) -> list[Part]:
    """Settings named in a row: "--dim, --seed" (each front end's words)."""
    parts: list[Part] = []
    for k, name in enumerate(names):
        parts += [", "] * bool(k) + [Mention(name)]
    return parts


def _do(flags: list[str]) -> str:
    return "does" if len(flags) == 1 else "do"
