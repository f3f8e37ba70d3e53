"""`parity sweep MANIFEST --out DIR`: the subcommand's entry point (its flags are in
parity.cli.definition's table).

Exit 2 when any pair could not be run (or the manifest is wrong), else 1 when any pair
failed, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from functools import partial
from pathlib import Path

from parity.errors import ParityError, UsageError
from parity.sweep.execute import PairResult
from parity.sweep.summary import counts
from parity.text import terminal_text
from parity.verdict import ExitCode, Verdict

DEFAULT_TIMEOUT_S = 3600.0


def sweep_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`parser`: the `parity` parser, whose `validate` checks every pair's args up front and
    says which of its flags read and write files (parity.path_flags)."""
    try:
        return _sweep(args, parser)
    except ParityError as exc:
        print(f"parity: error: {terminal_text(exc.message)}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("parity: interrupted (summary.json holds the pairs that finished)", file=sys.stderr)
        return ExitCode.ERROR


def _sweep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from parity.sweep.driver import run_sweep
    from parity.sweep.manifest import load_manifest
    from parity.sweep.progress import Progress

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers {args.workers}: must be at least 1")
    if args.timeout < 0:
        raise UsageError(f"--timeout {args.timeout:g}: must be >= 0 (0: none)")
    if args.ray_address and args.engine != "ray":
        raise UsageError("--ray-address needs --engine ray")
    from parity.path_flags import PathFlags

    check = partial(validate_args_problem, parser)
    manifest = load_manifest(args.manifest, flags=PathFlags.of(parser), check_args=check)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a folder")
    engine = _engine(args)
    progress = Progress(len(manifest.pairs))
    outcome = run_sweep(
        manifest,
        out,
        engine,
        timeout=args.timeout or None,
        resume=args.resume,
        progress=progress,
    )
    for result in outcome.results:
        if result.verdict is not Verdict.PASS:
            print(_line(result))  # its name and error escaped (a manifest's, a pair's)
    c = counts(outcome.results)
    resumed = f" ({outcome.resumed} resumed)" if outcome.resumed else ""
    print(
        f"sweep: {outcome.total} pair(s): {c['pass']} pass, {c['fail']} fail, {c['error']} error"
        f"{resumed} in {outcome.seconds:.1f} s; "
        + terminal_text(f"{out / 'summary.json'}, {out / 'index.html'}")
    )
    return outcome.exit_code


def _engine(args: argparse.Namespace):
    if args.engine == "ray":
        from parity.sweep.on_ray import ray_engine

        return ray_engine(address=args.ray_address, workers=args.workers)
    from parity.sweep.local import run_local

    return partial(run_local, workers=args.workers or os.cpu_count() or 1)


def validate_args_problem(parser: argparse.ArgumentParser, args: tuple[str, ...]) -> str | None:
    """What `parity validate ARGS` would refuse as usage (argparse's message), or None."""
    if any(a in ("-h", "--help") for a in args):
        return "remove --help"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(["validate", *args])
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if "error: " in line]
        return lines[-1].split("error: ", 1)[1] if lines else "invalid validate arguments"
    return None


def _line(result: PairResult) -> str:
    name = terminal_text(result.name)
    if result.verdict is Verdict.FAIL:
        failing = ", ".join(map(terminal_text, result.failing)) or "see its report"
        return f"FAIL   {name}: {failing}"
    return f"ERROR  {name}: {terminal_text(result.error)}"
