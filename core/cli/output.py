"""What a command writes: the report files a run asks for, the terminal text of a run, and
the one error line (with the --json error report) when it could not be made."""

from __future__ import annotations

import argparse
import functools
import sys
import textwrap
import traceback
from collections.abc import Callable

from parity.cli.values import tolerances_from_args
from parity.errors import OutputsUnwritten, ParityError, UsageError, WriteError
from parity.results import AnalysisNote, FindingKind, ValidationRun
from parity.run.input_binding import SignatureMismatch
from parity.run.progress import NOTICE
from parity.show.forgiven import forgiven, forgiven_text
from parity.show.format import format_run, format_verdict
from parity.text import terminal_text
from parity.tolerances import Tolerances
from parity.verdict import ExitCode

# findings no tolerance should forgive: no --suggest hint beside them
_NOT_TOLERANCE = (FindingKind.BUG, FindingKind.LIMITATION)


def say(text: object, *, file=None, end: str = "\n", flush: bool = False) -> None:
    """Every line a command prints goes through here: its text with every control character
    a file could have put in it escaped (parity.text.terminal_text; newlines kept). Parity's
    own terminal codes (the progress line's) are written beside it, never through it."""
    print(terminal_text(text, lines=True), file=file or sys.stdout, end=end, flush=flush)


def progress_printer():
    """Live progress on a terminal's stderr; off a terminal, only the notices (an analysis saying
    what it is about to cost, e.g. the suggestion's fresh input sets)."""
    live = sys.stderr.isatty()

    def show(event) -> None:
        message = terminal_text(event.message)
        if event.step == NOTICE:
            print(("\r\033[K" if live else "") + message + " ...", file=sys.stderr)
            return
        if not live:
            return
        print(f"\r\033[K[{event.elapsed:6.1f}s] {message}", end="", file=sys.stderr)
        if event.step == "done":
            print("\r\033[K", end="", file=sys.stderr)

    return show


def _unwritten(run: ValidationRun, errors: list[WriteError]) -> OutputsUnwritten:
    said = "; ".join(e.message for e in errors)
    return OutputsUnwritten(
        f"{said} (the run finished: {run.verdict.value.upper()}; every other file was "
        "written, and the previous content of each unwritten one is left as it was)",
        path=errors[0].path,
    )


def write_outputs(run: ValidationRun, args: argparse.Namespace) -> None:
    """The files the flags ask for, each written atomically (paths checked before the run).
    One that cannot be written (a full disk) does not stop the others: OutputsUnwritten
    then names each, after all were tried."""
    errors: list[WriteError] = []
    for write in _writers(run, args):
        try:
            write()
        except WriteError as exc:
            errors.append(exc)
    if errors:
        raise _unwritten(run, errors)


def _writers(run: ValidationRun, args: argparse.Namespace) -> list[Callable[[], object]]:
    from parity.reports.report import report_dict, write_json

    writers: list[Callable[[], object]] = []
    if getattr(args, "save_run", None):
        from parity.reports.saved_run import save_run

        writers.append(lambda: save_run(run, args.save_run))
    if getattr(args, "save_reference", None):
        from parity.run.reference import save_reference_outputs

        writers.append(lambda: save_reference_outputs(args.save_reference, run))
    if args.json:
        writers.append(lambda: write_json(args.json, report_dict(run)))
    if args.html:
        from parity.reports.html_report import write_html_report

        writers.append(lambda: write_html_report(run, args.html))
    if getattr(args, "model_explorer", None):
        writers.append(lambda: _write_model_explorer(run, args.model_explorer))
    if getattr(args, "write_fixed", None):
        writers.append(lambda: _write_fixed(run, args.write_fixed))
    for note in run.analyses:  # written while the run was made (parity.analyses.repro)
        if note.analysis == "repro":
            writers.append(functools.partial(_repro_said, note, args.repro))
    return writers


def _repro_said(note: AnalysisNote, folder: str) -> None:
    """What the repro analysis wrote; a folder it could not write is an unwritten output."""
    if not note.done:
        raise WriteError(note.text, path=folder)
    say(note.text)


def _write_fixed(run: ValidationRun, path: str) -> None:
    """The float16 file with layers.keep_float32 kept in float32 (parity.layers.fp16). A run
    with nothing to fix keeps its verdict and reports: a note says why nothing was written."""
    from parity.layers.fp16 import write_fixed

    reference = run.provenance.reference_file
    check = run.layers.findings.get("keep_float32_check") if run.layers is not None else None
    if reference is None or run.layers is None or not check or not check.get("fixed"):
        why = (
            "nothing needed fixing (no float16 value diverged for a node kept in float32 to cure)"
            if not check
            else "keeping the nodes found in float32 did not fix the float16 file"
        )
        say(f"--write-fixed: nothing written to {terminal_text(path)}: {why}")
        return
    write_fixed(run.layers, reference, path)


def _write_model_explorer(run: ValidationRun, path: str) -> None:
    from parity.layers.model_explorer import write_node_data

    if run.layers is None:
        raise UsageError(
            f"no layers comparison to write to {path}: this run was made without --layers"
        )
    write_node_data(run.layers, path, pass_line=run.layers.threshold, onnx_path=run.onnx)


