"""`parity` — the validation core, headless, for terminals and CI.

Exit codes: 0 every output passes, 1 some output fails, 2 the run could not be made.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import sys
import textwrap
import traceback
from collections.abc import Sequence
from typing import NoReturn

from parity.errors import ParityError, UsageError, WriteError, describe_error
from parity.load.quiet import set_debug
from parity.path_flags import reads, writes
from parity.results import ValidationRun
from parity.run.input_binding import SignatureMismatch
from parity.show.format import format_run, format_verdict
from parity.tolerances import Tolerance, Tolerances, parse_tol_arg
from parity.verdict import ExitCode, Verdict

# --- the parser: usage errors in one line, with a did-you-mean ------------------------------
# argparse answers `--input-set 2` with the command's whole usage (16 lines) and
# "unrecognized arguments"; a newcomer needs the one line that names the flag to write.

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")


def close_match(word: str, known: Sequence[str]) -> str | None:
    """The known word `word` was most likely meant to be (difflib's ratio >= 0.6), or None."""
    found = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`parity validate: error: ...`, exit 2),
    with a did-you-mean for an unknown flag or command. Its subcommands are Parsers too."""

    def error(self, message: str) -> NoReturn:
        message = self._with_suggestion(message)
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """As argparse's, but arguments nobody took are refused by the command they were
        given to (its flags are the ones a did-you-mean looks among)."""
        parsed, unknown = self.parse_known_args(args, namespace)
        commands = getattr(parsed, "_commands", None) or {}
        if hasattr(parsed, "_commands"):
            del parsed._commands
        if unknown:
            command = commands.get(getattr(parsed, "command", None), self)
            command.error(unknown_arguments(command, unknown))
        return parsed

    def _with_suggestion(self, message: str) -> str:
        invalid = _INVALID_CHOICE.search(message)
        choices = self._command_names()
        if invalid and choices and message.startswith("argument command"):
            word = invalid.group(1)
            guess = close_match(word, choices)
            known = ", ".join(choices)
            hint = f"did you mean {guess}? " if guess else ""
            return f"no command {word!r}: {hint}(commands: {known})"
        if message.startswith("the following arguments are required") and choices:
            return f"{message} (commands: {', '.join(choices)}; {self.prog} --help says more)"
        return message

    def _command_names(self) -> list[str]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return list(action.choices)
        return []


def unknown_arguments(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """argparse's "unrecognized arguments: ..." with the flag each unknown one was likely
    meant to be, among `parser`'s own (`--input-set` -> `--input-sets`)."""
    flags = [f for f in parser._option_string_actions if f.startswith("--")]
    guesses = []
    for item in unknown:
        if not item.startswith("-") or item == "-":
            continue
        guess = close_match(item.partition("=")[0], flags)
        if guess is not None and guess not in guesses:
            guesses.append(guess)
    message = f"unrecognized arguments: {' '.join(unknown)}"
    if guesses:
        return f"{message}; did you mean {' / '.join(guesses)}?"
    return f"{message} ({parser.prog} --help lists the flags)"


