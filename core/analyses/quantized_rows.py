"""Per-output rows of the quantization analyses (weight-only ops and static QDQ / QOperator
files alike): each input set's judgement against torch with the file's weights, accumulated,
then each row as its QuantizedOutput. One place, so the two analyses judge and report alike."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from parity.judge.compare import compare_outputs
from parity.results import QuantizedOutput, ValidationRun

__all__ = ["judge_into", "outputs_of_rows"]


def judge_into(
    row: dict[str, Any], run: ValidationRun, case: Any, name: str, mine: Any, judged: Any
) -> None:
    """One input set of an output: `judged` against torch with the file's weights (`mine`)
    at the run's tolerance, into `row`'s worst "export" and whether it "passed" everywhere."""
    c = compare_outputs(
        mine,
        np.asarray(judged),
        name=name,
        input_set=case.input_set.index,
        tolerance=run.tolerances.for_output(name),
        exclude=case.exclusions.get(name),
    )
    worst = c.stats.max_abs if c.stats is not None else None
    if worst is not None:
        row["export"] = max(row["export"], worst)
    row["passed"] = (row["passed"] is not False) and c.status.passed


def outputs_of_rows(
    run: ValidationRun, rows: Mapping[str, Mapping[str, Any]]
) -> tuple[QuantizedOutput, ...]:
    """Each output's accumulated row (export, passed, signal, noise, max, broken) as its
    QuantizedOutput, in the run's output order."""
    out = []
    for name, row in rows.items():
        sqnr = None
        if row["noise"] > 0 and row["signal"] > 0:
            sqnr = float(10 * np.log10(row["signal"] / row["noise"]))
        if row.get("broken"):  # its weights give Inf/NaN where torch's are finite: not judged
            out.append(QuantizedOutput(name, None, None, None, quant_max_abs=math.inf))
            continue
        out.append(
            QuantizedOutput(
                name=name,
                export_max_abs=row["export"] if row["passed"] is not None else None,
                export_passed=row["passed"],
                sqnr_db=sqnr,
                quant_max_abs=row["max"],
            )
        )
    order = {n: k for k, n in enumerate(run.output_names)}
    return tuple(sorted(out, key=lambda o: order.get(o.name, len(order))))
