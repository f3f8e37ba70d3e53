"""What a lower-precision candidate should keep in higher precision, found from the layers
comparison and checked before it is said: a QDQ file's worst-quantized tensor
(parity.layers.qdq), a float16/bfloat16 file's nodes to keep in float32 (parity.layers.fp16).

`Recorder` sees each compared value while both sides' arrays exist (parity.layers.onnx_side's
`on_values`) and keeps numbers only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity.layers.onnx_side import Match, sqnr_db
from parity.layers.qdq import Quantized
from parity.layers.result import LayersResult


@dataclass
class Recorder:
    quantized: list[Quantized] = field(default_factory=list)
    sixteen_bit: set[str] = field(default_factory=set)  # 16-bit dtypes the candidate holds

    def on_values(
        self, s: int, match: Match, ref: np.ndarray, cand_values: Mapping[str, np.ndarray]
    ) -> None:
        after = cand_values[match.candidate]
        if str(after.dtype) in ("float16", "bfloat16"):
            self.sixteen_bit.add(str(after.dtype))
        if match.quantized:
            before = cand_values[match.before]
            self.quantized.append(
                Quantized(
                    match.reference,
                    s,
                    sqnr_db(ref, before),
                    sqnr_db(ref, after),
                    sqnr_db(before, after),
                )
            )


def precision_findings(
    result: LayersResult,
    reference: Any,
    candidate: Any,
    input_sets: Sequence[Any],
    recorder: Recorder,
    config: Any,
) -> LayersResult:
    """`result` with what the candidate's precision calls for (unchanged for a float32
    candidate that quantizes nothing)."""
    if recorder.quantized:
        from parity.layers.qdq import qdq_findings

        return qdq_findings(result, reference, candidate, input_sets, recorder.quantized)
    if recorder.sixteen_bit:
        from parity.layers.fp16 import fp16_findings

        dtype = "float16" if "float16" in recorder.sixteen_bit else "bfloat16"
        return fp16_findings(result, reference, candidate, input_sets, config, dtype)
    return result
