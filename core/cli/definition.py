"""Every flag of `parity validate | report | demos | dashboard | sweep`, as one table.

A command is a Command of Groups of Flags (frozen values, in the order --help shows them);
`build_parser()` is the one place that turns the table into argparse: the did-you-mean
Parser (parity.cli.parser) and the reads/writes marks of parity.path_flags, which the sweep
reads off validate's parser. A flag two commands share is one value: `report` takes
validate's report and tolerance flags, `dashboard` takes validate's groups whole.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parity.cli.parser import Parser
from parity.data.options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BAD, ENGINES
from parity.judge.pass_rule import RULE_TEXT
from parity.launch import DASHBOARD_HELP, DEFAULT_HOST, DEFAULT_PORT, SERVER_OPTIONS, UPLOAD_OPTION
from parity.limits.budget import DEFAULT_MAX_MEMORY, format_size
from parity.limits.deadline import MAX_SECONDS
from parity.path_flags import READS, WRITES, reads, writes
from parity.run.hf_options import DEFAULT_MAX_NEW_TOKENS, DEFAULT_PROMPT
from parity.sweep.cli import DEFAULT_TIMEOUT_S
from parity.tolerances import DEFAULT_ATOL, DEFAULT_RTOL


@dataclass(frozen=True)
class Flag:
    """One argparse argument: `names` are its option strings, or its one positional name;
    `path` is READS / WRITES for a value that names a file the run reads or writes;
    `uri_in_place`: a READS flag whose URI the run opens itself (parity.path_flags.reads).
    A repeatable flag (action "append") starts from a fresh empty list."""

    names: tuple[str, ...]
    help: str | None = None
    metavar: str | None = None
    default: Any = None
    type: Callable[[str], Any] | None = None
    action: str | None = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    required: bool = False
    path: str | None = None
    uri_in_place: bool = False

    @property
    def dest(self) -> str:
        """The attribute the parsed value lands on (argparse's rule)."""
        return self.names[0].lstrip("-").replace("-", "_")

    def add_to(self, target: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        """add_argument with the fields that are set, then the action's path mark."""
        kwargs: dict[str, Any] = {}
        for field in ("help", "metavar", "type", "action", "nargs"):
            if getattr(self, field) is not None:
                kwargs[field] = getattr(self, field)
        if self.choices is not None:
            kwargs["choices"] = list(self.choices)
        if self.required:
            kwargs["required"] = True
        if self.action == "append":
            kwargs["default"] = list(self.default or ())
        elif self.default is not None:
            kwargs["default"] = self.default
        action = target.add_argument(*self.names, **kwargs)
        if self.path == READS:
            reads(action, uri_in_place=self.uri_in_place)
        elif self.path == WRITES:
            writes(action)


def flag(*names: str, **fields: Any) -> Flag:
    """`flag("--json", metavar="FILE", ...)`: a Flag written as add_argument is called."""
    return Flag(names, **fields)


@dataclass(frozen=True)
class Group:
    """Flags --help shows under one title; no title: the command's own list."""

    title: str | None
    flags: tuple[Flag, ...]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        target = parser.add_argument_group(self.title) if self.title else parser
        for item in self.flags:
            item.add_to(target)


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help in `parity --help`, its groups in its own --help."""

    name: str
    help: str
    groups: tuple[Group, ...] = ()
    description: str | None = None
    raw_description: bool = False
    """Keep the description's own lines (the dashboard's examples)."""

    @property
    def flags(self) -> tuple[Flag, ...]:
        return tuple(f for group in self.groups for f in group.flags)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text} s is beyond any clock's reach; give at most {MAX_SECONDS:,.0f} s "
            "(about 115 days), or no --timeout"
        )
    return value


# --- flags more than one command takes -------------------------------------------------------

MODEL_EXPLORER_HELP = (
    "with --layers: write Model Explorer node data (error ratio per ONNX node) for its graph view"
)
JSON = flag("--json", metavar="FILE", help="write the parity.report/1 JSON report", path=WRITES)
HTML = flag("--html", metavar="FILE", help="write a self-contained HTML report", path=WRITES)
MODEL_EXPLORER = flag(
    "--model-explorer", metavar="FILE.json", help=MODEL_EXPLORER_HELP, path=WRITES
)
TOLERANCES = Group(
    f"tolerances (an element passes when {RULE_TEXT})",
    (
        flag("--atol", type=float, help=f"global atol (default {DEFAULT_ATOL:g})"),
        flag("--rtol", type=float, help=f"global rtol (default {DEFAULT_RTOL:g})"),
        flag(
            "--tol",
            action="append",
            metavar="NAME=ATOL[:RTOL]",
            help="per-output tolerance (repeatable)",
        ),
        flag(
            "--tolerances",
            metavar="FILE",
            help='JSON: {"default": {"atol":..,"rtol":..}, "outputs": {NAME: {...}}}',
            path=READS,
        ),
    ),
)
MAX_MEMORY = flag(
    "--max-memory",
    metavar="SIZE",
    help="memory budget for inputs, feeds, reference and saved-run arrays, a .pt2's "
    "weights and an hf: model's parameters, checked before they are allocated, e.g. 16G "
    f"(default {format_size(DEFAULT_MAX_MEMORY)})",
)
DEBUG = Group(None, (flag("--debug", action="store_true", help="show tracebacks"),))

# --- validate ---------------------------------------------------------------------------------

MODEL = Group(
    "model and ONNX file",
    (
        flag(
            "--model",
            metavar="SPEC",
            help="demo:NAME | FILE.pt2 | TorchScript file | FILE.py:CALLABLE | "
            "package.module:CALLABLE | hf:DIR (a local transformers directory)",
            path=READS,
        ),
        flag(
            "--onnx",
            action="append",
            metavar="FILE",
            help="the ONNX file (optional for demo:NAME); repeat to compare several side by "
            "side; without --model and --reference the first is the reference (ONNX against ONNX)",
            path=READS,
        ),
        flag(
            "--weights",
            metavar="FILE",
            help="state dict: .safetensors or torch file",
            path=READS,
        ),
        flag(
            "--reference",
            metavar="REF.npz",
            help="stored reference outputs instead of a torch model (needs --inputs)",
            path=READS,
        ),
    ),
)
INPUTS = Group(
    "inputs",
    (
        flag(
            "--dim",
            action="append",
            metavar="NAME=SIZE",
            help="size of a symbolic input dim (repeatable); INPUT:AXIS=SIZE sizes a dynamic dim "
            "the ONNX file leaves unnamed",
        ),
        flag(
            "--input-sets",
            type=int,
            default=None,
            metavar="N",
            help="number of generated input sets; sets after the first grow every "
            "dynamic dim (default 2 for a file with dynamic axes, else 1)",
        ),
        flag("--seed", type=int, default=0, help="seed of generated inputs (default 0)"),
        flag(
            "--int-range",
            action="append",
            metavar="NAME=LOW:HIGH",
            help="range [LOW, HIGH) of an integer input (repeatable)",
        ),
        flag(
            "--float-range",
            action="append",
            metavar="[NAME=]LO:HI",
            help="draw generated float inputs uniformly in [LO, HI]: every one, or input NAME "
            "(repeatable; --float-range=-1:1 for a negative LO). Default: standard normal, or a "
            "quantized input's calibrated range",
        ),
        flag(
            "--inputs",
            action="append",
            metavar="FILE.npz",
            help="your own feeds, one input set per file (repeatable)",
            path=READS,
        ),
    ),
)
DATA = Group(
    "answers on your data (what changes per sample: classes, neighbours, accuracy)",
    (
        flag(
            "--data",
            metavar="PATH",
            help="your samples instead of generated inputs: a .npy / .npz (arrays named as the "
            "inputs, leading sample axis), a .parquet / .jsonl / .arrow table (columns named as "
            "the inputs), or a folder of samples (ImageFolder: CLASS/FILE); a path or a URI "
            "(s3://bucket/test.npz, an s3:// prefix as a folder; pip install fsspec s3fs)",
            path=READS,
            uri_in_place=True,
        ),
        flag(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            metavar="N",
            help=f"samples per batch (default {DEFAULT_BATCH_SIZE}; a file with a fixed batch "
            "size: that one)",
        ),
        flag("--limit", type=int, metavar="N", help="judge the first N samples only"),
        flag(
            "--preprocess",
            metavar="FILE.py:FN",
            help="a function from a sample's path to a dict of input arrays (code: trusted as "
            "--model FILE.py:make)",
            path=READS,
        ),
        flag(
            "--labels",
            metavar="FILE.npy|COLUMN",
            help="one label per sample: accuracy of both sides, its difference and a paired 95%% "
            "interval (an ImageFolder's labels are its folders)",
        ),
        flag(
            "--max-bad",
            default=str(DEFAULT_MAX_BAD),
            metavar="FRACTION",
            help="samples that may be unreadable, skipped by name, before the run ends with "
            f"exit 2 (default {DEFAULT_MAX_BAD:g}, or write 1%%)",
        ),
        flag(
            "--data-task",
            action="append",
            metavar="NAME=TASK",
            help="the same as --task NAME=TASK: what output NAME is, classification | embedding "
            "| regression (default: inferred from its name, shape and an hf: config's id2label)",
        ),
        flag(
            "--engine",
            choices=ENGINES,
            default="local",
            help="where the batches run: local (this process, default) or ray (shards of the "
            "data set on a Ray cluster, the same numbers; pip install -e '.[ray]')",
        ),
        flag(
            "--ray-address",
            metavar="ADDR",
            help="with --engine ray: an existing Ray cluster (e.g. auto, HOST:PORT or "
            "ray://head:10001); default: a local one",
        ),
        flag(
            "--workers",
            type=int,
            metavar="N",
            help="with --engine ray: actors at most, one CPU each (default: the cluster's "
            "CPUs); without --ray-address also the local cluster's CPUs (default: this "
            "machine's)",
        ),
        flag(
            "--min-agreement",
            action="append",
            metavar="NAME=FRACTION",
            help="judge output NAME on its answers: it passes when at least FRACTION of the "
            "samples give the same answer (e.g. 0.995), whatever its element errors",
        ),
    ),
)
RUNTIME = Group(
    "ONNX Runtime",
    (
        flag(
            "--provider",
            default="CPUExecutionProvider",
            metavar="NAME[,NAME...]",
            help="execution provider(s), comma-separated: one candidate each "
            "(default CPUExecutionProvider)",
        ),
        flag(
            "--ort-opt-level",
            default="all",
            metavar="LEVEL[,LEVEL...]",
            help="graph optimisation level(s) disable | basic | extended | all, comma-separated: "
            "one candidate each (default all)",
        ),
    ),
)
REPORTS = Group(
    "reports",
    (
        JSON,
        HTML,
        flag(
            "--save-run",
            metavar="FILE",
            help="save the run (reopens without the model)",
            path=WRITES,
        ),
        flag(
            "--save-reference",
            metavar="REF.npz",
            help="save the torch outputs, for later --reference runs",
            path=WRITES,
        ),
        MODEL_EXPLORER,
    ),
)
LAYERS = Group(
    "layers (where the export starts to diverge)",
    (
        flag(
            "--layers",
            action="store_true",
            help="also compare intermediate values and name the op where the error is born "
            '(adds "layers" to --json; the exit code stays the outputs\' verdict)',
        ),
        flag(
            "--write-fixed",
            metavar="FILE.onnx",
            help="with --layers, ONNX against ONNX and a float16 candidate: write the reference "
            "converted again with the nodes found to keep in float32 (layers.keep_float32)",
        ),
        flag(
            "--layers-memory",
            type=int,
            default=1024,
            metavar="MB",
            help="most memory for ONNX Runtime's extra outputs per batch (default 1024)",
        ),
        flag(
            "--repro",
            metavar="DIR",
            help="write a standalone repro of the confirmed first divergence to DIR "
            "(model.onnx, test_data_set_0/*.pb, repro.py, README.md; numpy+onnx+onnxruntime "
            "only); implies --layers",
            path=WRITES,
        ),
    ),
)
NOISE_FLOOR = Group(
    None,
    (
        flag(
            "--noise-floor",
            action="store_true",
            help="also run the torch model in float64 (and at a float16/bfloat16 file's "
            "precision) and say, per float32 output, whether ONNX's error is rounding at the "
            'precision the file computes it (int8: quantization noise) (adds "noise" to --json '
            "outputs; the verdict stays the tolerance's)",
        ),
        flag(
            "--no-noise-floor",
            action="store_true",
            help="do not measure the noise floor by default: without it, a run whose outputs "
            "fail (and that asks for no analysis) runs torch in float64 on the failing input "
            "sets (the two smallest) when the model has at most 50 M parameters, to say "
            "rounding or bug",
        ),
        flag(
            "--suggest",
            action="store_true",
            help="suggest per-output tolerances (k x the noise floor with --noise-floor, else "
            "2 x the smallest passing atol), each checked on as many fresh input sets (another "
            "seed, larger sizes) before it is shown; none for an output with a bug finding "
            '(adds "suggested_tolerances" to --json)',
        ),
        flag(
            "--judge",
            choices=("tolerance", "cause"),
            default="tolerance",
            help="how the verdict (and the exit code) is decided: 'tolerance' (default) passes "
            "every output within atol + rtol*|ref|; 'cause' exits 1 on a bug and 0 where every "
            "difference is what the file was meant to do (its precision's rounding, its "
            "quantization, a tool's intended approximation), measured (it measures the noise "
            "floor where it must; docs/deploy.md)",
        ),
        flag(
            "--stages",
            action="store_true",
            help="several --onnx files are one pipeline's stages in order (an export, its "
            "optimised file, its float16 copy): each is also judged against the one before, "
            "and the first where the numbers break is named (without it: only where every "
            "file after the first is a conversion, made by no exporter)",
        ),
        flag(
            "--no-quantized-reference",
            action="store_true",
            help="do not judge a file's weight-only quantized ops (int4 MatMulNBits, ...) "
            "against torch with the file's own dequantized weights (on by default where such "
            'ops are found: adds "quantization" to --json), nor a failing file\'s intended '
            "approximations (FastGelu's tanh GELU, 16-bit weights) against torch doing the "
            'same (adds "approximation")',
        ),
    ),
)
LIMITS = Group(
    "limits",
    (
        flag(
            "--timeout",
            type=_seconds,
            metavar="SECONDS",
            help="time limit for the whole run; past it, exit 2 (default: none)",
        ),
        MAX_MEMORY,
    ),
)
HF = Group(
    "Hugging Face models (--model hf:DIR): an LLM is validated on every generate() "
    "step, an encoder on one forward",
    (
        flag(
            "--prompt",
            action="append",
            metavar="TEXT",
            help=f"prompt; repeat for a left-padded batch (default {DEFAULT_PROMPT!r})",
        ),
        flag(
            "--max-new-tokens",
            type=int,
            metavar="N",
            help="tokens generate() adds greedily: N forward calls, 1 prefill + N-1 decode "
            f"steps (default {DEFAULT_MAX_NEW_TOKENS})",
        ),
        flag(
            "--random-weights",
            action="store_true",
            help="build the model from its config with random weights (weights are not read)",
        ),
        flag(
            "--config-override",
            action="append",
            metavar="KEY=VALUE",
            help="change the config before building the model, e.g. num_hidden_layers=1",
        ),
        flag(
            "--task",
            action="append",
            metavar="TASK|NAME=TASK",
            help="the task (Optimum's names: text-classification, token-classification, "
            "question-answering, image-classification, object-detection, feature-extraction, "
            "text-generation, ...) whose class builds the model (default: config.architectures); "
            "with --data, NAME=classification|embedding|regression says what output NAME is "
            "(repeatable; any model)",
        ),
        flag(
            "--no-generation",
            action="store_true",
            help="causal LMs: skip free-running generation (ONNX Runtime generating greedily "
            "on its own after the steps, compared token by token with torch's generate())",
        ),
        flag(
            "--export-path",
            metavar="FILE",
            help="where Parity's own export goes when --onnx is not given (default: a temp dir)",
            path=WRITES,
        ),
    ),
)
"""The flags only `--model hf:DIR` uses (parity.cli.hf_args turns them into HfOptions)."""

VALIDATION_GROUPS = (
    MODEL,
    INPUTS,
    DATA,
    RUNTIME,
    TOLERANCES,
    REPORTS,
    LAYERS,
    NOISE_FLOOR,
    LIMITS,
    DEBUG,
    HF,
)
"""validate's flags, in --help's order (also the dashboard's: it can open on a validation)."""

VALIDATE = Command(
    "validate",
    help="run torch and ONNX Runtime on the same inputs and compare every output",
    description="Exit 0: every output passes; 1: some output fails; 2: the run could not be made.",
    groups=VALIDATION_GROUPS,
)

# --- report, demos, dashboard, sweep ----------------------------------------------------------

REPORT = Command(
    "report",
    help="re-judge and report a saved run (no model needed)",
    groups=(
        Group(None, (flag("run", metavar="RUN", help="a file written by --save-run"),)),
        Group("reports", (JSON, HTML, MODEL_EXPLORER)),
        TOLERANCES,
        Group("limits", (MAX_MEMORY,)),
        DEBUG,
    ),
)
DEMOS = Command("demos", help="list the built-in demos")
DASHBOARD = Command(
    "dashboard",
    help="start the dashboard (on a saved run, a sweep folder or a validation)",
    description=DASHBOARD_HELP,
    raw_description=True,
    groups=(
        Group(
            None,
            (
                flag(
                    "path",
                    nargs="?",
                    metavar="PATH",
                    help="a saved run (.parity.npz) or a `parity sweep` folder to open",
                ),
            ),
        ),
        Group(
            "dashboard",
            (
                flag(
                    "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
                ),
                flag(
                    "--host",
                    default=DEFAULT_HOST,
                    metavar="ADDR",
                    help=f"address to bind (default {DEFAULT_HOST}); see --allow-host for 0.0.0.0",
                ),
                flag(
                    "--allow-host",
                    action="append",
                    metavar="NAME",
                    help="a host name (or IP) the dashboard may be opened under besides "
                    "localhost (repeatable; needed with --host 0.0.0.0)",
                ),
                flag(
                    "--max-upload",
                    type=int,
                    metavar="MB",
                    help="largest file a user may upload, in MB (default "
                    f"{SERVER_OPTIONS[UPLOAD_OPTION]})",
                ),
                flag(
                    "--trust-code",
                    action="store_true",
                    help="let the dashboard load TorchScript files and Python factories (code) "
                    "that users upload or name: everyone who can reach it can then run code here",
                ),
            ),
        ),
        *VALIDATION_GROUPS,
    ),
)
SWEEP = Command(
    "sweep",
    help="validate every pair of a manifest, each in its own process, locally or on Ray",
    description="Exit 2: some pair could not be run; 1: some pair failed; 0: all pass.",
    groups=(
        Group(
            None,
            (
                flag("manifest", metavar="MANIFEST", help="JSON manifest (schema parity.sweep/1)"),
                flag("--out", required=True, metavar="DIR", help="results folder"),
                flag(
                    "--workers",
                    type=int,
                    metavar="N",
                    help="pairs at once (default: this machine's CPU count; with --ray-address: "
                    "no limit)",
                ),
                flag(
                    "--engine",
                    choices=("local", "ray"),
                    default="local",
                    help="local: processes on this machine (default); ray: one Ray task per pair "
                    "(pip install -e '.[ray]')",
                ),
                flag(
                    "--ray-address",
                    metavar="ADDR",
                    help="an existing Ray cluster (e.g. ray://head:10001 or auto); default: a "
                    "local one",
                ),
                flag(
                    "--resume",
                    action="store_true",
                    help="skip pairs already done with the same arguments, input files and "
                    "versions",
                ),
                flag(
                    "--timeout",
                    type=float,
                    default=DEFAULT_TIMEOUT_S,
                    metavar="S",
                    help=f"seconds per pair before its process is killed (default "
                    f"{DEFAULT_TIMEOUT_S:g}; 0: none)",
                ),
            ),
        ),
    ),
)

COMMANDS = (VALIDATE, REPORT, DEMOS, DASHBOARD, SWEEP)
DESCRIPTION = (
    "Check, element by element, that an ONNX export gives the numbers of its PyTorch model."
)


def build_parser() -> argparse.ArgumentParser:
    """The `parity` parser, built from COMMANDS (a usage error is one line: Parser)."""
    parser = Parser(prog="parity", allow_abbrev=False, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        extra: dict[str, Any] = {"description": command.description} if command.description else {}
        if command.raw_description:
            extra["formatter_class"] = argparse.RawDescriptionHelpFormatter
        p = sub.add_parser(command.name, help=command.help, allow_abbrev=False, **extra)
        for group in command.groups:
            group.add_to(p)
    parser.set_defaults(_commands=dict(sub.choices))  # each command's own flags, for errors
    return parser
