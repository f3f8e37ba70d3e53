"""A pair's files named as the manifest names them, wherever its run writes a name.

A pair reads some files from where the sweep put them (a URI fetched into its private folder,
a Ray worker's copy of a file outside the manifest's folder) and writes its outputs into a
private folder. The sweep hands the pair's `parity validate` the pairs (where it is, how the
manifest names it) in one environment variable; validate renames its run with them
(ValidationRun.renamed: report, HTML, saved run) and its error report, and the sweep renames
the pair's log. So no temporary folder appears in --out, and two runs of one manifest name the
same things.

A URI is shown and stored only as `redacted_uri` writes it: its user info (`user:PASS@`) and
the values of signing parameters (a presigned URL's `X-Amz-Signature`, `X-Amz-Credential`,
`X-Amz-Security-Token`, GCS's `X-Goog-Signature`, Azure SAS's `sig`, any `token`) become
`***`, so the name stays recognisable and the secret never leaves the process that reads it
(CI uploads report.json, log.txt, the HTML and the saved run).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

ENV = "PARITY_SWEEP_NAMES"
"""JSON list of [where, name] pairs; set only by the sweep for its pairs' processes."""
_MAX_ENV = 1 << 20


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


def names_env(names: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The environment variable carrying `names` to a pair's process (longest first, so that
    a folder never renames part of a longer path first)."""
    ordered = sorted({(w, n) for w, n in names if w and w != n}, key=lambda p: -len(p[0]))
    return {ENV: json.dumps(ordered)}


def given_names(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """The pairs the sweep gave this process; none outside a sweep (or when malformed)."""
    raw = (os.environ if environ is None else environ).get(ENV, "")
    if not raw or len(raw) > _MAX_ENV:
        return ()
    try:
        data = json.loads(raw)
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    return tuple(
        (str(p[0]), str(p[1]))
        for p in data
        if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) and p[0]
    )


def renamed_text(text: str, names: Sequence[tuple[str, str]]) -> str:
    """`text` with each temporary place named as the manifest names it, URIs redacted."""
    for where, name in names:
        text = text.replace(where, name)
    return redacted_text(text)
