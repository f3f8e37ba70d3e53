"""Sweep page: open a `parity sweep --out` folder, look at every pair, open one pair's run.

`?sweep=DIR` in the URL opens that folder. Selecting a pair's row opens its saved run
(`--save-run` in its args) and goes to Overview; a pair without one shows its error and
files instead. Pair and output names are user text: they appear only in dataframes and
plain text, never in markdown. The folder is read by parity.sweep.folder; the last folder
that opened stays when another one fails to.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from parity.dashboard import routes, state
from parity.dashboard.frame import initial_sweep
from parity.dashboard.saved_runs import open_and_say
from parity.dashboard.tables import status_style
from parity.errors import ParityError
from parity.labels import INTENDED_MARK, status_label
from parity.results import Status
from parity.show.cause_labels import HIDDEN_BUG_MARKED, INTENDED_WORDS
from parity.show.findings import HIDDEN_BY_TOLERANCE
from parity.sweep.execute import LOG, PairResult
from parity.sweep.folder import SweepFolder, load_sweep
from parity.sweep.plan import REPORT
from parity.sweep.summary import attempts_text, never_placed, retried
from parity.text import number_text

VERDICT_TEXT = {"pass": "✓ pass", "fail": "✗ fail", "error": "⚠ error"}
CELL_MARK = {"pass": "✓"}


def main() -> None:
    if state.pop(state.SWEEP_GOTO_OVERVIEW, False):
        st.switch_page(routes.OVERVIEW)
    st.title("Sweep")
    _open_from_url()
    opened: SweepFolder | None = state.get(state.SWEEP_FOLDER)
    if opened is not None and not state.has(state.SWEEP_PATH):  # back from another page
        state.put(state.SWEEP_PATH, str(opened.path))
    st.text_input(
        "Sweep folder (the --out of `parity sweep`, a path on this machine)",
        key=state.SWEEP_PATH,
        placeholder="results",
    )
    st.button("Open", key=state.SWEEP_OPEN, on_click=_open_typed)
    error = state.get(state.SWEEP_ERROR)
    if error:
        st.error("Could not open that sweep folder.", icon=":material/error:")
        st.text(error)  # paths and messages are text, never markdown
    sweep: SweepFolder | None = state.get(state.SWEEP_FOLDER)
    if sweep is None:
        st.caption("Run `parity sweep MANIFEST --out DIR`, then open DIR here (or `?sweep=DIR`).")
        return
    _summary(sweep)
    only_bad = _pairs_table(sweep)
    _picked(sweep)
    _grid(sweep, only_bad=only_bad)


# ------------------------------------------------------------------------------ opening


def _open_from_url() -> None:
    path = initial_sweep()
    if path and state.get(state.SWEEP_OPENED) != path:
        state.put(state.SWEEP_OPENED, path)
        state.put(state.SWEEP_PATH, path)
        _open(path)


def _open_typed() -> None:
    path = str(state.get(state.SWEEP_PATH, "")).strip()
    if not path:
        state.put(state.SWEEP_ERROR, "type the path of a sweep folder first")
        return
    _open(path)


def _open(path: str) -> None:
    try:
        state.put(state.SWEEP_FOLDER, load_sweep(Path(path)))
    except ParityError as exc:
        state.put(state.SWEEP_ERROR, exc.message)
        return
    state.pop(state.SWEEP_ERROR)
    state.pop(state.SWEEP_PICKED)


def shown_pairs(sweep: SweepFolder, *, only_bad: bool) -> list[PairResult]:
    """The pairs the table lists, in its row order (the manifest's)."""
    return [p for p in sweep.pairs if not only_bad or p.verdict != "pass"]


def _on_pick() -> None:
    """A row was selected: open that pair's saved run and go to Overview, or say why not."""
    sweep: SweepFolder | None = state.get(state.SWEEP_FOLDER)
    rows = state.selected_rows(state.SWEEP_TABLE)
    if sweep is None or not rows:
        state.pop(state.SWEEP_PICKED)
        return
    pairs = shown_pairs(sweep, only_bad=bool(state.get(state.SWEEP_ONLY_BAD)))
    if rows[0] >= len(pairs):
        return
    name = pairs[rows[0]].name
    path = sweep.saved_run(name)
    if path is not None and open_and_say(path, shown=str(path)):
        state.pop(state.SWEEP_PICKED)
        state.put(state.SWEEP_GOTO_OVERVIEW, True)
    else:
        state.put(state.SWEEP_PICKED, name)


# ------------------------------------------------------------------------------ drawing


def _summary(sweep: SweepFolder) -> None:
    counts = {v: sum(p.verdict == v for p in sweep.pairs) for v in VERDICT_TEXT}
    still = (
        ""
        if sweep.complete
        else f" (still running: {len(sweep.pairs)} of {sweep.total} done; Open again to refresh)"
    )
    meant = sum(bool(sweep.intended(p.name)) for p in sweep.pairs)
    meant_words = f" ({meant} only by what its file was meant to do)" if meant else ""
    hiding = sum(p.verdict == "pass" and bool(sweep.hidden_bugs(p.name)) for p in sweep.pairs)
    # one story: a pass whose report found a bug is never only counted a pass
    hiding_words = f" ({hiding} with {HIDDEN_BY_TOLERANCE})" if hiding else ""
    st.text(
        f"{len(sweep.pairs)} pair(s): {counts['pass']} pass{hiding_words}, "
        f"{counts['fail']} fail{meant_words}, "
        f"{counts['error']} error{still}\nfolder {sweep.path}\nmanifest {sweep.manifest}"
    )


def pairs_frame(sweep: SweepFolder, *, only_bad: bool) -> pd.DataFrame:
    rows = [
        {
            "pair": p.name,
            "verdict": _verdict_text(sweep, p) + (" (retried)" if retried(p) else ""),
            "worst output": p.worst.output if p.worst else "",
            "max abs": p.worst.max_abs if p.worst else None,
            "failing / error": p.error or ", ".join(p.failing),
            "seconds": None if never_placed(p) else p.seconds,
            "exit code": p.exit_code,
            "tries": len(p.attempts),
            "attempts": attempts_text(p),
            "saved run": "yes" if sweep.saved_run(p.name) else "",
            "notes": "; ".join(p.notes),
        }
        for p in shown_pairs(sweep, only_bad=only_bad)
    ]
    return pd.DataFrame(rows)


def _verdict_text(sweep: SweepFolder, p: PairResult) -> str:
    """``✓ pass``, ``✗ fail``, ``⚠ error``, or ``≈ fail: float16 rounding`` where every
    failing output is what the file was meant to do (amber: parity.show.colors.mark_css)."""
    intended = sweep.intended(p.name)
    if intended:
        return f"{INTENDED_MARK} fail: {intended}"
    if p.verdict == "pass" and sweep.hidden_bugs(p.name):  # red: a bug its tolerance passes
        return HIDDEN_BUG_MARKED
    return VERDICT_TEXT.get(p.verdict, p.verdict)


def _pairs_table(sweep: SweepFolder) -> bool:
    """The summary table; returns whether only failing and error pairs are shown."""
    st.subheader("Pairs")
    only_bad = st.toggle("Only failing and error pairs", key=state.SWEEP_ONLY_BAD)
    frame = pairs_frame(sweep, only_bad=only_bad)
    if frame.empty:
        st.caption("No pair to show.")
        return only_bad
    st.caption(
        "Click a column header to sort. Select a pair's row to open its saved run in "
        "Overview, Inspect and Tolerances (pairs whose args have `--save-run`)."
    )
    st.dataframe(
        status_style(frame, ["verdict"]),
        hide_index=True,
        width="stretch",
        column_config={
            "max abs": st.column_config.NumberColumn("max abs", format="%.3e"),
            "seconds": st.column_config.NumberColumn("seconds", format="%.1f"),
            "exit code": st.column_config.NumberColumn("exit code", format="%d"),
            "failing / error": st.column_config.TextColumn("failing / error", width="large"),
            "attempts": st.column_config.TextColumn(
                "attempts",
                help="Every try: its outcome, the node it ran on, its seconds. A pass after "
                "more than one try is marked (retried).",
                width="large",
            ),
        },
        on_select=_on_pick,
        selection_mode="single-row",
        key=state.SWEEP_TABLE,
    )
    return only_bad


def _picked(sweep: SweepFolder) -> None:
    """The selected pair, when it has no saved run to open (or its run could not open)."""
    name = state.get(state.SWEEP_PICKED)
    pair = next((p for p in sweep.pairs if p.name == name), None)
    if pair is None:
        return
    st.warning(
        "This pair has no saved run to open: add `--save-run run.parity.npz` to its args."
        if sweep.saved_run(pair.name) is None
        else "This pair's saved run could not be opened (the sidebar says why).",
        icon=":material/info:",
    )
    folder = sweep.path / pair.name
    lines = [f"pair {pair.name}: {VERDICT_TEXT.get(pair.verdict, pair.verdict)}"]
    if pair.error or pair.failing:
        lines.append(pair.error or "failing: " + ", ".join(pair.failing))
    lines.append(f"attempts: {attempts_text(pair) or 'none recorded'}")
    lines += [f"report: {folder / REPORT}", f"log: {folder / LOG}"]
    if pair.html:
        lines.append(f"HTML report: {folder / pair.html}")
    st.text("\n".join(lines))  # names and messages are text, never markdown


def grid_frame(sweep: SweepFolder, pairs: list[PairResult] | None = None) -> pd.DataFrame:
    """Pairs x outputs: '✓' or the status, then the largest max abs over the input sets.

    Only pairs whose report has outputs get a row (`pairs`: those to consider, default all)."""
    names = sweep.output_names()
    rows = {}
    for p in sweep.pairs if pairs is None else pairs:
        cells = sweep.outputs.get(p.name, {})
        if not cells:
            continue
        row = {}
        for name in names:
            cell = cells.get(name)
            if cell is not None:
                if cell.intended:
                    mark = status_label(Status.FAIL, "marked", cell.intended)
                elif cell.hidden_bug and cell.status == "pass":
                    mark = HIDDEN_BUG_MARKED
                else:
                    mark = CELL_MARK.get(cell.status, f"✗ {cell.status}")
                row[name] = f"{mark} {number_text(cell.max_abs)}"
            else:
                row[name] = ""
        rows[p.name] = row
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=names)
    return frame.loc[:, [c for c in frame.columns if frame[c].astype(bool).any()]]


def _grid(sweep: SweepFolder, *, only_bad: bool) -> None:
    st.subheader("Pairs × outputs (max abs error)")
    pairs = shown_pairs(sweep, only_bad=only_bad)
    frame = grid_frame(sweep, pairs)
    left_out = len(pairs) - len(frame)
    if frame.empty or not len(frame.columns):
        st.caption("No pair report with outputs yet.")
        return
    st.caption(
        "Each cell: the output's worst status over the input sets and its largest max abs "
        f"error: green passes, {INTENDED_WORDS}, red fails by a bug or by what nothing "
        f"explains, or reads “{HIDDEN_BUG_MARKED}” (it passes only because its tolerance is "
        "looser than the default). Empty: that pair has no such output."
        + (f" {left_out} pair(s) without compared outputs are left out." if left_out else "")
    )
    st.dataframe(status_style(frame, None), width="stretch")


main()
