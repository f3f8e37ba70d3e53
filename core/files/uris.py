"""URIs (s3://, gs://, https://, file://, ...): told from paths, shown redacted, and opened
by fsspec with the package for their scheme. Shared by a sweep's pairs (parity.sweep) and a
data set read from object storage (parity.data.storage).

A URI is shown and stored only as `redacted_uri` writes it: its user info (`user:PASS@`) and
the values of signing parameters (a presigned URL's `X-Amz-Signature`, `X-Amz-Credential`,
`X-Amz-Security-Token`, GCS's `X-Goog-Signature`, Azure SAS's `sig`, any `token`) become
`***`, so the name stays recognisable and the secret never leaves the process that reads it
(CI uploads report.json, log.txt, the HTML and the saved run).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from parity.errors import StorageError, first_line

URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
FSSPEC_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "http": "aiohttp"}
FSSPEC_PACKAGES |= {"https": "aiohttp", "az": "adlfs", "abfs": "adlfs", "hf": "huggingface_hub"}

HIDDEN = "***"
_URI = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_SECRET_PARAM = re.compile(
    r"(signature|credential|token|secret|passw|pwd|api[-_]?key|access[-_]?key|key-pair-id"
    r"|policy|^sig$|^auth|^code$|^key$)",
    re.IGNORECASE,
)
"""Query parameters whose value is (or grants) a secret: AWS SigV4 (X-Amz-Credential,
X-Amz-Signature, X-Amz-Security-Token) and V2 (AWSAccessKeyId, Signature), GCS (X-Goog-
Signature, X-Goog-Credential), Azure SAS (sig), CloudFront (Policy, Key-Pair-Id), tokens."""


def is_uri(value: str) -> bool:
    """s3://..., gs://..., https://..., file://...: not a path on this machine."""
    return URI_RE.match(value) is not None


def redacted_uri(uri: str) -> str:
    """`uri` as it may be shown or stored: user info and signing parameters' values hidden
    (`https://***@host/m.onnx?X-Amz-Signature=***&X-Amz-Expires=60`); the rest unchanged."""
    try:
        parts = urlsplit(uri)
    except ValueError:  # e.g. an unbalanced [ in the host: show nothing after the scheme
        return uri.split("://", 1)[0] + "://" + HIDDEN
    netloc = parts.netloc
    if "@" in netloc:
        netloc = HIDDEN + "@" + netloc.rpartition("@")[2]
    query = "&".join(_hidden_param(p) for p in parts.query.split("&")) if parts.query else ""
    if netloc == parts.netloc and query == parts.query:
        return uri
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _hidden_param(param: str) -> str:
    name, equals, _ = param.partition("=")
    return f"{name}={HIDDEN}" if equals and _SECRET_PARAM.search(unquote(name)) else param


def redacted_text(text: str) -> str:
    """`text` with every URI in it redacted (redacted_uri): an error message of a storage
    library quotes the URL it read."""
    return _URI.sub(lambda m: redacted_uri(m.group()), text) if "://" in text else text


def install_hint(uri: str) -> str:
    """What to pip install to read `uri` ("pip install fsspec s3fs")."""
    package = FSSPEC_PACKAGES.get(uri.split("://", 1)[0].lower())
    return f"pip install fsspec {package}" if package else "pip install fsspec"


def filesystem(uri: str) -> tuple[Any, str]:
    """(fsspec filesystem, path in it) for `uri`: a fresh instance each call (fsspec caches
    them per process, which would keep an endpoint or credentials the environment no longer
    names). StorageError (one line, the URI redacted) without fsspec or the scheme's package,
    or for a URI fsspec cannot read; the message starts with the URI."""
    shown = redacted_uri(uri)
    try:
        import fsspec
    except ImportError:
        raise StorageError(f"{shown}: reading it needs {install_hint(uri)}") from None
    try:
        return fsspec.core.url_to_fs(uri, skip_instance_cache=True)
    except ImportError as exc:
        said = redacted_text(first_line(exc))
        raise StorageError(f"{shown}: reading it needs {install_hint(uri)} ({said})") from None
    except Exception as exc:  # an unknown scheme, a malformed URI: fsspec's own words
        said = redacted_text(first_line(exc))
        raise StorageError(f"{shown}: cannot be read: {type(exc).__name__}: {said}") from None