MODEL_EXPLORER_HELP = (
    "with --layers: write Model Explorer node data (error ratio per ONNX node) for its graph view"
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="parity",
        allow_abbrev=False,
        description="Check, element by element, that an ONNX export gives the numbers of its "
        "PyTorch model.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser(
        "validate",
        help="run torch and ONNX Runtime on the same inputs and compare every output",
        description="Exit 0: every output passes; 1: some output fails; 2: the run could not "
        "be made.",
        allow_abbrev=False,
    )
    add_validate_arguments(v)

    r = sub.add_parser(
        "report", help="re-judge and report a saved run (no model needed)", allow_abbrev=False
    )
    r.add_argument("run", metavar="RUN", help="a file written by --save-run")
    writes(r.add_argument("--json", metavar="FILE"))
    writes(r.add_argument("--html", metavar="FILE"))
    writes(r.add_argument("--model-explorer", metavar="FILE.json", help=MODEL_EXPLORER_HELP))
    r.add_argument("--atol", type=float, default=None)
    r.add_argument("--rtol", type=float, default=None)
    r.add_argument("--tol", action="append", default=[], metavar="NAME=ATOL[:RTOL]")
    reads(r.add_argument("--tolerances", metavar="FILE"))
    _add_max_memory(r)
    r.add_argument("--debug", action="store_true")

    sub.add_parser("demos", help="list the built-in demos", allow_abbrev=False)
    from parity.launch import DASHBOARD_HELP, add_dashboard_arguments

    d = sub.add_parser(
        "dashboard",
        help="start the dashboard (on a saved run, a sweep folder or a validation)",
        description=DASHBOARD_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_dashboard_arguments(d)
    add_validate_arguments(d)
    from parity.sweep.cli import add_sweep_parser

    add_sweep_parser(sub)
    parser.set_defaults(_commands=dict(sub.choices))  # each command's own flags, for errors
    return parser


def add_validate_arguments(v: argparse.ArgumentParser) -> None:
    """validate's flags (also the dashboard's: it can open on a validation)."""
    model = v.add_argument_group("model and ONNX file")
    reads(
        model.add_argument(
            "--model",
            metavar="SPEC",
            help="demo:NAME | FILE.pt2 | TorchScript file | FILE.py:CALLABLE | "
            "package.module:CALLABLE | hf:DIR (a local transformers directory)",
        )
    )
    reads(
        model.add_argument(
            "--onnx",
            action="append",
            default=[],
            metavar="FILE",
            help="the ONNX file (optional for demo:NAME); repeat to compare several side by "
            "side; without --model and --reference the first is the reference (ONNX against ONNX)",
        )
    )
    reads(
        model.add_argument(
            "--weights", metavar="FILE", help="state dict: .safetensors or torch file"
        )
    )
    reads(
        model.add_argument(
            "--reference",
            metavar="REF.npz",
            help="stored reference outputs instead of a torch model (needs --inputs)",
        )
    )
    inputs = v.add_argument_group("inputs")
    inputs.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=SIZE",
        help="size of a symbolic input dim (repeatable); INPUT:AXIS=SIZE sizes a dynamic dim "
        "the ONNX file leaves unnamed",
    )
    inputs.add_argument(
        "--input-sets",
        type=int,
        default=1,
        metavar="N",
        help="number of generated input sets; sets after the first grow every "
        "symbolic dim (default 1)",
    )
    inputs.add_argument("--seed", type=int, default=0, help="seed of generated inputs (default 0)")
    inputs.add_argument(
        "--int-range",
        action="append",
        default=[],
        metavar="NAME=LOW:HIGH",
        help="range [LOW, HIGH) of an integer input (repeatable)",
    )
    inputs.add_argument(
        "--float-range",
        action="append",
        default=[],
        metavar="[NAME=]LO:HI",
        help="draw generated float inputs uniformly in [LO, HI]: every one, or input NAME "
        "(repeatable; --float-range=-1:1 for a negative LO). Default: standard normal, or a "
        "quantized input's calibrated range",
    )
    reads(
        inputs.add_argument(
            "--inputs",
            action="append",
            default=[],
            metavar="FILE.npz",
            help="your own feeds, one input set per file (repeatable)",
        )
    )
    runtime = v.add_argument_group("ONNX Runtime")
    runtime.add_argument(
        "--provider",
        default="CPUExecutionProvider",
        metavar="NAME[,NAME...]",
        help="execution provider(s), comma-separated: one candidate each "
        "(default CPUExecutionProvider)",
    )
    runtime.add_argument(
        "--ort-opt-level",
        default="all",
        metavar="LEVEL[,LEVEL...]",
        help="graph optimisation level(s) disable | basic | extended | all, comma-separated: "
        "one candidate each (default all)",
    )
    tol = v.add_argument_group("tolerances (element passes when |onnx-ref| <= atol + rtol*|ref|)")
    tol.add_argument("--atol", type=float, default=None, help="global atol (default 1e-5)")
    tol.add_argument("--rtol", type=float, default=None, help="global rtol (default 0)")
    tol.add_argument(
        "--tol",
        action="append",
        default=[],
        metavar="NAME=ATOL[:RTOL]",
        help="per-output tolerance (repeatable)",
    )
    reads(
        tol.add_argument(
            "--tolerances",
            metavar="FILE",
            help='JSON: {"default": {"atol":..,"rtol":..}, "outputs": {NAME: {...}}}',
        )
    )
    out = v.add_argument_group("reports")
    writes(out.add_argument("--json", metavar="FILE", help="write the parity.report/1 JSON report"))
    writes(out.add_argument("--html", metavar="FILE", help="write a self-contained HTML report"))
    writes(
        out.add_argument(
            "--save-run", metavar="FILE", help="save the run (reopens without the model)"
        )
    )
    writes(
        out.add_argument(
            "--save-reference",
            metavar="REF.npz",
            help="save the torch outputs, for later --reference runs",
        )
    )
    writes(out.add_argument("--model-explorer", metavar="FILE.json", help=MODEL_EXPLORER_HELP))
    layers = v.add_argument_group("layers (where the export starts to diverge)")
    layers.add_argument(
        "--layers",
        action="store_true",
        help="also compare intermediate values and name the op where the error is born "
        '(adds "layers" to --json; the exit code stays the outputs\' verdict)',
    )
    layers.add_argument(
        "--write-fixed",
        metavar="FILE.onnx",
        help="with --layers, ONNX against ONNX and a float16 candidate: write the reference "
        "converted again with the nodes found to keep in float32 (layers.keep_float32)",
    )
    layers.add_argument(
        "--layers-memory",
        type=int,
        default=1024,
        metavar="MB",
        help="most memory for ONNX Runtime's extra outputs per batch (default 1024)",
    )
    layers.add_argument(
        "--repro",
        metavar="DIR",
        help="write a standalone repro of the confirmed first divergence to DIR (model.onnx, "
        "test_data_set_0/*.pb, repro.py, README.md; numpy+onnx+onnxruntime only); "
        "implies --layers",
    )
    v.add_argument(
        "--noise-floor",
        action="store_true",
        help="also run the torch model in float64 (and at a float16/bfloat16 file's "
        "precision) and say, per float32 output, whether ONNX's error is rounding at the "
        'precision the file computes it (int8: quantization noise) (adds "noise" to --json '
        "outputs; the verdict stays the tolerance's)",
    )
    limits = v.add_argument_group("limits")
    limits.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="time limit for the whole run; past it, exit 2 (default: none)",
    )
    _add_max_memory(limits)
    v.add_argument("--debug", action="store_true", help="show tracebacks")
    _add_hf_arguments(v)


