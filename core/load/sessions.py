"""The one place that builds ONNX Runtime sessions and decides their SessionOptions.

Outputs, intermediate values, confirmation cuts, QDQ bypass trials and provider-precision
probes all run through `open_session`, so a choice about sessions (log severity, the memory
arena, where external weights are read from, thread counts) is made once and holds for every
run. Errors are ONNX Runtime's own: each caller turns them into its one line, which names
what it was doing. Inside a run with a time limit (`Deadline.active`, set by
parity.pipeline.run_validation: the CLI's --timeout, the dashboard's time limit, the API's
timeout=) a setup still going at the deadline is abandoned: RunTimeout, while ONNX Runtime
finishes it in a background thread (it cannot be stopped).

A native crash (ONNX Runtime 1.32's CPU session segfaults optimising a float16 GRU its own
converter made) would kill the process with no word: `crash_of` opens the session first in a
forked child (no interpreter start, about the session's own setup time; files up to
PROBE_MAX_BYTES) and names the signal. Its outcome is kept by the file's content (SHA-256) x
provider x level for the process, so the dashboard's re-runs of a file, wherever it was
written and however often, probe it once (the hash is kept by path, size and mtime: a file
unchanged since is not read again);
`opening_level` then finds the highest lower level that opens, which the run goes on at, said.

Contract:
ORT_OPT_LEVELS = ("disable", "basic", "extended", "all")
open_session(model: path | bytes, *, provider, opt_level="all", cpu_arena=True,
    external_folder=None, optimized_path=None, config=(), intra_op_threads=None)
    -> OrtSession (an onnxruntime.InferenceSession, typed by what Parity calls on it)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from parity.errors import ParityError, RunTimeout
from parity.limits.deadline import current as current_deadline
from parity.limits.deadline import timeout_message
from parity.load.quiet import apply_ort_default_severity, ort_severity

if TYPE_CHECKING:
    import onnxruntime

ORT_OPT_LEVELS = ("disable", "basic", "extended", "all")


class OrtValueInfo(Protocol):
    """An input or output of a session (onnxruntime.NodeArg)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...  # "tensor(float)", "seq(tensor(int64))", ...
    @property
    def shape(self) -> Sequence[int | str | None] | None: ...


class OrtSession(Protocol):
    """What Parity calls on an onnxruntime.InferenceSession: a candidate's session, and every
    session `open_session` makes. ONNX Runtime ships no type information, so this names the
    part of its API the code stands on, where a type checker can hold the callers to it."""

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: onnxruntime.RunOptions | None = None,
    ) -> list[Any]: ...  # numpy arrays, or lists / dicts for sequence and map outputs

    def run_with_ort_values(
        self,
        output_names: Sequence[str],
        input_dict_ort_values: Mapping[str, onnxruntime.OrtValue],
        run_options: onnxruntime.RunOptions | None = None,
    ) -> Sequence[onnxruntime.OrtValue]: ...

    def get_inputs(self) -> Sequence[OrtValueInfo]: ...
    def get_outputs(self) -> Sequence[OrtValueInfo]: ...
    def get_modelmeta(self) -> onnxruntime.ModelMetadata: ...
    def get_providers(self) -> Sequence[str]: ...


def open_session(
    model: str | os.PathLike[str] | bytes,
    *,
    provider: str = "CPUExecutionProvider",
    opt_level: str = "all",
    cpu_arena: bool = True,
    external_folder: str | os.PathLike[str] | None = None,
    optimized_path: str | os.PathLike[str] | None = None,
    config: Iterable[tuple[str, str]] = (),
    intra_op_threads: int | None = None,
) -> OrtSession:
    """An ONNX Runtime session over a file (or a serialised model) on one provider.

    `external_folder`: where a serialised model's external weights are read from (bytes
    have no folder of their own; the weights stay in their files, mapped, never copied).
    `cpu_arena=False` for sessions whose outputs vary in size from run to run: the arena
    keeps, and grows in powers of two, the most any run needed. `optimized_path`: ONNX
    Runtime writes the graph it ran there. `config`: further session config entries.
    """
    import onnxruntime as ort

    if opt_level not in ORT_OPT_LEVELS:
        raise ValueError(f"unknown ORT optimisation level {opt_level!r}")
    g = ort.GraphOptimizationLevel
    levels = [g.ORT_DISABLE_ALL, g.ORT_ENABLE_BASIC, g.ORT_ENABLE_EXTENDED, g.ORT_ENABLE_ALL]
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[ORT_OPT_LEVELS.index(opt_level)]
    options.log_severity_level = ort_severity()  # ORT's own lines would precede Parity's one
    apply_ort_default_severity()
    if not cpu_arena:
        options.enable_cpu_mem_arena = False
    if intra_op_threads is not None:
        options.intra_op_num_threads = int(intra_op_threads)
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    if external_folder is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(external_folder)
        )
    for key, value in config:
        options.add_session_config_entry(key, value)
    source = model if isinstance(model, bytes) else str(Path(model))

    def make() -> OrtSession:
        return ort.InferenceSession(source, sess_options=options, providers=[provider])

    deadline = current_deadline()  # the run's time limit covers the setup (parity.limits.deadline)
    if deadline is None:
        return make()
    return deadline.call(make, "ONNX Runtime's session setup")


