"""--data's findings (its result parity.results.answers, the run's "data"): the answer per
output first (parity.data.words: how many samples change their answer), then what was skipped
and what the run noted. Registered by name (parity.show.finder) before every other part of
the run; a data run is one --layers and --noise-floor do not apply to, so no "not measured"
hint is said beside it.
"""

from __future__ import annotations

from parity.results import Finding, FindingKind, Status, ValidationRun
from parity.show.finder import finds_in_run

__all__ = ["answer_findings"]


@finds_in_run("data", rank=100, alone=True)
def answer_findings(run: ValidationRun) -> list[Finding]:
    """The answer per output (parity.data.words), then what was skipped, then the notes."""
    data = run.data
    if data is None:
        return []
    from parity.data.words import answer_sentence, criterion_hint, skipped_sentence

    named = len(data.outputs) > 1
    failing = {c.name for c in run.outputs if c.status is Status.FAIL}
    found = [
        Finding(
            FindingKind.ANSWERS,
            answer_sentence(data, o, named=named) + criterion_hint(o, o.name in failing),
            o.name,
        )
        for o in data.outputs
    ]
    skipped = skipped_sentence(data)
    found += [Finding(FindingKind.ANSWERS, skipped)] if skipped else []
    return found + [Finding(FindingKind.ANSWERS, note + ".") for note in data.notes]
