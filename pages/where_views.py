"""Where the mismatches are (parity.judge.where), for the pages: memoised per stored run and
tolerance, and the sentences the Overview leads with."""

from __future__ import annotations

import streamlit as st

from parity.dashboard import state
from parity.dashboard.text import md_text
from parity.judge.where import WhereProfile, where_of
from parity.results import OutputComparison, ValidationRun
from parity.show.sentences import failing_outputs, other_failing_sets, output_facts


def where_for(run: ValidationRun, c: OutputComparison) -> WhereProfile | None:
    """parity.judge.where.where_of(run, c), computed once per stored run, output and tolerance (a
    pass over the tensors: never on every rerun)."""
    stored = state.raw_run()  # the stored run; a candidate's comparisons carry its index
    key = (c.candidate, c.input_set, c.name, c.tolerance.atol, c.tolerance.rtol)
    return state.run_memo(state.WHERE_CACHE, stored, key, lambda: where_of(run, c))


def _others(run: ValidationRun, c: OutputComparison) -> list[tuple[int, WhereProfile | None]]:
    return [(x.input_set, where_for(run, x)) for x in other_failing_sets(run, c)]


def failing_sentences(run: ValidationRun, *, limit: int = 8) -> None:
    """Per failing output, worst first, its facts one a line (parity.show.sentences.
    output_facts: the HTML report's "In numbers" words)."""
    failing = failing_outputs(run)
    items = []
    for c in failing[:limit]:
        facts = output_facts(run, c, where_for(run, c), _others(run, c))
        items.append(f"- **{md_text(facts.head)}**")
        items += [f"    - {md_text(line)}" for line in facts.lines]
    if len(failing) > limit:
        items.append(f"- {len(failing) - limit} more failing outputs: see the table below.")
    if items:
        st.markdown("\n".join(items))
