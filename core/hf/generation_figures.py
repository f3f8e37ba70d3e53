"""The KV cache of a causal LM run as steps x layers grids, one for keys and one for values.

Each cell is one `present.{i}.key/value` output of one generate() step, coloured by its
worst error ÷ allowed error like every grid of the app (parity.show.figures.judgement_grid):
a cache that drifts from one layer on, or from one step on, shows as a band.
"""

from __future__ import annotations

import plotly.graph_objects as go

from parity.hf.feeds import PRESENT_NAME
from parity.labels import set_label
from parity.results import ValidationRun
from parity.show.figures import GridCell, judgement_grid

KINDS = ("key", "value")


def cache_layers(run: ValidationRun) -> tuple[int, ...]:
    """The layers whose present key/value the run compared (() for a run without a cache)."""
    found = {int(m.group(1)) for c in run.outputs if (m := PRESENT_NAME.match(c.name))}
    return tuple(sorted(found))


def kv_cache_grid(run: ValidationRun, kind: str) -> go.Figure | None:
    """Steps x layers of `present.{i}.{kind}` (kind "key" or "value"); None without a cache.
    A click on a cell selects (input set, output name), as on the verdict grid."""
    layers = cache_layers(run)
    if not layers:
        return None
    sets = [s.index for s in run.input_sets] or sorted({c.input_set for c in run.outputs})
    labels = {s: set_label(run, s) for s in sets}
    cells = []
    for c in run.outputs:
        m = PRESENT_NAME.match(c.name)
        if m and m.group(2) == kind and c.input_set in labels:
            cell = GridCell(labels[c.input_set], f"layer {m.group(1)}", c, (c.input_set, c.name))
            cells.append(cell)
    return judgement_grid(
        cells,
        rows=[labels[s] for s in sets],
        columns=[f"layer {i}" for i in layers],
        title=f"KV cache {kind}s: generate() steps × layers (colour: worst error ÷ allowed)",
        column_title="layer",
    )
