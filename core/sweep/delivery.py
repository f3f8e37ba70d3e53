"""A pair's input files where it runs, with no filesystem shared with the driver.

On Ray, the driver reads every file a pair names (the model, the ONNX file and its external
data, a Python factory file with what lies beside it (`beside_factory`), an hf: folder,
--inputs, --reference, --tolerances, ...) and puts each distinct content into Ray's object
store once per sweep (`Shipper`, keyed by SHA-256); the pair's task gets the
references and writes the files into a private folder (`unpack`), at their relative paths,
so a factory still imports its neighbours and an ONNX file finds its external data. A path
outside the manifest's folder (absolute, or climbing out with ..) lands under `_outside/`,
by its folder.

A URI (s3://, gs://, https://, file://) is read where the pair runs on either engine (its
Ray task, the local engine's thread for it: `fetch_uris`), streamed to the pair's private
folder within the pair's time: file:// by Parity's safe reader, the others by fsspec and the
package for the scheme. A SHA-256 pinned in the manifest is checked on what arrived.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from parity.errors import StorageError, UsageError, first_line
from parity.files.safe_read import open_regular, read_bytes
from parity.files.ship import (  # noqa: F401  (re-exported: the sweep's names for them)
    BESIDE_LIMIT,
    MAX_FILE,
    MAX_FOLDER_FILES,
    NOT_BESIDE,
    Bundle,
    ContentStore,
    Shipped,
    beside_factory,
    bounded,
    external_data,
    unpack,
)
from parity.files.uris import FSSPEC_PACKAGES, redacted_text, redacted_uri
from parity.limits.budget import format_size
from parity.sweep.plan import InputSlot, PairJob

OUTSIDE = "_outside"


class Shipper(ContentStore):
    """Each pair's input files as a Bundle, each distinct content put once per sweep."""

    def bundle(self, job: PairJob) -> Bundle:
        """UsageError (one line) when a file cannot be read or differs from its pin."""
        root = Path(job.cwd)
        files: dict[str, Shipped] = {}
        moved: list[tuple[int, str]] = []
        for slot in job.inputs:
            if slot.kind == "uri":
                continue
            rel = task_path(slot.path)
            moved.append((slot.index, rel))
            for source, target in _files_of(slot, root / slot.path, rel):
                if target not in files:
                    pin = slot.sha256 if target == rel else None
                    files[target] = self.ship(source, target, pin)
        return Bundle(tuple(files.values()), tuple(moved))


def task_path(path: str) -> str:
    """Where a path the manifest names lands in the task's folder (POSIX, relative)."""
    pure = PurePosixPath(path.replace("\\", "/"))
    if not pure.is_absolute() and ".." not in pure.parts and pure.parts:
        return str(pure)
    folder = os.path.abspath(os.path.dirname(path))
    tag = hashlib.sha256(folder.encode()).hexdigest()[:16]
    return f"{OUTSIDE}/{tag}/{pure.name}"


def _files_of(slot: InputSlot, path: Path, rel: str) -> list[tuple[Path, str]]:
    """(file on the driver, its place in the task's folder) for everything the input needs."""
    if slot.kind == "dir":
        found = [p for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink()]
        bounded(found, path)
        return [(p, f"{rel}/{p.relative_to(path).as_posix()}") for p in found]
    files = [(path, rel)]
    parent = PurePosixPath(rel).parent
    if path.suffix == ".py":  # a factory: what beside it it may import or open
        siblings = beside_factory(path)
        files += [(p, str(parent / p.relative_to(path.parent).as_posix())) for p in siblings]
    elif path.suffix == ".onnx":
        files += [(path.parent / loc, str(parent / loc)) for loc in external_data(path)]
    return files


STORAGE_TRIES = 4
"""Reads of one URI, the first included, while its storage answers with a transient error."""
STORAGE_BACKOFF_S = (1.0, 2.0, 4.0)
"""Seconds before the 2nd, 3rd and 4th read (the last repeats if there were more)."""
Retried = Callable[[str, float], None]
"""(what went wrong, the seconds that try took): one failed read, about to be tried again."""


