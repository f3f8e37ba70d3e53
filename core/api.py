"""The Python API: validate an export from a script, a notebook or a test suite.

    >>> import io, torch
    >>> from parity import validate
    >>> model = torch.nn.Linear(4, 2).eval()
    >>> x = torch.randn(3, 4)
    >>> onnx_bytes = io.BytesIO()
    >>> torch.onnx.export(model, (x,), onnx_bytes, dynamo=False, input_names=["x"])
    >>> run = validate(model, onnx_bytes.getvalue(), inputs={"x": x})
    >>> run.passed, run.failing
    (True, ())

(tests/test_api.py runs these examples.)

`validate` maps its arguments onto the same `RunConfig` the CLI and the dashboard build and
calls the same `parity.pipeline.run_validation`: one loop, whatever the entry point. Objects
already in memory (an `nn.Module`, an `ExportedProgram`, a `ModelProto`, serialized bytes, a
`torch.onnx.ONNXProgram`, arrays or tensors) are what a script has; the API accepts them and
leaves no temp file behind.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, TypedDict, TypeVar, Unpack

from parity.data.options import DataOptions
from parity.errors import ParityError, UsageError
from parity.results import Finding, ValidationRun, register_run_files
from parity.run.config import RunConfig, default_loaders
from parity.run.progress import ProgressCallback
from parity.settings import Front, Setting
from parity.tolerances import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    Tolerance,
    TolerancesLike,
    tolerances_of,
)
from parity.verdict import Judge, Verdict, judge_of

__all__ = ["ValidateOptions", "ValidationRun", "assert_export_close", "validate"]


class _ReportFiles:
    """ValidationRun's files (`run.to_json()`, `run.save(...)`, `run.write_html(...)`, the
    notebook view), registered with parity.results, which cannot import parity.reports (it
    stands on parity.results). Each imports its module when called: plotly is slow to import,
    and `parity --help` does not need it."""

    def report(self, run: ValidationRun) -> dict[str, Any]:
        from parity.reports.report import report_dict

        return report_dict(run)

    def findings(self, run: ValidationRun) -> tuple[Finding, ...]:
        from parity.show.findings import run_findings

        return run_findings(run)

    def cause_verdict(self, run: ValidationRun) -> Verdict:
        from parity.show.cause import judge_by_cause

        return judge_by_cause(run).verdict

    def save(self, run: ValidationRun, path: str | os.PathLike[str], *, keep_outputs: bool) -> Path:
        from parity.reports.saved_run import save_run

        return save_run(run, Path(path), keep_outputs=keep_outputs)

    def write_html(self, run: ValidationRun, path: str | os.PathLike[str]) -> Path:
        from parity.reports.html_report import write_html_report

        return write_html_report(run, Path(path))

    def html(self, run: ValidationRun) -> str:
        from parity.reports.html_report import render_html_report

        return render_html_report(run)


register_run_files(_ReportFiles())


class ValidateOptions(TypedDict, total=False):
    """`validate`'s (and `assert_export_close`'s) keyword arguments, declared once: their
    names and types here (type checkers read them through ``**options:
    Unpack[ValidateOptions]``), their defaults in `DEFAULTS`, their meanings in validate's
    docstring. `validate`'s signature (help(), inspect) is made from these two."""

    inputs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None
    input_sets: int | None
    dims: Mapping[str, int] | None
    seed: int
    float_range: tuple[float, float] | Mapping[str, tuple[float, float]] | None
    atol: float
    rtol: float
    tolerances: TolerancesLike
    provider: str
    ort_opt_level: str
    layers: bool
    repro: str | os.PathLike[str] | None
    noise_floor: bool
    no_noise_floor: bool
    reference: str | os.PathLike[str] | None
    weights: str | os.PathLike[str] | None
    progress: ProgressCallback | None
    max_memory: int | str | None
    timeout: float | None
    suggest: bool
    quantized_reference: bool
    judge: str
    data: str | os.PathLike[str] | DataOptions | None
    labels: str | os.PathLike[str] | None
    min_agreement: Mapping[str, float] | None


# every key of ValidateOptions, with the value a call that does not give it gets
DEFAULTS: Final[ValidateOptions] = {
    "inputs": None,
    "input_sets": None,
    "dims": None,
    "seed": 0,
    "float_range": None,
    "atol": DEFAULT_ATOL,
    "rtol": DEFAULT_RTOL,
    "tolerances": None,
    "provider": "CPUExecutionProvider",
    "ort_opt_level": "all",
    "layers": False,
    "repro": None,
    "noise_floor": False,
    "no_noise_floor": False,
    "reference": None,
    "weights": None,
    "progress": None,
    "max_memory": None,
    "timeout": None,
    "suggest": False,
    "quantized_reference": True,
    "judge": "tolerance",
    "data": None,
    "labels": None,
    "min_agreement": None,
}


