"""DIR/index.html: one offline page listing every pair, linking to its report.

No script, no network (a Content-Security-Policy forbids any fetch); every name and message
is escaped text. Links are relative, so the folder can be copied or served as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from parity.files.atomic import write_text
from parity.sweep.plan import REPORT
from parity.sweep.summary import attempts_text, never_placed, result_from_dict, verdict_words
from parity.text import html_text as _e
from parity.text import number_text
from parity.version import __version__

INDEX = "index.html"
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{padding:.25em .8em;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#137333}.fail{color:#b3261e;font-weight:600}.error{color:#8a4b00;font-weight:600}
"""


def render_index(summary: Mapping[str, Any]) -> str:
    """Each pair links to its HTML report when it wrote one, else to its report.json."""
    c = summary.get("counts", {})
    done = len(summary.get("pairs", []))
    state = "" if summary.get("complete") else f" (running: {done} of {summary.get('total')})"
    head = (
        f"{done} pair(s): {c.get('pass', 0)} pass, {c.get('fail', 0)} fail, "
        f"{c.get('error', 0)} error{state}"
    )
    rows = "\n".join(_row(p) for p in summary.get("pairs", []))
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f"<title>Parity sweep: {_e(head)}</title><style>{_CSS}</style></head>\n<body>\n"
        f"<h1>Parity sweep</h1>\n<p>{_e(head)}. Manifest: <code>"
        f"{_e(str(summary.get('manifest', '')))}</code></p>\n"
        "<table><thead><tr><th>pair</th><th>verdict</th><th>worst output</th>"
        "<th>max abs</th><th>seconds</th><th>tries</th><th>attempts (outcome, node, seconds)</th>"
        "<th>failing / error</th></tr></thead><tbody>\n"
        f"{rows}\n</tbody></table>\n"
        f"<footer><p>Written by Parity {_e(__version__)} on "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}.</p></footer>\n</body></html>\n"
    )


def write_index(out: Path, summary: Mapping[str, Any]) -> Path:
    return write_text(out / INDEX, render_index(summary))


def _row(data: Mapping[str, Any]) -> str:
    pair = result_from_dict(dict(data))
    link = f"{pair.name}/{pair.html or REPORT}"
    name = f"<a href='{_e(quote(link))}'>{_e(pair.name)}</a>"
    verdict = str(pair.verdict)
    detail = pair.error or ", ".join(pair.failing)
    notes = "".join(f"<br><small>{_e(n)}</small>" for n in pair.notes)
    seconds = "" if never_placed(pair) else f"{pair.seconds:.1f}"
    worst = pair.worst
    return (
        f"<tr><td>{name}</td><td class='{_e(verdict)}'>{_e(verdict_words(pair))}</td>"
        f"<td>{_e(worst.output if worst else '')}</td>"
        f"<td class='n'>{_e(number_text(worst.max_abs) if worst else '')}</td>"
        f"<td class='n'>{seconds}</td><td class='n'>{len(pair.attempts)}</td>"
        f"<td>{_e(attempts_text(pair))}</td>"
        f"<td>{_e(detail)}{notes}</td></tr>"
    )