_DEFAULT_DOMAIN_OPS: frozenset[str] | None = None


def ort_default_domain_ops() -> frozenset[str]:
    """The op types this ONNX Runtime registers in the default domain (ONNX's and its own,
    such as SimplifiedLayerNormalization), read once from its schema list."""
    global _DEFAULT_DOMAIN_OPS
    if _DEFAULT_DOMAIN_OPS is None:
        try:
            from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

            schemas = ort_c.get_all_operator_schema()
        except Exception:  # a build without its schema list: nothing is taken on trust
            schemas = []
        _DEFAULT_DOMAIN_OPS = frozenset(s.name for s in schemas if s.domain in ("", "ai.onnx"))
    return _DEFAULT_DOMAIN_OPS


PROBE_MAX_BYTES = 512 * 1024 * 1024  # larger files are not probed: the probe doubles the setup
PROBE_TIMEOUT_S = 120.0  # a child still setting up then: no crash said, the setup goes on here
_probed: dict[tuple[str, str, str], str | None] = {}  # (sha256, provider, level) -> outcome
_digests: dict[tuple[str, int, int], str] = {}  # (resolved path, size, mtime_ns) -> sha256


def crash_of(path: str | os.PathLike[str], *, provider: str, opt_level: str) -> str | None:
    """The signal ONNX Runtime died of while opening `path`'s session (e.g. "SIGSEGV"), run
    in a forked child; None when it opened, raised (the in-process setup says why), or was
    not probed (no fork here, a file past PROBE_MAX_BYTES, a child past PROBE_TIMEOUT_S).
    Probed once per content x provider x level in a process (external weights are not part
    of the key: a crash in the setup is the graph's)."""
    if not hasattr(os, "fork"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_size > PROBE_MAX_BYTES:
        return None
    where = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if where not in _digests:
        from parity.files.hashing import file_sha256

        try:
            _digests[where] = file_sha256(Path(path))
        except (OSError, ParityError):  # unreadable here: the in-process setup says why
            return None
    key = (_digests[where], provider, opt_level)
    if key not in _probed:
        _probed[key] = _probe(str(path), provider, opt_level)
    return _probed[key]


def _probe(path: str, provider: str, opt_level: str) -> str | None:
    import signal
    import time
    import warnings

    with warnings.catch_warnings():  # Python 3.12+: "multi-threaded, fork() may deadlock":
        warnings.simplefilter("ignore", DeprecationWarning)  # the child only opens a session
        pid = os.fork()  # and a hung one is killed after PROBE_TIMEOUT_S
    if pid == 0:  # the child: open, then leave without running the parent's exit handlers
        code = 0
        try:
            import faulthandler

            faulthandler.disable()  # the parent's (pytest's, PYTHONFAULTHANDLER) says nothing
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)  # ONNX Runtime's own lines stay out of the terminal
            open_session(path, provider=provider, opt_level=opt_level)
        except BaseException:
            code = 1
        os._exit(code)
    end = time.monotonic() + PROBE_TIMEOUT_S
    deadline = current_deadline()  # the run's time limit bounds the probe too
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if deadline is not None and deadline.expired:  # the run's limit: said as the setup's
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise RunTimeout(
                f"{timeout_message(deadline.seconds or 0.0)}: ONNX Runtime's session setup was "
                "abandoned (it was being tried in a child process, which was stopped)"
            )
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.005)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"
    return None


SIGNAL_WORDS = {"SIGSEGV": "a segmentation fault", "SIGABRT": "an abort", "SIGBUS": "a bus error"}


def opening_level(
    path: str | os.PathLike[str], *, provider: str, opt_level: str
) -> tuple[str, str | None]:
    """The level to open `path` at: `opt_level` when its setup does not crash, else the
    highest lower level whose setup does not, and the crash in words (None: no crash).
    The crash at every level: (opt_level, words) and the caller says it cannot run."""
    crash = crash_of(path, provider=provider, opt_level=opt_level)
    if crash is None:
        return opt_level, None
    said = f"{crash}, {SIGNAL_WORDS[crash]}" if crash in SIGNAL_WORDS else crash
    lower = reversed(ORT_OPT_LEVELS[: ORT_OPT_LEVELS.index(opt_level)])
    for level in lower:
        if crash_of(path, provider=provider, opt_level=level) is None:
            return level, (
                f"ONNX Runtime crashed ({said}) creating its {provider} session for "
                f"{Path(path).name} at --ort-opt-level {opt_level}; the file opens at "
                f"--ort-opt-level {level}, so this run uses that level (a bug in ONNX "
                f"Runtime's optimisation of this graph: pass --ort-opt-level {level})"
            )
    return opt_level, (
        f"ONNX Runtime crashed ({said}) creating its {provider} session for {Path(path).name} "
        "at every --ort-opt-level (disable too): this ONNX Runtime cannot open the file; try "
        "another --provider or ONNX Runtime version"
    )