def _add_max_memory(parser) -> None:
    from parity.run.budget import DEFAULT_MAX_MEMORY, format_size

    parser.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="memory budget for inputs, feeds, reference and saved-run arrays, a .pt2's "
        "weights and an hf: model's parameters, checked before they are allocated, e.g. 16G "
        f"(default {format_size(DEFAULT_MAX_MEMORY)})",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _max_memory(args: argparse.Namespace) -> int | None:
    from parity.run.budget import parse_size

    return None if args.max_memory is None else parse_size(args.max_memory)


def _add_hf_arguments(parser: argparse.ArgumentParser) -> None:
    try:
        from parity.hf.cli_args import add_hf_arguments
    except ImportError:
        return
    add_hf_arguments(parser)


def _parse_pairs(items: Sequence[str], flag: str, kind: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{flag} {item!r}: expected {kind}")
        pairs[name] = value
    return pairs


def parse_list(text: str, flag: str) -> tuple[str, ...]:
    """A comma-separated flag value (``disable,all``) as its items, blanks refused."""
    items = tuple(item.strip() for item in text.split(","))
    if not all(items):
        raise UsageError(f"{flag} {text!r}: expected NAME[,NAME...] without empty items")
    return items


def parse_dims(items: Sequence[str]) -> dict[str, int]:
    dims = {}
    for name, value in _parse_pairs(items, "--dim", "NAME=SIZE or INPUT:AXIS=SIZE").items():
        try:
            dims[name] = int(value)
        except ValueError as exc:
            raise UsageError(f"--dim {name}={value}: SIZE must be an integer") from exc
        if dims[name] < 0:
            raise UsageError(f"--dim {name}={value}: SIZE must be >= 0")
    return dims


def parse_int_ranges(items: Sequence[str]) -> dict[str, tuple[int, int]]:
    ranges = {}
    for name, value in _parse_pairs(items, "--int-range", "NAME=LOW:HIGH").items():
        low, sep, high = value.partition(":")
        try:
            bounds = (int(low), int(high))
        except ValueError as exc:
            raise UsageError(f"--int-range {name}={value}: expected integers LOW:HIGH") from exc
        if not sep or bounds[0] >= bounds[1]:
            raise UsageError(f"--int-range {name}={value}: expected LOW:HIGH with LOW < HIGH")
        ranges[name] = bounds
    return ranges


def parse_float_ranges(
    items: Sequence[str],
) -> tuple[tuple[float, float] | None, dict[str, tuple[float, float]]]:
    """--float-range values: (the range for every float input or None, per input)."""
    from parity.run.inputs import parse_float_range

    every: tuple[float, float] | None = None
    ranges: dict[str, tuple[float, float]] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep:
            if every is not None:
                raise UsageError(f"--float-range {item}: give one LO:HI for every input")
            every = parse_float_range(item, "--float-range")
        elif not name:
            raise UsageError(f"--float-range {item!r}: expected [NAME=]LO:HI")
        else:
            ranges[name] = parse_float_range(value, f"--float-range {name}")
    return every, ranges


def tolerances_from_args(args: argparse.Namespace, *, base: Tolerances | None = None) -> Tolerances:
    """--tolerances file (else `base`) first, then --atol/--rtol over its default, then --tol."""
    tolerances = Tolerances.load(args.tolerances) if args.tolerances else (base or Tolerances())
    if args.atol is not None or args.rtol is not None:
        default = tolerances.default
        tolerances = tolerances.with_default(
            Tolerance(
                atol=default.atol if args.atol is None else args.atol,
                rtol=default.rtol if args.rtol is None else args.rtol,
            )
        )
    for item in args.tol:
        name, tolerance = parse_tol_arg(item, tolerances.default)
        tolerances = tolerances.with_output(name, tolerance)
    return tolerances


def _validate(args: argparse.Namespace) -> ValidationRun:
    from parity.hf.cli_args import hf_flags_given, hf_options_from_args
    from parity.load.specs import is_hf_spec
    from parity.pipeline import RunConfig, run_validation

    hf = None
    if is_hf_spec(args.model) or hf_flags_given(args):  # run_validation refuses stray flags
        hf = hf_options_from_args(args)
    float_range, float_ranges = parse_float_ranges(args.float_range)
    config = RunConfig(
        model=args.model,
        onnx=tuple(args.onnx) or None,
        weights=args.weights,
        dims=parse_dims(args.dim),
        n_input_sets=args.input_sets,
        seed=args.seed,
        int_ranges=parse_int_ranges(args.int_range),
        float_range=float_range,
        float_ranges=float_ranges,
        input_files=tuple(args.inputs),
        provider=parse_list(args.provider, "--provider"),
        ort_opt_level=parse_list(args.ort_opt_level, "--ort-opt-level"),
        tolerances=tolerances_from_args(args),
        reference_file=args.reference,
        hf=hf,
        layers=args.layers or bool(args.repro),
        layers_memory_mb=args.layers_memory,
        noise_floor=args.noise_floor,
        timeout=args.timeout,
        max_memory=_max_memory(args),
    )
    return run_validation(config, progress=_progress_printer())


def _progress_printer():
    if not sys.stderr.isatty():
        return None

    def show(event) -> None:
        print(f"\r\033[K[{event.elapsed:6.1f}s] {event.message}", end="", file=sys.stderr)
        if event.step == "done":
            print("\r\033[K", end="", file=sys.stderr)

    return show


_OUTPUTS = (
    ("save_run", "saved run"),
    ("save_reference", "reference outputs"),
    ("json", "JSON report"),
    ("html", "HTML report"),
    ("model_explorer", "Model Explorer node data"),
    ("write_fixed", "fixed float16 file"),
)


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an unwritable --json/--html/--save-* path before the run, not after it."""
    from parity.files.atomic import check_writable

    if (
        getattr(args, "model_explorer", None)
        and args.command == "validate"
        and not getattr(args, "layers", False)
        and not getattr(args, "repro", None)
    ):
        raise UsageError("--model-explorer needs --layers (it colours the compared layers)")
    if getattr(args, "write_fixed", None) and not getattr(args, "layers", False):
        raise UsageError("--write-fixed needs --layers (it writes what the layers found)")
    for attr, what in _OUTPUTS:
        if getattr(args, attr, None):
            check_writable(getattr(args, attr), what)
    if getattr(args, "repro", None) is not None:  # `--repro ''` too: refused, not ignored
        from parity.files.atomic import check_folder_writable

        check_folder_writable(args.repro, "repro folder")
    if getattr(args, "write_fixed", None):
        _check_write_fixed(args)


def _check_write_fixed(args: argparse.Namespace) -> None:
    """--write-fixed writes a reference converted again: it needs ONNX against ONNX, and it
    may not name a file the same run reads or writes (the float32 reference, a report)."""
    from parity.files.atomic import same_file

    if args.model or args.reference or len(args.onnx) < 2:
        raise UsageError(
            "--write-fixed needs ONNX against ONNX: no --model or --reference, the float32 "
            "reference as the first --onnx and the float16 candidate after it"
        )
    named = [("--onnx", path) for path in args.onnx]
    named += [("--inputs", path) for path in args.inputs]
    named += [
        (f"--{a.replace('_', '-')}", getattr(args, a, None)) for a in ("weights", "tolerances")
    ]
    named += [(f"--{a.replace('_', '-')}", getattr(args, a, None)) for a, _ in _OUTPUTS[:-1]]
    for flag, path in named:
        if path and same_file(args.write_fixed, path):
            raise UsageError(
                f"--write-fixed {args.write_fixed} is also {flag} {path}: writing it would "
                "overwrite that file; name another one"
            )


def _write_outputs(run: ValidationRun, args: argparse.Namespace) -> None:
    from parity.reports.report import report_dict, write_json

    if getattr(args, "save_run", None):
        from parity.reports.saved_run import save_run

        save_run(run, args.save_run)
    if getattr(args, "save_reference", None):
        from parity.run.reference import save_reference_outputs

        save_reference_outputs(args.save_reference, run)
    if args.json:
        write_json(args.json, report_dict(run))
    if args.html:
        from parity.reports.html_report import write_html_report

        write_html_report(run, args.html)
    if getattr(args, "model_explorer", None):
        _write_model_explorer(run, args.model_explorer)
    if getattr(args, "write_fixed", None):
        _write_fixed(run, args.write_fixed)
    if getattr(args, "repro", None):
        from parity.layers.repro import write_repro

        command = "parity " + " ".join(shlex.quote(a) for a in (args.argv or ()))
        print(write_repro(run.layers, args.repro, command=command, onnx_path=run.onnx).message)


def _write_fixed(run: ValidationRun, path: str) -> None:
    """The float16 file with layers.keep_float32 kept in float32 (parity.layers.fp16). A run
    with nothing to fix keeps its verdict and reports: a note says why nothing was written."""
    from parity.layers.fp16 import write_fixed

    reference = run.provenance.reference_file
    check = run.layers.findings.get("keep_float32_check") if run.layers is not None else None
    if reference is None or not check or not check.get("fixed"):
        why = (
            "nothing needed fixing (no float16 value diverged for a node kept in float32 to cure)"
            if not check
            else "keeping the nodes found in float32 did not fix the float16 file"
        )
        print(f"--write-fixed: nothing written to {path}: {why}")
        return
    write_fixed(run.layers, reference, path)


def _write_model_explorer(run: ValidationRun, path: str) -> None:
    from parity.layers.model_explorer import write_node_data

    if run.layers is None:
        raise UsageError(
            f"no layers comparison to write to {path}: this run was made without --layers"
        )
    write_node_data(run.layers, path, pass_line=run.layers.threshold, onnx_path=run.onnx)


def _report(args: argparse.Namespace) -> ValidationRun:
    from parity.reports.saved_run import load_run
    from parity.run.budget import MemoryBudget

    run = load_run(args.run, budget=MemoryBudget.of(_max_memory(args)))
    if args.tolerances or args.atol is not None or args.rtol is not None or args.tol:
        run = run.rejudge(tolerances_from_args(args, base=run.tolerances))
    return run


def _demos() -> int:
    from parity.load.demos import DEMOS

    for demo in DEMOS.values():
        print(f"demo:{demo.name:<12} {demo.title}")
        if demo.tolerances is not None:
            flags = " ".join(
                f"--tol {name}={t.atol:g}:{t.rtol:g}" for name, t in demo.tolerances.outputs.items()
            )
            print(f"{'':17} passes with: {flags}")
    return ExitCode.PASS


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # one line on a usage error, with a did-you-mean
    args.argv = list(sys.argv[1:] if argv is None else argv)  # said in a repro's README
    set_debug(
        bool(getattr(args, "debug", False))
    )  # torch's and ORT's own logs, see parity.load.quiet
    if args.command == "demos":
        return _demos()
    if args.command == "sweep":
        from parity.sweep.cli import sweep_main

        return sweep_main(args, parser)
    watchdog = _start_watchdog(args)
    try:
        return _main(args)
    finally:
        if watchdog is not None:
            watchdog.cancel()


def _start_watchdog(args: argparse.Namespace):
    """--timeout: torch cannot be interrupted, so past the deadline (and a grace period for
    ORT's own termination) the process ends with exit 2; writes are atomic."""
    if getattr(args, "timeout", None) is None:
        return None
    from parity.errors import RunTimeout
    from parity.run.deadline import start_watchdog, timeout_message

    def on_timeout() -> None:
        message = timeout_message(args.timeout)
        unwritten = _write_error_report(args, "timeout", message, RunTimeout(message))
        print(f"parity: error: {message}{unwritten}", file=sys.stderr, flush=True)

    return start_watchdog(args.timeout, on_timeout)


def _validate_and_write(args: argparse.Namespace) -> ValidationRun:
    """What `parity validate` does before its verdict: the run, then the files it asks for."""
    _check_outputs(args)
    run = _validate(args)
    print(_format(run))
    _write_outputs(run, args)
    return run


def _dashboard(args: argparse.Namespace) -> int:
    from parity.launch import dashboard_main

    try:
        return dashboard_main(args, _validate_and_write)
    except Exception as exc:  # the validation it opens on could not be made: one line
        return _fail(args, *describe_error(exc), exc)


def _main(args: argparse.Namespace) -> int:
    if args.command == "dashboard":
        return _dashboard(args)
    try:
        _check_outputs(args)
        run = _validate(args) if args.command == "validate" else _report(args)
        print(_format(run))
        _write_outputs(run, args)
    except KeyboardInterrupt:
        print("parity: interrupted", file=sys.stderr)
        return ExitCode.ERROR
    except Exception as exc:  # a ParityError, or a bug the core did not classify: one line
        return _fail(args, *describe_error(exc), exc)
    if run.verdict is Verdict.ERROR:  # a candidate could not be run; the others are reported
        for info in run.candidate_list:
            if info.error is not None:
                print(f"parity: error: candidate {info.label}: {info.error}", file=sys.stderr)
        return ExitCode.ERROR
    return run.verdict.exit_code


def _format(run: ValidationRun) -> str:
    if run.is_generation:
        from parity.hf.generation_report import summary_line
        from parity.hf.steps_text import format_steps_table

        text = format_steps_table(run) + "\n\n" + format_verdict(run)
        text += "".join(f"\n{line}" for line in [summary_line(run)] if line)
    elif run.is_multi_candidate:  # candidates side by side
        from parity.show.candidates_text import format_candidates

        text = format_candidates(run)
    else:
        text = format_run(run)
    if any(c.noise is not None for c in run.comparisons):
        from parity.judge.noise import noise_lines

        lines = noise_lines(run.comparisons)
        text += "\n\nRounding noise (against torch in float64):\n" + "\n".join(
            f"  {line}" for line in lines
        )
        from parity.judge.suggest import noise_suggestion_lines, suggest_noise_tolerances

        head, *rest = noise_suggestion_lines(suggest_noise_tolerances(run))
        text += f"\n\n{head}\n" + "\n".join(f"  {line}" for line in rest)
    if run.layers is not None:
        from parity.layers.text import format_run_layers

        text += "\n\n" + format_run_layers(run)
    return text


def _fail(args: argparse.Namespace, kind: str, message: str, exc: BaseException) -> int:
    if args.debug:
        traceback.print_exception(exc)
    hint = " (--debug shows the traceback)" if kind == "internal" and not args.debug else ""
    unwritten = _write_error_report(args, kind, message, exc)
    print(f"parity: error: {message}{hint}{unwritten}", file=sys.stderr)
    if isinstance(exc, SignatureMismatch):  # the wrapper to write, after the one line
        print(textwrap.indent(exc.detail, "    "), file=sys.stderr)
    return ExitCode.ERROR


def _write_error_report(
    args: argparse.Namespace, kind: str, message: str, exc: BaseException
) -> str:
    """Write the --json error report; '' or, if it cannot be written, text for the one line."""
    if not getattr(args, "json", None):
        return ""
    if isinstance(exc, WriteError) and exc.path == str(args.json):
        return ""
    from parity.reports.report import error_report_dict, write_json

    try:
        tolerances = tolerances_from_args(args)
    except ParityError:
        tolerances = Tolerances()
    try:
        write_json(
            args.json,
            error_report_dict(
                model=getattr(args, "model", None) or getattr(args, "run", None),
                onnx=_first(getattr(args, "onnx", None)),
                tolerances=tolerances,
                kind=kind,
                message=message,
            ),
        )
    except WriteError as write_exc:
        return f"; and {write_exc.message}"
    return ""


def _first(value: str | list[str] | None) -> str | None:
    """--onnx is repeatable: an error report names the first file."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


if __name__ == "__main__":
    sys.exit(main())