def _data_lines(run: ValidationRun) -> list[str]:
    from parity.data.words import data_lines

    return [terminal_text(line) for line in data_lines(run.data)] if run.data else []


def format_text(run: ValidationRun) -> str:
    """A run as the terminal shows it: table or steps, noise, layers."""
    if run.is_generation:
        from parity.hf.steps_text import format_steps_table
        from parity.show.generation_text import summary_line

        text = format_steps_table(run) + "\n\n" + format_verdict(run)
        text += "".join(f"\n{terminal_text(line)}" for line in [summary_line(run)] if line)
    elif run.is_multi_candidate:  # candidates side by side
        from parity.show.candidates_text import format_candidates

        text = format_candidates(run)
    else:
        text = format_run(run)
    if not run.is_generation:  # the findings, then the verdict line: still the last line
        head, _, verdict = text.rpartition("\n")
        if run.data is not None and (lines := _data_lines(run)):  # the changed samples, by id
            head = head.rstrip() + "\n\n" + "\n".join(lines)
        text = f"{head.rstrip()}{findings_text(run)}\n\n{verdict}" if findings_text(run) else text
    else:
        text += findings_text(run)
    # the floor measured by default (a done note) speaks in the findings; the verdict stays last
    by_default = any(n.analysis == "noise_floor" and n.done for n in run.analyses)
    noise = any(c.noise is not None for c in run.outputs) and not by_default
    if noise:
        from parity.judge.noise_floor import noise_lines

        lines = noise_lines(run.outputs)
        if run.is_multi_candidate:  # each candidate's own floor: one story per candidate
            lines = [
                f"{i.label}: {line}"
                for i in run.infos
                for line in noise_lines([c for c in run.outputs if c.candidate == i.index])
            ]
        text += "\n\nRounding noise (against torch in float64):\n" + "\n".join(
            f"  {terminal_text(line)}" for line in lines
        )
    forgives = forgiven(run)
    if forgives:  # a tolerance the user set, against the noise measured for its output
        text += "\n\nWhat the tolerances forgive:\n" + "\n".join(
            f"  {terminal_text(forgiven_text(f))}" for f in forgives
        )
    if run.suggested_tolerances is not None:  # --suggest: checked on fresh input sets
        from parity.judge.suggest import suggestion_lines

        lines = suggestion_lines(run.suggested_tolerances)
        if lines:
            head, *rest = lines
            text += f"\n\n{terminal_text(head)}\n" + "\n".join(
                f"  {terminal_text(line)}" for line in rest
            )
    elif noise and not run.passed and not any(f.kind in _NOT_TOLERANCE for f in run.findings):
        text += (
            "\n\nTolerances for this file: --suggest (fitted on these input sets, then "
            "checked on as many fresh ones)"
        )
    if run.layers is not None:
        from parity.layers.text import format_run_layers

        text += "\n\n" + format_run_layers(run)
    return text


def findings_text(run: ValidationRun) -> str:
    """The run's findings (parity.show.findings): what the numbers above conclude, just
    above the verdict line."""
    found = run.findings
    if not found:
        return ""
    from parity.show.candidates_text import finding_line

    lines = (f"  - {terminal_text(finding_line(run, f))}" for f in found)
    return "\n\nWhat we found:\n" + "\n".join(lines)


def fail(args: argparse.Namespace, kind: str, message: str, exc: BaseException) -> int:
    """A run that could not be made: its one line (and --json error report), exit 2."""
    if args.debug:  # a traceback quotes file names and messages: text, as every line
        say("".join(traceback.format_exception(exc)), file=sys.stderr, end="")
    hint = " (--debug shows the traceback)" if kind == "internal" and not args.debug else ""
    unwritten = write_error_report(args, kind, message, exc)
    say(f"parity: error: {terminal_text(message)}{hint}{unwritten}", file=sys.stderr)
    if isinstance(exc, SignatureMismatch):  # the wrapper to write, after the one line
        say(textwrap.indent(exc.detail, "    "), file=sys.stderr)
    return ExitCode.ERROR


def write_error_report(
    args: argparse.Namespace, kind: str, message: str, exc: BaseException
) -> str:
    """Write the --json error report; '' or, if it cannot be written, text for the one line."""
    if not getattr(args, "json", None):
        return ""
    if isinstance(exc, OutputsUnwritten):  # the run finished: its verdict is never undone
        return ""
    if getattr(args, "outputs_refused", False):  # --json may be the very input it would replace
        return ""
    if isinstance(exc, WriteError) and exc.path == str(args.json):
        return ""
    from parity.reports.report import error_report_dict, write_json
    from parity.sweep.names import given_names, renamed_text

    names = given_names()  # a sweep pair: its files as the manifest names them

    def given(text: str | None) -> str | None:
        return None if text is None else renamed_text(str(text), names)

    try:
        tolerances = tolerances_from_args(args)
    except ParityError:
        tolerances = Tolerances()
    try:
        write_json(
            args.json,
            error_report_dict(
                model=given(getattr(args, "model", None) or getattr(args, "run", None)),
                onnx=given(_first(getattr(args, "onnx", None))),
                tolerances=tolerances,
                kind=kind,
                message=renamed_text(message, names),
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
