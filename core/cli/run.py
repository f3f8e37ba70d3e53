"""Executing a parsed command: the up-front checks, the validation or the re-judged saved
run, the --timeout watchdog, and the exit code (0 pass, 1 fail, 2 could not be made)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from parity.cli.definition import build_parser
from parity.cli.output import (
    fail,
    format_text,
    progress_printer,
    say,
    write_error_report,
    write_outputs,
)
from parity.cli.values import (
    max_memory_bytes,
    parse_dims,
    parse_float_ranges,
    parse_int_ranges,
    parse_list,
    tolerances_from_args,
)
from parity.errors import ParityError, UsageError, describe_error
from parity.load.quiet import set_debug
from parity.results import ValidationRun
from parity.run.progress import say_ended
from parity.text import terminal_text
from parity.verdict import ExitCode, Judge, Verdict


def _validate(args: argparse.Namespace) -> ValidationRun:
    """validate's flags as one RunConfig, run (hf: flags only with an hf: model)."""
    from parity.cli.hf_args import hf_flags_given, hf_options_from_args
    from parity.load.specs import is_hf_spec
    from parity.pipeline import RunConfig, run_validation

    args = _tasks_split(args)
    hf = None
    if is_hf_spec(args.model) or hf_flags_given(args):  # run_validation refuses stray flags
        hf = hf_options_from_args(args)
    from parity.sweep.names import given_names, renamed_text

    names = given_names()  # set by a sweep for its pairs: their files as its manifest says
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
        noise_floor_default=not getattr(args, "no_noise_floor", False),
        suggest=bool(getattr(args, "suggest", False)),
        quantized_reference=not getattr(args, "no_quantized_reference", False),
        judge=Judge(getattr(args, "judge", "tolerance")),
        stages=bool(getattr(args, "stages", False)),
        repro=getattr(args, "repro", None) or None,
        repro_command=renamed_text(
            "parity " + " ".join(shlex.quote(a) for a in (getattr(args, "argv", None) or ())),
            names,
        ),
        timeout=args.timeout,
        max_memory=max_memory_bytes(args),
        data=_data_options(args),
    )
    run = run_validation(config, progress=progress_printer())
    return run.renamed(names)  # a sweep pair: files named as its manifest names them


def _tasks_split(args: argparse.Namespace) -> argparse.Namespace:
    """--task carries two things that never look alike: NAME=TASK (what a --data output is,
    as --data-task) and a bare Optimum task name (an hf: model's class), which never holds
    "=". The flags as if each had been given to its own."""
    from parity.data.result import TASKS

    given = getattr(args, "task", None) or []
    bare = [t for t in given if "=" not in t]
    pairs = [t for t in given if "=" in t]
    if bare and bare[0] in TASKS:
        raise UsageError(
            f"--task {bare[0]}: name the output, --task NAME={bare[0]} (a bare --task is the "
            "Optimum task an hf: model is built for)"
        )
    if len(bare) > 1:
        raise UsageError(f"--task: one Optimum task for an hf: model, got {', '.join(bare)}")
    split = argparse.Namespace(**vars(args))
    split.task = bare[0] if bare else None
    split.data_task = [*(getattr(args, "data_task", None) or []), *pairs]
    return split


def _data_options(args: argparse.Namespace):  # -> DataOptions | None
    """--data and its flags as DataOptions (None without --data; its flags alone refused)."""
    from parity.data.options import DataOptions, parse_fraction, parse_min_agreement, parse_pairs

    data = getattr(args, "data", None)
    given = [f for f in ("preprocess", "labels", "data_task", "min_agreement", "limit",
                         "ray_address", "workers") if getattr(args, f, None)]  # fmt: skip
    if getattr(args, "engine", "local") != "local":
        given.append("engine")
    if not data:
        if given:
            name = "task NAME=TASK" if given[0] == "data_task" else given[0].replace("_", "-")
            raise UsageError(f"--{name} applies only with --data PATH")
        return None
    if getattr(args, "save_reference", None):
        raise UsageError(
            "--save-reference does not apply with --data: a data run keeps no batch's outputs"
        )
    return DataOptions(
        path=data,
        batch_size=args.batch_size,
        limit=args.limit,
        preprocess=args.preprocess,
        labels=args.labels,
        max_bad=parse_fraction(str(args.max_bad), "--max-bad"),
        tasks=parse_pairs(args.data_task, "--task"),
        min_agreement=parse_min_agreement(args.min_agreement),
        engine=args.engine,
        ray_address=args.ray_address,
        workers=args.workers,
    )


