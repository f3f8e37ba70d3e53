"""One exception base for everything a user can get wrong, with narrow subclasses.

The CLI turns any `ParityError` into a one-line cause and exit code 2; the dashboard
shows it with the details folded away. Anything else escaping the core is a bug.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from parity.settings import Front, Part, Setting, worded


class ParityError(Exception):
    """A run could not be made. `kind` is the machine-readable category in reports."""

    kind = "error"

    def __init__(
        self,
        message: str | Sequence[Part],
        *,
        detail: str = "",
        setting: Setting | None = None,
    ) -> None:
        """`message` is the body without the setting's name (a sentence naming other
        settings is a sequence of text and `Mention`s); `setting` is what it is about.
        `message` (the attribute) is the CLI's words until `in_words` rewords it."""
        self.body: tuple[Part, ...] = (message,) if isinstance(message, str) else tuple(message)
        self.setting = setting
        self.detail = detail
        self.message = worded(self.body, setting, Front.CLI)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def words(self, front: Front) -> str:
        """This error's one line in `front`'s words (a flag, a keyword, a widget)."""
        return worded(self.body, self.setting, front)

    def replace_text(self, old: str, new: str) -> None:
        """Say `new` wherever the text says `old` (a temp path the user never gave), in
        every front end's words."""
        self.body = tuple(p.replace(old, new) if isinstance(p, str) else p for p in self.body)
        if self.setting is not None:
            self.setting = Setting(self.setting.name, self.setting.item.replace(old, new))
        self.message = self.message.replace(old, new)
        self.args = (self.message,)

    def in_words(self, front: Front) -> ParityError:
        """This error, its message said in `front`'s words (the same object, same class)."""
        self.message = self.words(front)
        self.args = (self.message,)
        return self


_MAX_LINE = 1000  # a joined line stops growing here


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (its type name if it has none), whole: a
    sentence a library wrapped over several lines (a line ending in ":", or the next one
    indented and in lower case, like onnx.checker's "... of node: / name: mm1 OpType: MatMul
    / is not output of any previous nodes.") is joined back into one line."""
    lines = str(exc).splitlines()
    start = next((k for k, line in enumerate(lines) if line.strip()), None)
    if start is None:
        return type(exc).__name__
    parts = [lines[start].strip()]
    for raw in lines[start + 1 :]:
        text = raw.strip()
        if not text:
            break
        continued = parts[-1].endswith(":") or (raw[:1].isspace() and text[:1].islower())
        if not continued or sum(map(len, parts)) > _MAX_LINE:
            break
        parts.append(text)
    return " ".join(parts)[:_MAX_LINE]


def describe_error(error: BaseException) -> tuple[str, str]:
    """(kind, one-line message) for any error that stopped a run: the CLI's and the app's."""
    if isinstance(error, ParityError):
        return error.kind, error.message
    text = str(error).strip()
    return "internal", f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


class UsageError(ParityError):
    kind = "usage"


class ModelLoadError(ParityError):
    kind = "model_load"


class OnnxLoadError(ParityError):
    kind = "onnx_load"


class InputError(ParityError):
    kind = "inputs"


class ModelRunError(ParityError):
    kind = "model_run"


class SignatureMismatch(ModelRunError):
    """The torch model refused the ONNX file's inputs: `detail` is the wrapper to write."""


class OnnxRunError(ParityError):
    kind = "onnx_run"


class ExportError(ParityError):
    """An export Parity made itself failed: how long it ran, the exporter's cause, and the
    run summary up to that point (what the CLI and the dashboard show with the error)."""

    kind = "export"

    def __init__(
        self,
        message: str,
        *,
        detail: str = "",
        seconds: float | None = None,
        cause: str = "",
        summary: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, detail=detail)
        self.seconds = seconds
        self.cause = cause or message
        self.summary: Mapping[str, Any] = summary or {}

    def with_summary(self, summary: Mapping[str, Any]) -> ExportError:
        """The same error carrying the run summary (raise it `from` this one's cause)."""
        return ExportError(
            self.message,
            detail=self.detail,
            seconds=self.seconds,
            cause=self.cause,
            summary=summary,
        )


class SavedRunError(ParityError):
    kind = "saved_run"


class WriteError(ParityError):
    """An output (report, saved run, reference) could not be written; `path` says which."""

    kind = "write"

    def __init__(self, message: str, *, path: str = "", detail: str = "") -> None:
        super().__init__(message, detail=detail)
        self.path = path


class OutputsUnwritten(WriteError):
    """A finished run whose verdict stands but some of whose files could not be written (a
    full disk): one line, exit 2, and never an error report in their place."""


class BudgetError(ParityError):
    """A file or a flag asks for more memory than the budget (--max-memory) allows."""

    kind = "too_large"


class RunTimeout(ParityError):
    """The run went past its time limit (--timeout)."""

    kind = "timeout"


class FieldError(ParityError, ValueError):
    """A field of a JSON file (tolerances, a saved run's manifest, a sweep manifest) has the
    wrong type or value; the text says where and what. Readers turn it into their own error
    naming the file; a ValueError too, as it was before it joined this tree."""

    kind = "usage"


class ExpressionError(ParityError, ValueError):
    """A .pt2's symbolic-shape expression that is not plain arithmetic; `text` is the
    expression (set by parity.load.pt2_sympy's parser). The loader names the member."""

    kind = "model_load"
    text: str = ""


class Interrupted(ParityError):
    """A sweep was stopped while this pair ran (its process was killed): not a result."""

    kind = "interrupted"


class StorageError(UsageError):
    """A URI that could not be read (a sweep's object storage): an infrastructure error of its
    pair (`--resume` runs it again), unlike a pin mismatch. `transient`: worth trying again
    (connection refused, a timeout, throttling, a 5xx answer)."""

    kind = "storage"

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