class FetchTimeout(BaseException):
    """The pair's time ran out while its URIs were read (the read is abandoned): control
    flow to the pair's runner, which says the timeout (never an error of its own)."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.uri = uri


def fetch_uris(
    job: PairJob,
    folder: Path,
    on_retry: Retried | None = None,
    *,
    tries: int | None = None,
    backoff: Sequence[float] | None = None,
    deadline: float | None = None,
) -> dict[int, str]:
    """Read every URI input of the pair into `folder` (the pair's private folder); args index
    -> absolute path. Each is streamed to disk (CHUNK bytes at a time), its size checked
    before (the storage's own size: Content-Length, an object's listing) and while it is read.
    A transient storage error is retried `tries` times in all, after the `backoff` waits, each
    failed read told to `on_retry`. StorageError (one line) when one cannot be read;
    UsageError when it differs from its pin or is too large; FetchTimeout at `deadline`
    (time.monotonic()): the reads run in a thread that is abandoned there, told to stop at
    its next chunk, so a server trickling a byte at a time cannot hold the pair past its
    --timeout."""
    slots = [s for s in job.inputs if s.kind == "uri"]
    if not slots:
        return {}
    done: dict[str, Any] = {}
    stop = threading.Event()
    reading = [slots[0].path]

    def read_all() -> None:
        try:
            done["moved"] = _fetch_all(slots, folder, on_retry, tries, backoff, stop, reading)
        except BaseException as exc:  # handed to the waiting thread
            done["error"] = exc

    worker = threading.Thread(target=read_all, name="parity-uri-fetch", daemon=True)
    worker.start()
    worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        stop.set()
        raise FetchTimeout(redacted_uri(reading[0]))
    if "error" in done:
        raise done["error"]
    return dict(done["moved"])


def _fetch_all(
    slots: Sequence[InputSlot],
    folder: Path,
    on_retry: Retried | None,
    tries: int | None,
    backoff: Sequence[float] | None,
    stop: threading.Event,
    reading: list[str],
) -> dict[int, str]:
    tries = STORAGE_TRIES if tries is None else tries
    backoff = STORAGE_BACKOFF_S if backoff is None else backoff
    moved: dict[int, str] = {}
    for k, slot in enumerate(slots):
        reading[0] = slot.path
        target = folder / f"uri{k}" / uri_file_name(slot.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = _read_retrying(slot.path, target, uri_limit(slot), on_retry, tries, backoff, stop)
        if slot.sha256 and digest != slot.sha256:
            raise UsageError(
                f"{redacted_uri(slot.path)}: its SHA-256 is {digest}, the manifest pins "
                f"{slot.sha256}"
            )
        moved[slot.index] = str(target)
    return moved


def uri_file_name(uri: str) -> str:
    """The name a URI's file gets in the pair's folder: the last part of its path, unless that
    is no file name (`s3://b/models/..`, `/`, `.`): then `file`."""
    name = PurePosixPath(urlparse(uri).path).name
    return name if name not in ("", ".", "..") else "file"


def uri_limit(slot: InputSlot) -> int:
    """The most bytes one URI input may have: an ONNX file (`--onnx`, `--reference-onnx`) is
    read whole by ONNX's protobuf (2 GiB, parity.load.onnx_read); anything else MAX_FILE."""
    return ONNX_LIMIT if "onnx" in slot.flag else MAX_FILE


def _read_retrying(
    uri: str,
    target: Path,
    limit: int,
    on_retry: Retried | None,
    tries: int,
    backoff: Sequence[float],
    stop: threading.Event | None = None,
) -> str:
    for n in range(max(1, tries)):
        if stop is not None and stop.is_set():  # the pair's time ran out during a back-off
            raise _Stopped(uri)
        start = time.monotonic()
        try:
            return fetch_uri(uri, target, limit, stop)
        except StorageError as exc:
            if not exc.transient or n + 1 >= tries:
                if not n:
                    raise
                said = f"{exc.message} (read {n + 1} times)"
                raise StorageError(said, transient=exc.transient) from None
            if on_retry is not None:
                on_retry(exc.message, round(time.monotonic() - start, 2))
            pause(backoff[min(n, len(backoff) - 1)] if backoff else 0.0)
    raise AssertionError("unreachable")


def pause(seconds: float) -> None:
    """The back-off between two reads of a URI."""
    time.sleep(seconds)


_TRANSIENT_TYPES = frozenset(
    {
        "ConnectionError",
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "TimeoutError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ClientConnectorError",
        "ClientOSError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "IncompleteReadError",
        "ResponseStreamingError",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "TooManyRequests",
    }
)


def transient(exc: BaseException) -> bool:
    """Whether a storage read failed in a way that may heal: the connection (refused, reset,
    timed out), throttling, or a 5xx / 429 answer; the exception or anything it was raised
    from (s3fs re-raises botocore's errors as OSError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if {c.__name__ for c in type(current).__mro__} & _TRANSIENT_TYPES:
            return True
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNOS:
            return True
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            meta = response.get("ResponseMetadata") or {}
            status = meta.get("HTTPStatusCode")
            if error.get("Code") in _TRANSIENT_CODES or (
                isinstance(status, int) and (status >= 500 or status == 429)
            ):
                return True
        status = getattr(current, "status", None)  # aiohttp's ClientResponseError
        if isinstance(status, int) and (status >= 500 or status == 429):
            return True
        current = current.__cause__ or current.__context__
    return False


_TRANSIENT_ERRNOS = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH}
)


CHUNK = 1 << 20
"""Bytes read from a URI at a time: what one read holds in memory, whatever the file's size."""
ONNX_LIMIT = 2 << 30
"""parity.load.onnx_read.MAX_PROTO (not imported: that would import onnx here)."""


def read_uri(uri: str, limit: int = MAX_FILE) -> bytes:
    """The bytes at `uri` (a small file: a test's, a manifest's), through fetch_uri."""
    with tempfile.TemporaryDirectory(prefix="parity-uri-") as tmp:
        target = Path(tmp) / "file"
        fetch_uri(uri, target, limit)
        return read_bytes(target, what=redacted_uri(uri), limit=limit, error=StorageError)


def fetch_uri(uri: str, target: Path, limit: int, stop: threading.Event | None = None) -> str:
    """Stream the bytes at `uri` into the new file `target`, CHUNK at a time; their SHA-256.
    file:// by Parity's safe reader, any other scheme by fsspec (a fresh filesystem each read:
    fsspec caches instances per process, which would keep an endpoint or credentials the
    environment no longer names). The size is checked before the read where the storage
    says it and while reading always: past `limit`, UsageError, nothing more read. Every
    message names the URI redacted (parity.sweep.names.redacted_uri)."""
    shown = redacted_uri(uri)
    scheme = uri.split("://", 1)[0].lower()
    if scheme == "file":
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            raise StorageError(
                f"{shown}: a file:// URI names a path on this machine (file:///PATH)"
            )
        with open_regular(unquote(parsed.path), what=shown, limit=limit, error=StorageError) as fh:
            return _copy(fh, target, limit, shown, stop)
    package = FSSPEC_PACKAGES.get(scheme)
    install = f"pip install fsspec {package}" if package else "pip install fsspec"
    try:
        import fsspec
    except ImportError:
        raise StorageError(f"reading {shown} needs fsspec on the worker: {install}") from None
    try:
        fs, path = fsspec.core.url_to_fs(uri, skip_instance_cache=True)
        size = _stated_size(fs, path)
        if size is not None and size > limit:
            raise UsageError(_too_large(shown, size, limit))
        # HTTP: a stream (a sized file would fetch ranges, or all of it when it cannot)
        options = {"block_size": 0} if scheme in ("http", "https") else {}
        with fs.open(path, "rb", **options) as fh:
            return _copy(fh, target, limit, shown, stop)
    except (UsageError, _Stopped):
        raise
    except ImportError as exc:
        raise StorageError(
            f"reading {shown} needs {install} ({redacted_text(first_line(exc))})"
        ) from None
    except Exception as exc:  # every filesystem raises its own: the message is what matters
        said = redacted_text(first_line(exc).replace(str(target), shown))
        raise StorageError(
            f"cannot read {shown}: {type(exc).__name__}: {said}", transient=transient(exc)
        ) from None


class _Stopped(BaseException):
    """The read was abandoned (its pair's time ran out): control flow, never an error."""


def _stated_size(fs: Any, path: str) -> int | None:
    """The size the storage states for `path` (S3's listing, HTTP's Content-Length), if any."""
    try:
        size = fs.size(path)
    except Exception:  # noqa: BLE001 - no stated size: the read itself says what is wrong
        return None
    return size if isinstance(size, int) and size >= 0 else None


def _copy(fh: Any, target: Path, limit: int, shown: str, stop: threading.Event | None) -> str:
    digest = hashlib.sha256()
    total = 0
    with open(target, "xb") as out:
        while chunk := fh.read(CHUNK):
            if stop is not None and stop.is_set():
                raise _Stopped(shown)
            total += len(chunk)
            if total > limit:
                raise UsageError(_too_large(shown, None, limit))
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _too_large(shown: str, size: int | None, limit: int) -> str:
    stated = f"{format_size(size)}, " if size is not None else ""
    return f"{shown}: {stated}larger than {format_size(limit)}, not read"