def _options_of(function: str, given: ValidateOptions) -> ValidateOptions:
    """The keywords given, every one not given at its default; an unknown one is Python's
    own TypeError (a caller that no type checker read may pass any name)."""
    for name in given:
        if name not in DEFAULTS:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
    return {**DEFAULTS, **given}


_Function = TypeVar("_Function", bound=Callable[..., ValidationRun])


def _signature_with_options(function: _Function) -> _Function:
    """`function(model, onnx=None, **options)` shown (help(), inspect, notebooks) with each
    ValidateOptions key as a keyword of its own, in the order declared."""
    head = list(inspect.signature(function).parameters.values())[:2]
    defaults: Mapping[str, object] = DEFAULTS
    keywords = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=defaults[name],
            annotation=getattr(declared, "__forward_arg__", declared),  # as written, a string
        )
        for name, declared in ValidateOptions.__annotations__.items()
    ]
    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*head, *keywords], return_annotation="ValidationRun"
    )
    return function


@_signature_with_options
def validate(model: Any, onnx: Any = None, **options: Unpack[ValidateOptions]) -> ValidationRun:
    """Run `model` and `onnx` on the same inputs and compare every output element.

    model: an ``nn.Module`` (run in eval mode under ``inference_mode``), a
        ``torch.export.ExportedProgram``, a model spec string as the CLI takes (``FILE.pt2``,
        ``demo:NAME``, ``FILE.py:CALLABLE``, ``hf:DIR``), or None with `reference` (stored
        reference outputs, ``parity validate --save-reference``).
    onnx: a path, an ``onnx.ModelProto``, serialized model bytes, or the
        ``torch.onnx.ONNXProgram`` that ``torch.onnx.export`` returned (external data
        included); None only for a ``demo:`` model.
    inputs: input name -> numpy array or torch tensor (one input set), a sequence of such
        mappings (one set each), or None to generate sets from the ONNX signature exactly as
        the CLI does (`input_sets`, `dims`, `seed`, `float_range`). `input_sets` None: two
        sizes for a file with dynamic axes (the second grows every dynamic dim), one otherwise.
    float_range: generated float inputs drawn uniformly in [low, high]: a (low, high) for
        every float input, or input name -> (low, high) (as ``--float-range``). Default:
        standard normal, or a quantized file's calibrated input range.
    atol, rtol, tolerances: the pass rule |onnx - ref| <= atol + rtol * |ref|; `tolerances`
        adds per-output values (mapping name -> atol or (atol, rtol), a ``Tolerances``, or a
        tolerances JSON file).
    layers: also compare intermediate values and name the op where the export starts to
        diverge (``run.layers``, as ``parity validate --layers``); never changes the verdict.
    repro: a folder to write a standalone repro of the confirmed first divergence to (as
        ``--repro DIR``; implies `layers`; a clean run writes nothing, see
        parity.layers.repro).
    noise_floor: also run the torch model in float64 (and at a float16 / bfloat16 file's
        precision); each float32 output's ``run.outputs[i].noise`` (torch_error, onnx_error,
        ratio, precision) says whether ONNX's error is rounding at the precision the file
        computes it (int8: its quantization noise), as ``--noise-floor``; the verdict stays
        the tolerance's.
    no_noise_floor: do not measure the floor by default (as ``--no-noise-floor``). Without
        it, a run whose outputs fail and that asks for no analysis runs torch in float64 on
        its two smallest failing input sets when the model has at most 50 M parameters.
    max_memory: bytes (or "512M", "16G") of arrays the run may hold, as ``--max-memory``:
        given inputs, generated sets and the float64 copy of `noise_floor` are checked
        against it before they are made (default 4 GiB).
    timeout: seconds the run may take, ONNX Runtime's session setup included; past it a
        `parity.RunTimeout` (torch itself cannot be interrupted: it is checked between steps).
    suggest: also suggest per-output tolerances (``run.suggested_tolerances``, as
        ``--suggest``): k x the noise floor with `noise_floor`, else margin x the smallest
        passing atol; each fitted on the run's input sets and checked on as many fresh ones
        again (another seed, larger sizes) before it is given; none for an output with a bug
        finding.
    quantized_reference: a file with weight-only quantized ops (int4 ``MatMulNBits``, ...)
        is judged against torch with the file's own dequantized weights put in, split into
        what the export computes and what quantizing costs (``run.quantization``); on by
        default, it acts only where such ops are found (``--no-quantized-reference``). It
        also judges a failing file's intended approximations (FastGelu's tanh GELU, 16-bit
        weights through the file's wide twin) against torch doing the same
        (``run.approximation``).
    judge: how ``run.verdict`` is decided (as ``--judge``): "tolerance" (default) passes
        every output within atol + rtol*|ref|; "cause" fails on a bug and passes where every
        difference is what the file was meant to do (its precision's rounding, its
        quantization, a tool's intended approximation), measured: it measures the noise floor
        and judges quantized weights (docs/deploy.md).

    Raises a `parity.ParityError` subclass (one line: what and where, naming this
    function's keyword arguments) when the run cannot be made. A model whose numbers
    disagree is not an error: check `.passed` / `.failing`, or use `assert_export_close`.
    """
    try:
        return _validate(model, onnx, _options_of("validate", options))
    except ParityError as exc:
        raise exc.in_words(Front.API) from exc.__cause__