_OUTPUTS = (
    ("save_run", "saved run"),
    ("save_reference", "reference outputs"),
    ("json", "JSON report"),
    ("html", "HTML report"),
    ("model_explorer", "Model Explorer node data"),
    ("write_fixed", "fixed float16 file"),
)


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before the run, an output that cannot be written, that would replace one of
    the run's inputs or another output (parity.files.outputs), not after it."""
    from parity.files.atomic import check_writable
    from parity.files.outputs import check_run_files

    if (
        getattr(args, "model_explorer", None)
        and args.command == "validate"
        and not getattr(args, "layers", False)
        and not getattr(args, "repro", None)
    ):
        raise UsageError("--model-explorer needs --layers (it colours the compared layers)")
    if getattr(args, "write_fixed", None) and not getattr(args, "layers", False):
        raise UsageError("--write-fixed needs --layers (it writes what the layers found)")
    outputs = _output_files(args)
    for out in outputs:
        check_writable(out.path, out.what)
    if getattr(args, "repro", None) is not None:  # `--repro ''` too: refused, not ignored
        from parity.files.outputs import check_repro_folder

        check_repro_folder(args.repro, "repro folder")
    if getattr(args, "write_fixed", None):
        _check_write_fixed(args)
    try:
        check_run_files(outputs, _input_files(args), repro=getattr(args, "repro", None))
    except ParityError:  # an output names an input or another output: write none of them
        args.outputs_refused = True
        raise


def _output_files(args: argparse.Namespace) -> list:
    """Every file the flags name for writing (a repro folder apart)."""
    from parity.files.outputs import Output

    named = [*_OUTPUTS, ("export_path", "ONNX export")]
    return [
        Output(what, str(getattr(args, attr)), "--" + attr.replace("_", "-"))
        for attr, what in named
        if getattr(args, attr, None)
    ]


def _input_files(args: argparse.Namespace) -> list:
    """Every path the command reads (its flags marked READS, and `report`'s RUN)."""
    from parity.cli.definition import COMMANDS
    from parity.files.outputs import Input
    from parity.path_flags import READS

    command = next((c for c in COMMANDS if c.name == args.command), None)
    found = [Input("RUN", str(args.run))] if getattr(args, "run", None) else []
    for item in command.flags if command is not None else ():
        if item.path != READS:
            continue
        value = getattr(args, item.dest, None)
        for path in value if isinstance(value, list | tuple) else [value]:
            if path:
                found.append(Input(item.names[0], str(path)))
    return found


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


def _report(args: argparse.Namespace) -> ValidationRun:
    """A saved run reopened (within --max-memory), re-judged when tolerance flags are given."""
    from parity.limits.budget import MemoryBudget
    from parity.reports.saved_run import load_run

    run = load_run(args.run, budget=MemoryBudget.of(max_memory_bytes(args)))
    if args.tolerances or args.atol is not None or args.rtol is not None or args.tol:
        run = run.rejudge(tolerances_from_args(args, base=run.tolerances))
    return run


def _demos() -> int:
    from parity.load.demos import DEMOS

    for demo in DEMOS.values():
        say(f"demo:{demo.name:<12} {demo.title}")
        if demo.tolerances is not None:
            flags = " ".join(
                f"--tol {name}={t.atol:g}:{t.rtol:g}" for name, t in demo.tolerances.outputs.items()
            )
            say(f"{'':17} passes with: {flags}")
    return ExitCode.PASS


