"""A pair's files named as the manifest names them, wherever its run writes a name.

A pair reads some files from where the sweep put them (a URI fetched into its private folder,
a Ray worker's copy of a file outside the manifest's folder) and writes its outputs into a
private folder. The sweep hands the pair's `parity validate` the pairs (where it is, how the
manifest names it) in one environment variable; validate renames its run with them
(ValidationRun.renamed: report, HTML, saved run) and its error report, and the sweep renames
the pair's log. So no temporary folder appears in --out, and two runs of one manifest name the
same things.

A URI is shown and stored only as `redacted_uri` writes it (parity.files.uris): its user
info and signing parameters' values become `***`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from parity.files.uris import HIDDEN, redacted_text, redacted_uri  # noqa: F401  (re-exported)

ENV = "PARITY_SWEEP_NAMES"
"""JSON list of [where, name] pairs; set only by the sweep for its pairs' processes."""
_MAX_ENV = 1 << 20


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