def _judge(value: str | Judge) -> Judge:
    try:
        return judge_of(value)
    except ValueError as exc:
        raise UsageError(str(exc).removeprefix("judge "), setting=Setting("judge")) from None


def _max_memory(value: int | str | None) -> int | None:
    """max_memory= as bytes: an int, or a size such as "512M" (parse_size's words)."""
    if value is None or isinstance(value, int):
        return value
    from parity.limits.budget import parse_size

    return parse_size(str(value))


def _validate(model: Any, onnx: Any, options: ValidateOptions) -> ValidationRun:
    o = options
    tol = tolerances_of(
        o["tolerances"],
        Tolerance(atol=o["atol"], rtol=o["rtol"]),
        explicit=(o["atol"], o["rtol"]) != (DEFAULT_ATOL, DEFAULT_RTOL),
    )
    loaders = default_loaders()
    spec: str | None
    if model is None or isinstance(model, (str, os.PathLike)):
        spec = None if model is None else os.fspath(model)
    else:
        from parity.load.torch_model import from_object

        prepared = from_object(model)
        spec = prepared.spec
        loaders = replace(loaders, load_torch_model=lambda _spec, **_: prepared)
    if o["repro"] is not None:  # a bad folder is refused before the run, not after it
        from parity.files.outputs import check_repro_folder

        check_repro_folder(os.fspath(o["repro"]), "repro folder")
    feeds = _input_mappings(o["inputs"])
    with tempfile.TemporaryDirectory(prefix="parity-api-") as tmp:
        onnx_path, onnx_label = _onnx_file(onnx, Path(tmp))
        config = RunConfig(
            model=spec,
            onnx=onnx_path,
            weights=None if o["weights"] is None else os.fspath(o["weights"]),
            dims=dict(o["dims"] or {}),
            n_input_sets=o["input_sets"],
            seed=o["seed"],
            float_range=None if isinstance(o["float_range"], Mapping) else o["float_range"],
            float_ranges=dict(o["float_range"]) if isinstance(o["float_range"], Mapping) else {},
            feeds=feeds,
            provider=o["provider"],
            ort_opt_level=o["ort_opt_level"],
            layers=o["layers"] or o["repro"] is not None,
            noise_floor=o["noise_floor"],
            noise_floor_default=not o["no_noise_floor"],
            suggest=bool(o["suggest"]),
            quantized_reference=bool(o["quantized_reference"]),
            judge=_judge(o["judge"]),
            repro=None if o["repro"] is None else os.fspath(o["repro"]),
            repro_command=f"parity.validate({spec or type(model).__name__!r}, "
            f"{onnx_label or onnx_path!r}, repro={os.fspath(o['repro'])!r})"
            if o["repro"] is not None
            else "",
            tolerances=tol,
            reference_file=None if o["reference"] is None else os.fspath(o["reference"]),
            max_memory=_max_memory(o["max_memory"]),
            timeout=o["timeout"],
            data=_data_options(o),
        )
        from parity.pipeline import run_validation

        try:
            run = run_validation(config, progress=o["progress"], loaders=loaders)
        except ParityError as exc:  # name what the caller gave, not the temp file it went to
            if onnx_label is not None and onnx_path:
                exc.replace_text(onnx_path, onnx_label)
            raise
    if onnx_label is not None:  # the temp file is gone: name what the caller gave
        candidates = tuple(
            replace(c, info=replace(c.info, onnx=onnx_label)) for c in run.candidates
        )
        run = replace(run, onnx=onnx_label, candidates=candidates)
    return run


