"""Issue 36: layer runs in threads (dashboard sessions, API callers) give their solo answers.

Two threads calling validate(layers=True) on demo:broken and demo:cnn named the wrong first
divergence in 3 of 3 repeats (alone: `Pad node_pad` and none): the exporter's decompositions
ran outside the export lock, and their unlocked `redirect_stdout(None)` could leave
`sys.stdout` as None for the whole process.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import parity


def _answer(demo: str) -> tuple[str, object, object]:
    run = parity.validate(f"demo:{demo}", layers=True)
    first = run.layers.first_divergence
    return (
        run.verdict,
        None if first is None else (first.onnx_op, first.onnx_node),
        tuple((v.onnx_value, v.status) for v in run.layers.values if v.input_set == 0),
    )


def test_concurrent_layer_runs_give_their_solo_answers() -> None:
    names = ["broken", "cnn", "broken"]
    solo = {name: _answer(name) for name in set(names)}
    assert solo["broken"][1] is not None and solo["broken"][1][0] == "Pad"
    assert solo["cnn"][1] is None
    stdout = sys.stdout
    for _ in range(2):
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            together = list(pool.map(_answer, names))
        for name, answer in zip(names, together, strict=True):
            assert answer == solo[name], name
    assert sys.stdout is stdout and sys.stdout is not None