def main(argv: Sequence[str] | None = None) -> int:
    """`parity ARGS` (the console script): the exit code, 0 / 1 / 2."""
    parser = build_parser()
    args = parser.parse_args(argv)  # one line on a usage error, with a did-you-mean
    args.argv = list(sys.argv[1:] if argv is None else argv)  # said in a repro's README
    set_debug(bool(getattr(args, "debug", False)))  # torch's and ORT's logs: parity.load.quiet
    if args.command == "demos":
        return _demos()
    if args.command == "sweep":
        from parity.sweep.cli import sweep_main

        return sweep_main(args, parser)
    watchdog = _start_watchdog(args)
    seen: list[int] = []
    previous = _second_interrupt_ends(seen) if args.command in ("validate", "report") else None
    try:
        return _main(args)
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if previous is not None:  # after a Ctrl-C the process is ending: ignore more of them
            # (Python's exit puts SIGINT's default back, which a second one would die of: 130)
            signal.signal(signal.SIGINT, signal.SIG_IGN if seen else previous)


def _second_interrupt_ends(seen: list[int]):
    """A first Ctrl-C interrupts the run (one line, exit 2); a second one (while the first
    unwinds, after a library swallowed it, or while the process exits) ends the process
    there, exit 2 as well, never Python's 130. The previous handler, to put back when no
    Ctrl-C came; None off the main thread. `seen` collects the signals."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handle(signum: int, frame: object) -> None:
        seen.append(signum)
        if len(seen) == 1:
            raise KeyboardInterrupt
        with contextlib.suppress(OSError, ValueError):
            print("parity: interrupted", file=sys.stderr, flush=True)
        say_ended()
        os._exit(ExitCode.ERROR)

    return signal.signal(signal.SIGINT, handle)


def _start_watchdog(args: argparse.Namespace):
    """--timeout: torch cannot be interrupted, so past the deadline (and a grace period for
    ORT's own termination) the process ends with exit 2; writes are atomic."""
    if getattr(args, "timeout", None) is None:
        return None
    from parity.errors import RunTimeout
    from parity.limits.deadline import start_watchdog, timeout_message

    def on_timeout() -> None:
        message = timeout_message(args.timeout)
        unwritten = write_error_report(args, "timeout", message, RunTimeout(message))
        say(f"parity: error: {message}{unwritten}", file=sys.stderr, flush=True)
        say_ended()

    return start_watchdog(args.timeout, on_timeout)


def _made_and_written(
    args: argparse.Namespace, make: Callable[[argparse.Namespace], ValidationRun]
) -> ValidationRun:
    """What `validate` and `report` do before their verdict: the output paths checked, the
    run made, its terminal text printed, then the files it asks for written."""
    _check_outputs(args)
    run = make(args)
    say(format_text(run))
    write_outputs(run, args)
    return run


def _validate_and_write(args: argparse.Namespace) -> ValidationRun:
    """`parity validate` up to its verdict (the dashboard opens on the run it makes)."""
    return _made_and_written(args, _validate)


def _dashboard(args: argparse.Namespace) -> int:
    from parity.launch import dashboard_main

    try:
        return dashboard_main(args, _validate_and_write)
    except Exception as exc:  # the validation it opens on could not be made: one line
        return fail(args, *describe_error(exc), exc)


def _main(args: argparse.Namespace) -> int:
    if args.command == "dashboard":
        return _dashboard(args)
    try:
        run = _made_and_written(args, _validate if args.command == "validate" else _report)
    except KeyboardInterrupt:
        print("parity: interrupted", file=sys.stderr)
        return ExitCode.ERROR
    except Exception as exc:  # a ParityError, or a bug the core did not classify: one line
        return fail(args, *describe_error(exc), exc)
    if run.verdict is Verdict.ERROR:  # a candidate could not be run; the others are reported
        for info in run.infos:
            if info.error is not None:
                said = f"candidate {terminal_text(info.label)}: {terminal_text(info.error)}"
                say(f"parity: error: {said}", file=sys.stderr)
        return ExitCode.ERROR
    return run.verdict.exit_code