@_signature_with_options
def assert_export_close(
    model: Any, onnx: Any = None, **options: Unpack[ValidateOptions]
) -> ValidationRun:
    """`validate(model, onnx, **options)`; raises AssertionError unless every output passes.

    The message names each failing output in numpy.testing's words (``Mismatched elements:
    3 / 1000 (0.3%)``, ``Max absolute difference: ...``) with its worst element, so a plain
    ``assert_export_close(model, onnx_program, inputs=feeds)`` in a pytest test reads like
    ``np.testing.assert_allclose``. Returns the run when everything passes.

        >>> import io, torch
        >>> from parity import assert_export_close
        >>> model = torch.nn.Linear(4, 2).eval()
        >>> x = torch.randn(3, 4)
        >>> onnx_bytes = io.BytesIO()
        >>> torch.onnx.export(model, (x,), onnx_bytes, dynamo=False, input_names=["x"])
        >>> with torch.no_grad():
        ...     _ = model.bias.add_(0.5)  # the model moved on; the export did not
        >>> assert_export_close(model, onnx_bytes.getvalue(), inputs={"x": x})
        Traceback (most recent call last):
        AssertionError: ONNX export does not match the model: 1 output(s) fail (...)
        ...
    """
    __tracebackhide__ = True  # pytest shows the caller's line and this message, not our locals
    _options_of("assert_export_close", options)  # an unknown keyword named as this function's
    run = validate(model, onnx, **options)
    if run.passed:
        return run
    from parity.judge.where import where_of
    from parity.show.format import format_failure
    from parity.text import terminal_text

    failures = [format_failure(c, where_of(run, c)) for c in run.outputs if not c.status.passed]
    head = (  # pytest prints it on a terminal: the file's names escaped, as the CLI's
        f"ONNX export does not match the model: {len(run.failing)} output(s) fail "
        f"({', '.join(map(terminal_text, run.failing))})"
    )
    raise AssertionError("\n".join([head, *failures]))


# --- arguments -> RunConfig ---------------------------------------------------------------


def _data_options(o: ValidateOptions) -> DataOptions | None:
    """data= (a path or DataOptions) with labels= and min_agreement= folded in."""
    if o["data"] is None:
        if o["labels"] is not None or o["min_agreement"]:
            raise UsageError("labels= and min_agreement= apply only with data=")
        return None
    options = o["data"] if isinstance(o["data"], DataOptions) else DataOptions(os.fspath(o["data"]))
    if o["labels"] is not None:
        options = replace(options, labels=os.fspath(o["labels"]))
    if o["min_agreement"]:
        options = replace(options, min_agreement={**options.min_agreement, **o["min_agreement"]})
    return options


def _input_mappings(
    inputs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
) -> tuple[Mapping[str, Any], ...]:
    if inputs is None:
        return ()
    if isinstance(inputs, Mapping):
        return (inputs,)
    if isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        if not inputs:
            raise UsageError("inputs: an empty sequence gives no input set")
        return tuple(inputs)
    raise UsageError(
        f"inputs must be a mapping of input name -> array or a sequence of them, got "
        f"{type(inputs).__name__}"
    )


def _onnx_file(onnx: Any, tmp: Path) -> tuple[str | None, str | None]:
    """(path to run, label for the report when the model was in memory)."""
    if onnx is None or isinstance(onnx, (str, os.PathLike)):
        return (None if onnx is None else os.fspath(onnx)), None
    path = tmp / "model.onnx"
    if isinstance(onnx, (bytes, bytearray, memoryview)):
        path.write_bytes(bytes(onnx))
        return str(path), "<ONNX bytes in memory>"
    import onnx as onnx_lib

    if isinstance(onnx, onnx_lib.ModelProto):
        large = onnx.ByteSize() > (1 << 31) - (1 << 20) if _has_byte_size(onnx) else True
        onnx_lib.save_model(onnx, path, save_as_external_data=large, location="model.onnx.data")
        return str(path), "<ModelProto in memory>"
    torch = sys.modules.get("torch")
    program_type = getattr(getattr(torch, "onnx", None), "ONNXProgram", None)
    if program_type is not None and isinstance(onnx, program_type):
        onnx.save(str(path))
        return str(path), "<ONNXProgram in memory>"
    raise UsageError(
        "onnx must be a path, an onnx.ModelProto, serialized bytes or a torch.onnx.ONNXProgram, "
        f"got {type(onnx).__name__}"
    )


def _has_byte_size(proto: Any) -> bool:
    """ByteSize() raises for protos over 2 GB on some protobuf builds: then assume large."""
    try:
        proto.ByteSize()
    except Exception:
        return False
    return True
